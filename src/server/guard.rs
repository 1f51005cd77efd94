//! What a request must show before a route sees it (book: serving-http.md, "Running kvlab
//! serve safely"): the API key, and a body that arrives whole, in time.
//!
//! The key: every route but `GET /health` asks for it when the server has one.
//! OpenAI's clients send `Authorization: Bearer <key>` (RFC 6750). A plain `==` on the
//! key returns at the first byte that differs, so the time a refusal takes tells an
//! attacker how many leading bytes were right, and the key can be guessed byte by byte;
//! `subtle`'s comparison reads every byte whatever they hold.

use super::app::App;
use super::error::ApiError;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use subtle::ConstantTimeEq;

// ANCHOR: require_key
/// Lets a request through when the server has no key, when it asks for `/health` (a load
/// balancer's probe carries no key) or the live view's page (static files: the data it
/// shows comes from `/v1/engine/events`, which needs the key), or when it carries the
/// key; else 401.
pub async fn require_key(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let Some(key) = &app.api_key else {
        return next.run(request).await;
    };
    let path = request.uri().path();
    if path == "/health" || super::view::is_asset(path) {
        return next.run(request).await;
    }
    let sent = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match sent {
        Some(sent) if keys_equal(sent, key) => next.run(request).await,
        _ => {
            app.rejected_unauthorized.fetch_add(1, Ordering::Relaxed);
            ApiError::unauthorized(sent.is_some()).into_response()
        }
    }
}
// ANCHOR_END: require_key

// ANCHOR: body_in_time
/// Reads the whole body within `body_timeout` and under `max_body_bytes`, then hands it to
/// the route. hyper's head timeout ends where the body starts: without this clock a
/// client that sends its body a byte a minute holds its connection as long as it likes.
pub async fn body_in_time(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let limited = Limited::new(body, app.max_body_bytes);
    let bytes = match tokio::time::timeout(app.limits.body_timeout, limited.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) => {
            app.rejected_invalid.fetch_add(1, Ordering::Relaxed);
            return match e.is::<LengthLimitError>() {
                true => ApiError::body_too_large(),
                false => ApiError::body_unreadable(&e.to_string()),
            }
            .into_response();
        }
        Err(_) => {
            app.bodies_timed_out.fetch_add(1, Ordering::Relaxed);
            let seconds = app.limits.body_timeout.as_secs_f64();
            return ApiError::body_timeout(seconds).into_response();
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
// ANCHOR_END: body_in_time

/// `sent == key`, in a time that depends on the lengths only.
fn keys_equal(sent: &str, key: &str) -> bool {
    sent.as_bytes().ct_eq(key.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::keys_equal;

    #[test]
    fn keys_equal_only_when_every_byte_is() {
        assert!(keys_equal("sk-abc", "sk-abc"));
        assert!(!keys_equal("sk-abd", "sk-abc"));
        assert!(!keys_equal("sk-ab", "sk-abc"));
        assert!(!keys_equal("", "sk-abc"));
    }
}
