//! The engine loop's one iteration, synchronous and single-threaded (book: scheduling.md).
//!
//! Every [`Engine::step`]: drop the cancelled requests, pick the rows of the running
//! sequences under the token budget ([`super::scheduler`]), make sure the KV pool has
//! blocks for them (preempting the youngest request if not), admit waiting requests
//! into what is left, run **one** batched forward pass over all picked rows
//! (`Model::forward_batch`), sample a token for each sequence whose rows reached its
//! end, and retire the finished ones. Requests join and leave at every iteration
//! (Orca's iteration-level scheduling, Yu et al. 2022). With speculation
//! ([`super::Speculation`]) a greedy request that decodes also runs its prompt-lookup
//! drafts as rows of the same pass, keeps those its own choices agree with, and gives
//! back the blocks of the rest.
//!
//! The thread, the channels and the streams are in `handle.rs`; this file is what the
//! tests and the offline benchmarks drive directly.

use super::metrics::EngineMetrics;
use super::request::{
    validate, EngineConfig, Event, FinishReason, Request, SubmitError, Validated,
};
use super::scheduler::{pick_batch, prefill_chunk, Budget, Candidate, Scheduled};
use super::sequence::Sequence;
use super::transfer::KvTransfer;
use crate::batch::BatchModel;
use crate::cache::paged::Retention;
use crate::cache::source::PagedBatch;
use crate::cache::{KvElement, KvStore, PagedCache, SeqId};
use crate::error::{Error, Result};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

/// Rows of one sequence in one iteration.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RowsRun {
    pub id: u64,
    /// Position of its first row.
    pub start_pos: usize,
    pub rows: usize,
    /// Whether the chunk reached the end of its tokens (a token was sampled).
    pub sampled: bool,
    /// Its one pending generated token (a decode step), not a chunk of its prompt.
    pub decode: bool,
    /// Of `rows`, speculative drafts.
    pub drafts: usize,
}

/// What one iteration did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StepReport {
    pub iteration: u64,
    /// The batch of the forward pass, in row order.
    pub rows: Vec<RowsRun>,
    /// Every event, in order, with its request id.
    pub events: Vec<(u64, Event)>,
    /// Tokens produced this iteration, per request id (as in `events`).
    pub tokens: Vec<(u64, u32)>,
    pub finished: Vec<u64>,
    /// Requests preempted this iteration (blocks freed, back to the waiting queue).
    pub preempted: Vec<u64>,
    pub cancelled: Vec<u64>,
    /// Latencies observed this iteration: to first token, and between two tokens.
    pub ttft_seconds: Vec<f64>,
    pub inter_token_seconds: Vec<f64>,
    /// Prefill-only role: the requests that got their first token this iteration, with
    /// their KV rows (per request id), ready to ship to a decode engine (they have left this engine).
    #[serde(skip)]
    pub transfers: Vec<(u64, KvTransfer)>,
    /// With `capture_logits`: the logits each sampled token was drawn from.
    #[serde(skip)]
    pub logits: Vec<(u64, Vec<f32>)>,
    /// Wall time of the iteration.
    pub seconds: f64,
}

impl StepReport {
    pub fn n_rows(&self) -> usize {
        self.rows.iter().map(|r| r.rows).sum()
    }
}

/// What an engine does with a request: both phases, or one half of a disaggregated
/// pair (DistServe, Zhong et al. 2024; the rows travel as a [`KvTransfer`], `transfer.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// Prefill and decode (the default).
    #[default]
    Colocated,
    /// Prefill only: after its first token a request leaves as a [`KvTransfer`]
    /// (in `StepReport::transfers`).
    PrefillOnly,
    /// Decode only: requests come in through [`Engine::import`]; `add` refuses them.
    DecodeOnly,
}

/// The synchronous engine: a waiting queue, the running sequences, one paged pool.
pub struct Engine {
    model: Arc<dyn BatchModel>,
    config: EngineConfig,
    cache: PagedCache,
    seqs: HashMap<u64, Sequence>,
    /// Running sequences in admission order: the last is the youngest, preempted first.
    running: Vec<u64>,
    waiting: VecDeque<u64>,
    cancelled: BTreeSet<u64>,
    next_id: u64,
    metrics: EngineMetrics,
    /// Colocated (both phases), or one half of a disaggregated pair.
    role: Role,
}

