//! An OpenAI-compatible HTTP server over one engine (book: serving.md, §5.1 of the article).
//!
//! Many clients, one model: each HTTP request becomes an engine [`Request`](crate::engine::Request),
//! and the engine's scheduler (src/engine/) batches them on its own thread. The server is
//! the part that speaks HTTP: it renders chat messages with the model's template, turns
//! token ids back into text as they come, and refuses what cannot run with a status and
//! an OpenAI-style error body, so that the official clients work against it unchanged.
//!
//! | file | what it holds |
//! |---|---|
//! | `app.rs` | what every handler shares: the engine, the tokenizer, the limits, the counters |
//! | `openai.rs` | the wire format: requests, responses, chunks, errors (serde) |
//! | `validate.rs` | request → engine request; every refusal names its field |
//! | `text.rs` | ids → text pieces without broken UTF-8, cut at stop strings |
//! | `generation.rs` | one request's pieces, shared by streamed and whole answers |
//! | `sse.rs` | streamed answers; a client that leaves cancels its request |
//! | `routes.rs` | the endpoints |
//! | `error.rs` | OpenAI-style error bodies, including axum's own rejections |
//! | `metrics.rs` | `GET /metrics` in Prometheus' text format |
//! | `loadtest.rs`, `workload.rs` | `kvlab loadtest`: a seeded Poisson workload against a server |

pub mod app;
pub mod error;
pub mod generation;
pub mod loadtest;
pub mod metrics;
pub mod openai;
mod routes;
pub mod sse;
pub mod text;
pub mod validate;
pub mod workload;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use std::future::Future;
use std::sync::Arc;

pub use app::{App, ServerConfig};

// ANCHOR: router
/// Every route, with OpenAI-style errors for unknown paths, wrong methods and bodies
/// over the limit.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(routes::chat_completions))
        .route("/v1/completions", post(routes::completions))
        .route("/v1/models", get(routes::models))
        .route("/health", get(routes::health))
        .route("/metrics", get(routes::metrics))
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(DefaultBodyLimit::max(app.max_body_bytes))
        .with_state(app)
}
// ANCHOR_END: router

/// Serves `app` on `listener` until `shutdown` resolves, then stops the engine.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let engine = app.engine.clone();
    let result = axum::serve(listener, router(app))
        .with_graceful_shutdown(shutdown)
        .await;
    engine.shutdown();
    result
}
