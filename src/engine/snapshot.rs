//! The engine as a picture: after an iteration, every block of the pool with its owners,
//! every request with its text, and the batch the pass ran (book: live-view.md).
//!
//! A snapshot is whole, not a diff: a viewer that joins late, or misses frames because
//! it reads slowly, draws the right picture from the next one it gets. The live view
//! (`GET /`), the event stream (`GET /v1/engine/events`) and recordings
//! (`kvlab serve --record`, `kvlab record`, `trace.rs`) all carry this one type.
//!
//! Versioned: [`SNAPSHOT_VERSION`] changes whenever a field changes meaning or goes away
//! (adding a field does not), so a replay of an old recording can say it is too old
//! instead of drawing nonsense.

use super::engine::{Engine, StepReport};
use crate::cache::paged::HOLE;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The version of [`Snapshot`] (its fields and what they mean).
pub const SNAPSHOT_VERSION: u32 = 1;

/// Turns token ids into text (the server's tokenizer); the engine itself knows only ids.
pub type TokenText = dyn Fn(&[u32]) -> String + Send + Sync;

// ANCHOR: snapshot
/// The engine after iteration `iteration` (or between iterations, when `rows` is empty).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    pub version: u32,
    /// Iterations the engine has run, this one included.
    pub iteration: u64,
    /// Microseconds since the engine started, at the end of this iteration.
    pub t_us: u64,
    /// Wall time of this iteration's schedule + forward pass + sampling (0 between iterations).
    pub seconds: f64,
    /// What one iteration may run.
    pub budget: Budget,
    /// This iteration's forward pass, one entry per request, in row order.
    pub batch: Vec<BatchRows>,
    pub pool: Pool,
    /// Running requests (admission order), then waiting ones (queue order).
    pub requests: Vec<RequestView>,
    /// Requests that left this iteration, and why.
    pub finished: Vec<u64>,
    pub preempted: Vec<u64>,
    pub cancelled: Vec<u64>,
    pub failed: Vec<u64>,
    /// Latencies observed this iteration, in milliseconds: time to first token of the
    /// requests that got their first token, and gaps between two tokens of the others.
    pub ttft_ms: Vec<f64>,
    pub inter_token_ms: Vec<f64>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Budget {
    pub max_batch_tokens: usize,
    pub max_batch_seqs: usize,
}

/// One request's rows in the pass.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct BatchRows {
    pub id: u64,
    /// `decode`: its one pending token (plus drafts); `prefill`: a chunk of its prompt.
    pub kind: RowKind,
    pub start_pos: usize,
    /// Rows in the pass, drafts included.
    pub rows: usize,
    /// Of `rows`, speculative drafts (`--speculative`).
    pub drafts: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RowKind {
    Decode,
    Prefill,
}

/// The block pool, block by block.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pool {
    pub block_size: usize,
    pub block_bytes: usize,
    /// What a block stores (`--kv`): "full" (f32), "int8", ...
    pub kv: String,
    /// `blocks[b]` is block `b` of the pool.
    pub blocks: Vec<Block>,
    /// In at least one block table.
    pub used: usize,
    pub free: usize,
    /// Held by nobody, kept for the prefix cache (reused first by a matching prompt,
    /// evicted least-recently-used first when the pool runs short).
    pub parked: usize,
    /// Used by more than one request (a shared prefix).
    pub shared: usize,
}

// ANCHOR: block
/// One block: who holds it. A free block is `{}` on the wire.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    /// Requests whose block tables hold it (more than one: a shared prefix).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<u64>,
    /// The pool's reference count (block tables holding it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refs: u32,
    /// Named by the prefix cache: a later prompt with the same tokens reuses it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub named: bool,
    /// Held by nobody, named: parked in the prefix cache's LRU.
    #[serde(default, skip_serializing_if = "is_false")]
    pub parked: bool,
}
// ANCHOR_END: block
// ANCHOR_END: snapshot

fn is_zero(n: &u32) -> bool {
    *n == 0
}
fn is_false(b: &bool) -> bool {
    !*b
}

/// One request, running or waiting.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestView {
    pub id: u64,
    pub state: RequestState,
    pub prompt_tokens: usize,
    /// Positions whose K and V are in the pool.
    pub computed: usize,
    pub generated: usize,
    pub max_tokens: usize,
    /// Prompt positions the prefix cache gave it at admission.
    pub cached_prompt_tokens: usize,
    /// Blocks in its block table.
    pub blocks: usize,
    /// The end of its prompt, as text.
    pub prompt_tail: String,
    /// What it has generated so far, as text.
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestState {
    Running,
    Waiting,
}