impl Engine {
    /// An engine over `model` (any weight format: [`crate::batch::batch_model`]) with a
    /// KV pool of `config.kv_budget_bytes`.
    pub fn new(model: Arc<dyn BatchModel>, config: EngineConfig) -> Result<Engine> {
        if config.max_batch_tokens == 0 || config.max_batch_seqs == 0 {
            return Err(Error::InvalidArgument(
                "max_batch_tokens and max_batch_seqs must be at least 1".into(),
            ));
        }
        let element = KvElement::for_pool(model.config(), config.kv, "paged")?;
        let cache = PagedCache::with_budget(
            model.config(),
            element,
            config.block_size,
            config.kv_budget_bytes,
            config.prefix_caching,
        )?
        .with_retention(Retention::of(config.kv)?)?;
        Ok(Engine {
            model,
            config,
            cache,
            seqs: HashMap::new(),
            running: Vec::new(),
            waiting: VecDeque::new(),
            cancelled: BTreeSet::new(),
            next_id: 0,
            metrics: EngineMetrics::default(),
            role: Role::Colocated,
        })
    }

    /// Makes this engine one half of a disaggregated pair, or colocated again.
    pub fn set_role(&mut self, role: Role) {
        self.role = role;
    }
    pub fn role(&self) -> Role {
        self.role
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }
    pub fn cache(&self) -> &PagedCache {
        &self.cache
    }
    pub fn model(&self) -> &Arc<dyn BatchModel> {
        &self.model
    }

    /// Queues `request`; returns its id.
    pub fn add(&mut self, request: Request) -> std::result::Result<u64, SubmitError> {
        let id = self.next_id;
        self.add_as(id, request)?;
        Ok(id)
    }

    /// Queues `request` under the caller's `id`, once [`validate`] accepts it.
    pub fn add_as(&mut self, id: u64, request: Request) -> std::result::Result<(), SubmitError> {
        let valid =
            validate(self.model.config(), &self.config, request).map_err(SubmitError::Invalid)?;
        self.add_validated(id, valid)
    }

    /// Queues a request already validated for this engine's model and config under the
    /// caller's `id` (the handle checks on submit and numbers its streams itself).
    pub fn add_validated(
        &mut self,
        id: u64,
        valid: Validated,
    ) -> std::result::Result<(), SubmitError> {
        if self.role == Role::DecodeOnly {
            return Err(SubmitError::Invalid(Error::InvalidArgument(
                "this engine only decodes: give it requests with `import` (a KvTransfer from a prefill engine)".into(),
            )));
        }
        let request = valid.into_request();
        if self.waiting.len() >= self.config.max_waiting {
            return Err(SubmitError::QueueFull { retry_after_s: 1 });
        }
        if self.seqs.contains_key(&id) {
            return Err(SubmitError::Invalid(Error::InvalidArgument(format!(
                "request id {id} is already in the engine"
            ))));
        }
        self.next_id = self.next_id.max(id + 1);
        self.metrics.prompt_tokens += request.prompt.len() as u64;
        self.seqs.insert(id, Sequence::new(id, request));
        self.waiting.push_back(id);
        Ok(())
    }

    /// Cancels request `id`: its blocks are freed at the next iteration.
    pub fn cancel(&mut self, id: u64) {
        if self.seqs.contains_key(&id) {
            self.cancelled.insert(id);
        }
    }

    /// Whether a request is waiting, running or being cancelled.
    pub fn has_work(&self) -> bool {
        !self.running.is_empty() || !self.waiting.is_empty() || !self.cancelled.is_empty()
    }

