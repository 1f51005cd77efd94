//! The live view (book: live-view.md): a page built into the binary, and the engine's
//! snapshots as server-sent events for it to draw.
//!
//! The page (`web/`) is three static files compiled in with `include_str!`: nothing is
//! fetched from the internet, and a fresh `cargo build` serves them. They hold no data,
//! so they are open like `/health`; the data comes through `GET /v1/engine/events`,
//! which asks for the API key like every other route (the page sends it with `fetch`,
//! which can set `Authorization`, where `EventSource` cannot).

use super::app::App;
use super::sse::send;
use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

/// The page and its assets, as served (paths relative to the server's root).
pub const ASSETS: [(&str, &str, &str); 3] = [
    (
        "/",
        "text/html; charset=utf-8",
        include_str!("../../web/index.html"),
    ),
    (
        "/ui/kvview.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/kvview.js"),
    ),
    (
        "/ui/kvview.css",
        "text/css; charset=utf-8",
        include_str!("../../web/kvview.css"),
    ),
];

/// Whether `path` is one of the page's files (served without the key: they hold no data).
pub fn is_asset(path: &str) -> bool {
    ASSETS.iter().any(|(p, _, _)| *p == path)
}

/// `GET /`: the page.
#[utoipa::path(get, path = "/", security(()),
    responses((status = 200, description = "The live view (book: live-view.md)", content_type = "text/html", body = String)))]
pub async fn page(uri: axum::http::Uri) -> Response {
    asset(uri).await
}

/// `GET /ui/{file}`: the page's script and style; any other file is a 404 (asked for
/// with the key: only the page's own files are open).
#[utoipa::path(get, path = "/ui/{file}", security(()),
    params(("file" = String, Path, description = "`kvview.js` or `kvview.css`")),
    responses((status = 200, description = "The page's script or style",
            content((String = "text/javascript"), (String = "text/css"))),
        (status = 404, description = "Not one of the page's files", body = super::openai::ErrorBody),
        super::error::KeyRefusal))]
pub async fn asset(uri: axum::http::Uri) -> Response {
    match ASSETS.iter().find(|(p, _, _)| *p == uri.path()) {
        Some((_, kind, body)) => ([(header::CONTENT_TYPE, *kind)], *body).into_response(),
        None => super::error::not_found(uri).await.into_response(),
    }
}

// ANCHOR: events
/// `GET /v1/engine/events`: a `snapshot` event after every iteration (the first one
/// at once, even when the engine is idle). A watcher that reads slowly skips to the
/// latest snapshot, one that reads nothing for `--stream-stall-s` is let go, and every
/// stream ends when the server starts to stop, so a page left open does not hold the drain.
#[utoipa::path(get, path = "/v1/engine/events",
    responses((status = 200, description = "Server-sent events: `event: snapshot`, `data:` a snapshot of the engine (blocks, owners, requests, batch; version 1, book: live-view.md)", content_type = "text/event-stream", body = String),
        super::error::KeyRefusal))]
pub async fn events(State(app): State<Arc<App>>) -> Response {
    let mut snapshots = app.engine.watch();
    let mut stopping = app.stopping.subscribe();
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(4);
    tokio::spawn(async move {
        loop {
            let json = tokio::select! {
                next = snapshots.recv() => match next {
                    Ok(json) => json,
                    // Each snapshot is whole: the next one is all a late reader needs.
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return,
                },
                _ = stopping.wait_for(|stopping| *stopping) => return,
                _ = tx.closed() => return,
            };
            let event = Event::default().event("snapshot").data(&*json);
            // A watcher that reads nothing waits here: the stop must reach it here too.
            let sent = tokio::select! {
                sent = send(&app, &tx, event) => sent,
                _ = stopping.wait_for(|stopping| *stopping) => false,
            };
            if !sent {
                return;
            }
        }
    });
    let body = ReceiverStream::new(rx).map(Ok::<Event, Infallible>);
    Sse::new(body)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
        .into_response()
}
// ANCHOR_END: events