impl RequestState {
    pub fn is_running(self) -> bool {
        self == RequestState::Running
    }
}

/// Prompt tokens shown as a request's `prompt_tail`.
const PROMPT_TAIL_TOKENS: usize = 24;

impl Engine {
    // ANCHOR: engine_snapshot
    /// The engine now, after `report`'s iteration (`None`: between iterations), at
    /// `t_us` microseconds since it started; `text` turns ids into text.
    pub fn snapshot(
        &self,
        report: Option<&StepReport>,
        t_us: u64,
        text: &dyn Fn(&[u32]) -> String,
    ) -> Snapshot {
        let cache = self.cache();
        let pool = cache.pool();
        let mut blocks = vec![Block::default(); pool.n_blocks()];
        let mut requests = Vec::new();
        for (id, state) in (self
            .running_ids()
            .iter()
            .map(|&id| (id, RequestState::Running)))
        .chain(self.waiting_ids().map(|id| (id, RequestState::Waiting)))
        {
            let seq = self.sequence(id);
            // Every layer group's table (one, for a model without local layers).
            let tables = (seq.seq_id)
                .and_then(|s| cache.block_tables(s))
                .unwrap_or_default();
            let held: Vec<usize> = tables
                .iter()
                .flat_map(|t| t.iter().copied().filter(|&b| b != HOLE))
                .collect();
            for &b in &held {
                blocks[b].owners.push(id);
            }
            let prompt = &seq.tokens[..seq.request.prompt.len()];
            let tail = prompt.len().saturating_sub(PROMPT_TAIL_TOKENS);
            requests.push(RequestView {
                id,
                state,
                prompt_tokens: prompt.len(),
                computed: seq.n_computed,
                generated: seq.generated,
                max_tokens: seq.request.max_tokens,
                cached_prompt_tokens: seq.cached_prompt_tokens.unwrap_or(0),
                blocks: held.len(),
                prompt_tail: text(&prompt[tail..]),
                text: text(&seq.tokens[prompt.len()..]),
            });
        }
        let prefix = cache.prefix();
        for (b, block) in blocks.iter_mut().enumerate() {
            block.refs = pool.ref_count(b);
            block.named = prefix.is_some_and(|p| p.is_named(b));
            block.parked = prefix.is_some_and(|p| p.is_parked(b));
        }
        let count = |f: fn(&Block) -> bool| blocks.iter().filter(|b| f(b)).count();
        let pool_view = Pool {
            block_size: pool.block_size(),
            block_bytes: cache.block_bytes(),
            kv: self.config().kv.name().to_string(),
            used: count(|b| b.refs > 0),
            free: pool.n_free(),
            parked: count(|b| b.parked),
            shared: count(|b| b.refs > 1),
            blocks,
        };
        let empty = StepReport::default();
        let r = report.unwrap_or(&empty);
        Snapshot {
            version: SNAPSHOT_VERSION,
            iteration: self.metrics().iterations,
            t_us,
            seconds: r.seconds,
            budget: Budget {
                max_batch_tokens: self.config().max_batch_tokens,
                max_batch_seqs: self.config().max_batch_seqs,
            },
            batch: (r.rows.iter())
                .map(|run| BatchRows {
                    id: run.id,
                    kind: if run.decode {
                        RowKind::Decode
                    } else {
                        RowKind::Prefill
                    },
                    start_pos: run.start_pos,
                    rows: run.rows,
                    drafts: run.drafts,
                })
                .collect(),
            pool: pool_view,
            requests,
            finished: r.finished.clone(),
            preempted: r.preempted.clone(),
            cancelled: r.cancelled.clone(),
            failed: failed_ids(r),
            ttft_ms: r.ttft_seconds.iter().map(|s| s * 1e3).collect(),
            inter_token_ms: r.inter_token_seconds.iter().map(|s| s * 1e3).collect(),
        }
    }
    // ANCHOR_END: engine_snapshot
}

/// Requests whose `Failed` event this iteration sent.
fn failed_ids(report: &StepReport) -> Vec<u64> {
    let failed = (report.events.iter())
        .filter(|(_, event)| matches!(event, super::request::Event::Failed { .. }))
        .map(|(id, _)| *id);
    failed.collect::<BTreeSet<u64>>().into_iter().collect()
}