    pub fn n_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Running requests, oldest first (the last is preempted first).
    pub fn running_ids(&self) -> &[u64] {
        &self.running
    }
    /// Waiting requests, in queue order.
    pub fn waiting_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.waiting.iter().copied()
    }
    /// Request `id`, waiting or running (panics on an id it does not hold).
    pub fn sequence(&self, id: u64) -> &Sequence {
        &self.seqs[&id]
    }

    /// Counters now, with the pool's blocks.
    pub fn metrics(&self) -> EngineMetrics {
        EngineMetrics {
            requests_running: self.running.len(),
            requests_waiting: self.waiting.len(),
            kv_blocks_used: self.cache.pool().n_used(),
            kv_blocks_free: self.cache.available(),
            ..self.metrics.clone()
        }
    }

    // ANCHOR: import_request
    /// Takes over a request prefilled elsewhere, under the caller's `id`: its rows
    /// written into blocks of this pool, and the request running in decode with its
    /// first token already emitted. `QueueFull` when the pool lacks the blocks now (try
    /// again after an iteration); `Invalid` when the transfer does not fit this model.
    pub fn import(&mut self, id: u64, t: &KvTransfer) -> std::result::Result<(), SubmitError> {
        t.check_fits(self.model.config(), &self.cache)
            .map_err(SubmitError::Invalid)?;
        if self.seqs.contains_key(&id) {
            return Err(SubmitError::Invalid(Error::InvalidArgument(format!(
                "request id {id} is already in the engine"
            ))));
        }
        let request = validate(self.model.config(), &self.config, t.request())
            .map_err(SubmitError::Invalid)?
            .into_request();
        // Its prompt's blocks, plus one for the next token when the prompt fills its last.
        if !self.cache.can_allocate(t.prompt.len() + 1) {
            return Err(SubmitError::QueueFull { retry_after_s: 0 });
        }
        let seq_id = t
            .write_into(&mut self.cache)
            .map_err(SubmitError::Invalid)?;
        let mut seq = Sequence::new(id, request);
        // The prefill engine's sampler drew once for the first token (when it draws at
        // all: greedy does not); this one replays that draw so its next draws are the
        // ones a colocated run makes. A one-token distribution costs exactly one draw.
        seq.sampler.sample(&[0.0]).map_err(SubmitError::Invalid)?;
        seq.tokens.push(t.first_token);
        seq.generated = 1;
        seq.n_computed = t.prompt.len();
        seq.seq_id = Some(seq_id);
        seq.cached_prompt_tokens = Some(0);
        seq.last_token_at = Some(Instant::now());
        self.seqs.insert(id, seq);
        self.running.push(id);
        self.next_id = self.next_id.max(id + 1);
        Ok(())
    }
    // ANCHOR_END: import_request

    // ANCHOR: step
    /// One iteration: schedule, run one batched forward pass, sample, retire.
    pub fn step(&mut self) -> Result<StepReport> {
        let start = Instant::now();
        let mut report = StepReport {
            iteration: self.metrics.iterations,
            ..StepReport::default()
        };
        for id in std::mem::take(&mut self.cancelled) {
            self.remove(id)?;
            self.metrics.requests_cancelled += 1;
            report.cancelled.push(id);
        }
        let batch = self.schedule(&mut report)?;
        if !batch.is_empty() {
            self.run_batch(&batch, &mut report)?;
        }
        self.metrics.iterations += 1;
        report.seconds = start.elapsed().as_secs_f64();
        Ok(report)
    }
    // ANCHOR_END: step

    // ANCHOR: schedule
    /// The rows of the next pass: running sequences first (decodes, then prefill chunks),
    /// each given its blocks or making room by preemption; then waiting requests, in
    /// arrival order, while the budget and the pool allow.
    fn schedule(&mut self, report: &mut StepReport) -> Result<Vec<Scheduled>> {
        let rules = self.config.policy.rules();
        let budget = Budget {
            max_tokens: self.config.max_batch_tokens,
            max_seqs: self.config.max_batch_seqs,
            chunked: rules.chunked_prefill(),
        };
        let candidates: Vec<Candidate> = (self.running.iter())
            .map(|id| Candidate {
                id: *id,
                rows_left: self.seqs[id].rows_left(),
            })
            .collect();
        // A window per query gives back what no later query reads before the plan
        // counts blocks (`forget_unread`): a block is then either held or available.
        for seq_id in self.running.iter().filter_map(|id| self.seqs[id].seq_id) {
            self.cache.forget_unread(seq_id);
        }
        let mut batch: Vec<Scheduled> = Vec::new();
        let mut reserved = 0; // blocks the picked rows will take
        let picked = pick_batch(&candidates, &budget);
        // Rows of the budget the picked rows leave, for drafts.
        let mut spare = budget.max_tokens.saturating_sub(total_rows(&picked));
        for mut s in picked {
            // Oldest first: when the pool is short, the youngest running request
            // gives its blocks back, until this one fits (or it is the youngest).
            while self.running.contains(&s.id) {
                let free = self.cache.available().saturating_sub(reserved);
                if let Some(rows) = self.rows_that_fit(s.id, s.rows, free, budget.chunked) {
                    s.rows = rows + self.draft(s.id, rows, spare, free);
                    spare -= s.rows - rows;
                    reserved += self.blocks_needed(s.id, s.rows);
                    batch.push(s);
                    break;
                }
                // (Not one that already has its rows in this pass: `s` itself at worst.)
                let victim = *(self.running.iter().rev())
                    .find(|&&r| batch.iter().all(|b| b.id != r))
                    .expect("s is running and not in the batch");
                self.preempt(victim)?;
                report.preempted.push(victim);
            }
        }
        // Admission, as the policy says (Static and Sequential wait for an empty engine).
        let may_admit = rules.may_admit(self.running.len());
        let max_running = rules.max_running();
        let mut tokens_left = budget.max_tokens.saturating_sub(total_rows(&batch));
        let mut first_prefill = batch.iter().all(|s| self.seqs[&s.id].rows_left() == 1);
        while let Some(&id) = self.waiting.front() {
            if !may_admit || batch.len() == budget.max_seqs || self.running.len() == max_running {
                break;
            }
            let seq = &self.seqs[&id];
            let (seq_id, reused) = self.cache.add_sequence_with_prefix(&seq.tokens);
            let rows_left = seq.tokens.len() - reused;
            let rows = prefill_chunk(rows_left, tokens_left, budget.chunked, first_prefill);
            // Admitted only if the pool can hold its whole prompt (a watermark against
            // admitting requests only to preempt them at the next iteration). A window
            // per query gives blocks back as the prompt's chunks go by: it needs only
            // the most it holds at once.
            let pass = if budget.chunked {
                budget.max_tokens
            } else {
                rows_left
            };
            if rows == 0 || !self.cache.can_hold(seq_id, rows_left, pass, reserved) {
                self.cache.free(seq_id)?;
                break;
            }
            self.waiting.pop_front();
            let seq = self.seqs.get_mut(&id).expect("waiting");
            seq.seq_id = Some(seq_id);
            seq.n_computed = reused;
            if seq.cached_prompt_tokens.is_none() {
                seq.cached_prompt_tokens = Some(reused);
                self.metrics.prefix_hit_tokens += reused as u64;
            }
            self.running.push(id);
            reserved += self.cache.blocks_to_append(seq_id, rows);
            batch.push(Scheduled { id, rows });
            tokens_left = tokens_left.saturating_sub(rows);
            first_prefill = false;
        }
        Ok(batch)
    }
    // ANCHOR_END: schedule

    /// The rows of `id`'s `rows` whose blocks fit in `free` blocks: all of them, or
    /// (chunked prefill) as many as fit; `None` if not even one does.
    fn rows_that_fit(&self, id: u64, rows: usize, free: usize, chunked: bool) -> Option<usize> {
        if self.blocks_needed(id, rows) <= free {
            return Some(rows);
        }
        if !chunked {
            return None;
        }
        (1..rows).rev().find(|&r| self.blocks_needed(id, r) <= free)
    }

    // ANCHOR: draft
    /// Speculation: drafts for request `id`, a greedy request about to decode (`rows`
    /// is 1), as many as the budget's `spare` rows, the `free` blocks and its
    /// `max_tokens` allow; kept in its `drafts`, returned as a count of extra rows.
    fn draft(&mut self, id: u64, rows: usize, spare: usize, free: usize) -> usize {
        let Some(spec) = self.config.speculation else {
            return 0;
        };
        let seq = &self.seqs[&id];
        let decoding = rows == 1 && seq.rows_left() == 1;
        if !decoding || seq.request.sampling.temperature != 0.0 {
            return 0; // drafts are checked against greedy choices only
        }
        // The pending token and its drafts make at most max_tokens - generated tokens.
        let room = (spec.draft_len)
            .min(spare)
            .min(seq.request.max_tokens - seq.generated - 1);
        let mut drafts = crate::speculative::ngram::lookup(&seq.tokens, spec.ngram, room);
        while !drafts.is_empty() && self.blocks_needed(id, 1 + drafts.len()) > free {
            drafts.pop();
        }
        let n = drafts.len();
        self.metrics.drafted_tokens += n as u64;
        self.seqs.get_mut(&id).expect("running").drafts = drafts;
        n
    }
    // ANCHOR_END: draft

    fn blocks_needed(&self, id: u64, rows: usize) -> usize {
        let seq_id = self.seqs[&id].seq_id.expect("running");
        self.cache.blocks_to_append(seq_id, rows)
    }

    // ANCHOR: preempt
    /// Preemption by **recompute** (vLLM's default, Kwon et al. 2023 §4.5): the request
    /// gives back all its blocks and goes to the front of the waiting queue with prompt +
    /// generated tokens as its new prompt; when it is admitted again, one prefill (fast,
    /// compute-bound, and partly a prefix-cache hit) rebuilds its cache. The alternative,
    /// swapping its blocks out to host memory and back, exists for GPUs, where the KV
    /// pool is scarce device memory and host RAM is a second, larger pool. Here the pool
    /// already *is* host RAM: swapping would copy between two parts of the same memory,
    /// and bookkeep both, for nothing. The logits are bitwise the same after recompute
    /// (row-independent kernels), so the request's tokens do not change.
    fn preempt(&mut self, id: u64) -> Result<()> {
        let seq = self.seqs.get_mut(&id).expect("running");
        if let Some(seq_id) = seq.seq_id.take() {
            self.cache.free(seq_id)?;
        }
        seq.n_computed = 0;
        self.running.retain(|&r| r != id);
        self.waiting.push_front(id);
        self.metrics.preemptions += 1;
        Ok(())
    }
    // ANCHOR_END: preempt

    /// Forgets request `id`, wherever it is, and frees its blocks.
    fn remove(&mut self, id: u64) -> Result<Option<Sequence>> {
        self.running.retain(|&r| r != id);
        self.waiting.retain(|&r| r != id);
        let Some(seq) = self.seqs.remove(&id) else {
            return Ok(None);
        };
        if let Some(seq_id) = seq.seq_id {
            self.cache.free(seq_id)?;
        }
        Ok(Some(seq))
    }

    // ANCHOR: run_batch
    /// One forward pass over the picked rows, then a token for every sequence whose
    /// rows reached the end of its tokens.
    fn run_batch(&mut self, batch: &[Scheduled], report: &mut StepReport) -> Result<()> {
        let mut inputs: Vec<Vec<u32>> = Vec::new();
        let mut seq_ids: Vec<SeqId> = Vec::new();
        let mut tails = Vec::new();
        for s in batch {
            let seq = &self.seqs[&s.id];
            let drafts = seq.drafts.len();
            let rows = seq.n_computed..seq.n_computed + s.rows - drafts;
            let sampled = rows.end == seq.tokens.len();
            // A decode row, then its drafts: each draft's row checks the next guess.
            inputs.push([&seq.tokens[rows], &seq.drafts[..]].concat());
            seq_ids.push(seq.seq_id.expect("running"));
            tails.push(if sampled { 1 + drafts } else { 0 });
            report.rows.push(RowsRun {
                id: s.id,
                start_pos: seq.n_computed,
                rows: s.rows,
                sampled,
                // A recompute after preemption prefills generated tokens too: a decode
                // is the one row after the last sampled token, once it has one.
                decode: seq.generated > 0 && s.rows - drafts == 1 && sampled,
                drafts,
            });
        }
        let token_lists: Vec<&[u32]> = inputs.iter().map(Vec::as_slice).collect();
        let mut paged = PagedBatch {
            cache: &mut self.cache,
            seqs: seq_ids,
        };
        let outcome = self
            .model
            .forward_batch_tails(&token_lists, &mut paged, &tails);
        let logits = match outcome {
            Ok(logits) => logits,
            Err(e) => {
                // The pass failed for all of them: each request fails, blocks freed.
                let message = e.to_string();
                for s in batch {
                    self.remove(s.id)?;
                    let event = Event::Failed {
                        message: message.clone(),
                    };
                    report.events.push((s.id, event));
                }
                return Ok(());
            }
        };
        for (s, logits) in batch.iter().zip(logits) {
            self.seqs.get_mut(&s.id).expect("running").n_computed += s.rows;
            if !logits.is_empty() {
                self.accept(s.id, &logits, report)?;
            }
        }
        Ok(())
    }
    // ANCHOR_END: run_batch

    // ANCHOR: accept
    /// Request `id`'s tokens from its rows' logits (`[1 + drafts, vocab]`): row `i`'s
    /// choice is the token after draft `i - 1`. While a choice equals the draft the row
    /// after it was fed, the next row is valid too; the first that differs is the
    /// correction, and the positions of the drafts after it go back to the pool. Without
    /// drafts this is one sampled token. Greedy choices are the choices of a plain
    /// decode bit for bit (row-independent kernels), so the tokens are the same.
    fn accept(&mut self, id: u64, logits: &[f32], report: &mut StepReport) -> Result<()> {
        let drafts = std::mem::take(&mut self.seqs.get_mut(&id).expect("running").drafts);
        let vocab = logits.len() / (1 + drafts.len());
        for (i, row) in logits.chunks_exact(vocab).enumerate() {
            if self.config.capture_logits {
                report.logits.push((id, row.to_vec()));
            }
            let Some(token) = self.sample(id, row, report)? else {
                // Finished (or failed) at row `i`: drafts[..i] were kept on the way, and
                // its blocks are already free.
                self.metrics.accepted_tokens += i as u64;
                return Ok(());
            };
            if i < drafts.len() && token == drafts[i] {
                continue;
            }
            // Rows past `i` were fed rejected drafts: keep the pending token and drafts[..i].
            let rejected = drafts.len() - i;
            self.metrics.accepted_tokens += i as u64;
            let seq = self.seqs.get_mut(&id).expect("running");
            seq.n_computed -= rejected;
            if rejected > 0 {
                let seq_id = seq.seq_id.expect("running");
                let keep = seq.n_computed;
                self.cache.seq(seq_id)?.truncate(keep);
            }
            return Ok(());
        }
        Ok(())
    }
    // ANCHOR_END: accept

    /// Samples request `id`'s next token from `logits`; emits it, or finishes the
    /// request. The token, while the request runs on; `None` once it has left.
    fn sample(&mut self, id: u64, logits: &[f32], report: &mut StepReport) -> Result<Option<u32>> {
        let seq = self.seqs.get_mut(&id).expect("running");
        let token = match seq.sampler.sample(logits) {
            Ok(token) => token,
            Err(e) => {
                self.remove(id)?;
                let message = e.to_string();
                report.events.push((id, Event::Failed { message }));
                return Ok(None);
            }
        };
        let now = Instant::now();
        let reason = if seq.request.stop_ids.contains(&token) {
            Some(FinishReason::Stop)
        } else {
            seq.tokens.push(token);
            seq.generated += 1;
            let since = seq.last_token_at.unwrap_or(seq.arrived);
            let seconds = (now - since).as_secs_f64();
            match seq.last_token_at {
                None => {
                    self.metrics.ttft_seconds.observe(seconds);
                    report.ttft_seconds.push(seconds);
                }
                Some(_) => {
                    self.metrics.inter_token_seconds.observe(seconds);
                    report.inter_token_seconds.push(seconds);
                }
            }
            seq.last_token_at = Some(now);
            self.metrics.generated_tokens += 1;
            report.tokens.push((id, token));
            report.events.push((id, Event::Token { id: token }));
            if seq.generated == seq.request.max_tokens {
                Some(FinishReason::Length)
            } else if self.role == Role::PrefillOnly {
                // Its prefill is done: its KV rows leave for the decode engine.
                let seq = &self.seqs[&id];
                let seq_id = seq.seq_id.expect("running");
                let transfer = KvTransfer::from_cache(
                    &self.cache,
                    seq_id,
                    &seq.request,
                    token,
                    self.model.config(),
                )?;
                self.remove(id)?;
                report.transfers.push((id, transfer));
                return Ok(None);
            } else {
                None
            }
        };
        if let Some(reason) = reason {
            let seq = self.remove(id)?.expect("running");
            self.metrics.requests_finished += 1;
            report.finished.push(id);
            let event = Event::Finished {
                reason,
                prompt_tokens: seq.request.prompt.len(),
                completion_tokens: seq.generated,
                cached_prompt_tokens: seq.cached_prompt_tokens.unwrap_or(0),
            };
            report.events.push((id, event));
            return Ok(None);
        }
        Ok(Some(token))
    }
}

fn total_rows(batch: &[Scheduled]) -> usize {
    batch.iter().map(|s| s.rows).sum()
}
