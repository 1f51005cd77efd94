//! What every handler shares: the engine, the tokenizer, the served model's limits, and
//! the counters of refused requests.

use super::limits::{ConnectionCounts, Limits};
use super::metrics::ServerCounters;
use super::openai::Endpoint;
use super::validate::ServedModel;
use crate::batch::BatchModel;
use crate::cache::KvElement;
use crate::engine::{EngineConfig, EngineHandle, TraceWriter, View};
use crate::error::Result;
use crate::tokenizer::Tokenizer;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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
    /// What one client may hold: connections, clocks (src/server/limits.rs).
    pub limits: Limits,
    /// Every route but `/health` and the live view's page asks for `Authorization:
    /// Bearer <key>` when set.
    pub api_key: Option<String>,
    /// Writes the engine's snapshots to this file as a Chrome trace (`--record`).
    pub record: Option<std::path::PathBuf>,
}

impl ServerConfig {
    pub fn new(model_name: &str) -> ServerConfig {
        ServerConfig {
            model_name: model_name.to_string(),
            engine: EngineConfig::default(),
            // A prompt of the whole 8192-token context is ~40 KB of text.
            max_body_bytes: 1 << 20,
            default_max_tokens: 256,
            limits: Limits::default(),
            api_key: None,
            record: None,
        }
    }
}

/// What the server runs, as `GET /health` reports it (the load test records it beside
/// its figures, so a table of runs says what each row served with).
#[derive(Debug, Clone, Serialize)]
pub struct Setup {
    pub policy: &'static str,
    /// The weights' format (`--dtype`, `--layout`): "bf16 in panels".
    pub weights: String,
    /// What the pool stores (`--kv`): "full", "int8", ...
    pub kv: &'static str,
    pub block_size: usize,
    /// Bytes of one position (K and V, every layer) as the pool stores it.
    pub kv_bytes_per_token: usize,
    /// Positions the whole pool holds (its blocks x the block size).
    pub pool_positions: usize,
    /// The engine's drafts (`--speculative`): "none", or "ngram:3 k=4".
    pub speculation: String,
}

/// What every handler shares: the engine, the tokenizer, the served model's limits.
pub struct App {
    pub engine: EngineHandle,
    pub tokenizer: Arc<Tokenizer>,
    pub served: ServedModel,
    pub policy: crate::engine::Policy,
    pub setup: Setup,
    pub(super) max_body_bytes: usize,
    pub limits: Limits,
    pub(super) api_key: Option<String>,
    pub connections: Arc<ConnectionCounts>,
    /// Unix time the server started (`/v1/models`' `created`).
    pub(super) started: u64,
    next_response: AtomicU64,
    pub(super) rejected_queue_full: AtomicU64,
    pub(super) rejected_invalid: AtomicU64,
    pub(super) rejected_unauthorized: AtomicU64,
    pub(super) streams_stalled: AtomicU64,
    pub(super) bodies_timed_out: AtomicU64,
    /// Set when the server starts to stop: the live view's event streams end.
    pub(super) stopping: tokio::sync::watch::Sender<bool>,
}

impl App {
    /// Starts the engine on `model` and wraps it for the routes.
    pub fn new(
        model: Arc<dyn BatchModel>,
        tokenizer: Tokenizer,
        config: ServerConfig,
    ) -> Result<Arc<App>> {
        let served = ServedModel {
            name: config.model_name.clone(),
            max_context: model.config().max_position_embeddings,
            vocab_size: model.config().vocab_size,
            eos_ids: model.config().eos_ids(),
            default_max_tokens: config.default_max_tokens,
        };
        let policy = config.engine.policy;
        let element = KvElement::for_pool(model.config(), config.engine.kv, "paged")?;
        let weights = model.weights();
        let kv_bytes_per_token = element.bytes_per_token(model.config());
        let (kv, block_size) = (config.engine.kv.name(), config.engine.block_size);
        let speculation = match config.engine.speculation {
            Some(s) => format!("ngram:{} k={}", s.ngram, s.draft_len),
            None => "none".to_string(),
        };
        let tokenizer = Arc::new(tokenizer);
        let for_view = tokenizer.clone();
        let view = View {
            // A token's text, lossy at a cut UTF-8 character: this is for eyes only.
            text: Arc::new(move |ids: &[u32]| for_view.decode(ids).unwrap_or_default()),
            record: config
                .record
                .as_deref()
                .map(TraceWriter::create)
                .transpose()?,
        };
        let engine = EngineHandle::spawn_with_view(model, config.engine, view)?;
        // Before the first request every block is free: the pool's size.
        let pool_blocks = engine.metrics().kv_blocks_free;
        let setup = Setup {
            policy: policy.name(),
            weights,
            kv,
            block_size,
            kv_bytes_per_token,
            pool_positions: pool_blocks * block_size,
            speculation,
        };
        Ok(Arc::new(App {
            engine,
            tokenizer,
            served,
            policy,
            setup,
            max_body_bytes: config.max_body_bytes,
            limits: config.limits,
            api_key: config.api_key,
            connections: Arc::new(ConnectionCounts::default()),
            started: unix_time(),
            next_response: AtomicU64::new(0),
            rejected_queue_full: AtomicU64::new(0),
            rejected_invalid: AtomicU64::new(0),
            rejected_unauthorized: AtomicU64::new(0),
            streams_stalled: AtomicU64::new(0),
            bodies_timed_out: AtomicU64::new(0),
            stopping: tokio::sync::watch::channel(false).0,
        }))
    }

    pub(super) fn response_id(&self, endpoint: Endpoint) -> String {
        let n = self.next_response.fetch_add(1, Ordering::Relaxed);
        match endpoint {
            Endpoint::Chat => format!("chatcmpl-{n}"),
            Endpoint::Completion => format!("cmpl-{n}"),
        }
    }

    /// A seed for a sampled request that brings none: differs between requests (as
    /// OpenAI's unseeded sampling does), from the clock and a counter.
    pub(super) fn fallback_seed(&self) -> u64 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        nanos ^ self.next_response.load(Ordering::Relaxed).rotate_left(32)
    }

    pub(super) fn counters(&self) -> ServerCounters {
        ServerCounters {
            rejected_queue_full: self.rejected_queue_full.load(Ordering::Relaxed),
            rejected_invalid: self.rejected_invalid.load(Ordering::Relaxed),
            rejected_unauthorized: self.rejected_unauthorized.load(Ordering::Relaxed),
            streams_stalled: self.streams_stalled.load(Ordering::Relaxed),
            bodies_timed_out: self.bodies_timed_out.load(Ordering::Relaxed),
            connections_open: self.connections.open(),
            connections_peak: self.connections.peak(),
            connections_accepted: self.connections.accepted(),
            engine_restarts: self.engine.restarts(),
        }
    }
}

/// Seconds since the Unix epoch (OpenAI's `created`).
pub fn unix_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
