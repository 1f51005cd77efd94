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
//! | `openai.rs` | the wire format: requests, responses, chunks, errors (serde) |
//! | `validate.rs` | request → engine request; every refusal names its field |
//! | `text.rs` | ids → text pieces without broken UTF-8, cut at stop strings |
//! | `generation.rs` | one request's pieces, shared by streamed and whole answers |
//! | `sse.rs` | streamed answers; a client that leaves cancels its request |
//! | `routes.rs` | the endpoints |
//! | `error.rs` | OpenAI-style error bodies, including axum's own rejections |
//! | `metrics.rs` | `GET /metrics` in Prometheus' text format |
//! | `loadtest.rs`, `workload.rs` | `kvlab loadtest`: a seeded Poisson workload against a server |

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

use crate::engine::{EngineConfig, EngineHandle};
use crate::error::Result;
use crate::model::Model;
use crate::tokenizer::Tokenizer;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use validate::ServedModel;

/// How a server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The name clients send as `"model"`.
    pub model_name: String,
    pub engine: EngineConfig,
    /// Larger request bodies are refused with 413 before they are parsed.
    pub max_body_bytes: usize,
    /// `max_tokens` when a request gives none.
    pub default_max_tokens: usize,
}

impl ServerConfig {
    pub fn new(model_name: &str) -> ServerConfig {
        ServerConfig {
            model_name: model_name.to_string(),
            engine: EngineConfig::default(),
            // A prompt of the whole 8192-token context is ~40 KB of text.
            max_body_bytes: 1 << 20,
            default_max_tokens: 256,
        }
    }
}

/// What every handler shares: the engine, the tokenizer, the served model's limits.
pub struct App {
    pub engine: EngineHandle,
    pub tokenizer: Tokenizer,
    pub served: ServedModel,
    pub policy: crate::engine::Policy,
    max_body_bytes: usize,
    /// Unix time the server started (`/v1/models`' `created`).
    started: u64,
    next_response: AtomicU64,
    rejected_queue_full: AtomicU64,
    rejected_invalid: AtomicU64,
}

impl App {
    /// Starts the engine on `model` and wraps it for the routes.
    pub fn new(model: Arc<Model>, tokenizer: Tokenizer, config: ServerConfig) -> Result<Arc<App>> {
        let served = ServedModel {
            name: config.model_name.clone(),
            max_context: model.config.max_position_embeddings,
            vocab_size: model.config.vocab_size,
            eos_ids: model.config.eos_ids(),
            default_max_tokens: config.default_max_tokens,
        };
        let policy = config.engine.policy;
        let engine = EngineHandle::spawn(model, config.engine)?;
        Ok(Arc::new(App {
            engine,
            tokenizer,
            served,
            policy,
            max_body_bytes: config.max_body_bytes,
            started: routes::unix_time(),
            next_response: AtomicU64::new(0),
            rejected_queue_full: AtomicU64::new(0),
            rejected_invalid: AtomicU64::new(0),
        }))
    }

    fn response_id(&self, endpoint: sse::Endpoint) -> String {
        let n = self.next_response.fetch_add(1, Ordering::Relaxed);
        match endpoint {
            sse::Endpoint::Chat => format!("chatcmpl-{n}"),
            sse::Endpoint::Completion => format!("cmpl-{n}"),
        }
    }

    /// A seed for a sampled request that brings none: differs between requests (as
    /// OpenAI's unseeded sampling does), from the clock and a counter.
    fn fallback_seed(&self) -> u64 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        nanos ^ self.next_response.load(Ordering::Relaxed).rotate_left(32)
    }

    fn counters(&self) -> metrics::ServerCounters {
        metrics::ServerCounters {
            rejected_queue_full: self.rejected_queue_full.load(Ordering::Relaxed),
            rejected_invalid: self.rejected_invalid.load(Ordering::Relaxed),
        }
    }
}

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
