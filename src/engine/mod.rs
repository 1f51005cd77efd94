//! A serving engine: many requests at once over one paged KV pool, with continuous
//! batching and chunked prefill (book: scheduling.md, §5.1 of the article).
//!
//! | file | what it holds |
//! |---|---|
//! | `request.rs` | the API: requests, sampling, events, policies, submit errors, and whether a request can ever run |
//! | `sequence.rs` | one request inside the engine: tokens, how many are cached, its sampler |
//! | `scheduler.rs` | which rows run next: the token budget, decodes first, prefill chunks |
//! | `engine.rs` | one iteration: schedule, preempt, one batched forward pass, sample, retire |
//! | `handle.rs` | the loop on its own thread; the handle and streams a server uses |
//! | `metrics.rs` | counters and latency histograms |
//! | `snapshot.rs` | the engine as a picture after an iteration: blocks, owners, requests, batch (the live view) |
//! | `trace.rs` | recordings: snapshots written as a Chrome trace (Perfetto opens it; the live view replays it) |
//! | `transfer.rs` | prefill/decode disaggregation: a finished prefill's KV rows and their wire format |
//!
//! The batched forward pass itself is `src/batch.rs`; what it asks of the pool, `src/cache/source.rs`.

#[allow(clippy::module_inception)]
mod engine;
mod handle;
mod metrics;
mod request;
pub mod scheduler;
mod sequence;
mod snapshot;
mod trace;
mod transfer;

pub use engine::{Engine, Role, RowsRun, StepReport};
pub use handle::{EngineHandle, Fault, RequestStream, View};
pub use metrics::{EngineMetrics, Histogram};
pub use request::{
    validate, EngineConfig, Event, FinishReason, Policy, Request, SamplingParams, Speculation,
    SubmitError, Validated,
};
pub use sequence::Sequence;
pub use snapshot::{
    BatchRows, Block, Budget, Pool, RequestState, RequestView, RowKind, Snapshot, TokenText,
    SNAPSHOT_VERSION,
};
pub use trace::{read_snapshots, TraceWriter};
pub use transfer::KvTransfer;
