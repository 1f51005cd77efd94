//! One request inside the engine: its tokens, how many of them the KV cache holds, its
//! sampler, its timings (book: scheduling.md).
//!
//! A request's state is two numbers over one list: `tokens` (prompt, then every token
//! generated so far) and `n_computed` (how many of them have K and V in the cache). The
//! rows still to run are `tokens[n_computed..]`: a whole prompt when it arrives, a chunk
//! of it under chunked prefill, exactly one token (the last one sampled) when decoding.
//! Preemption by recompute only resets `n_computed` to 0: prompt and generated tokens
//! together become the prompt to prefill again.

use super::request::Request;
use crate::cache::SeqId;
use crate::sampler::Sampler;
use std::time::Instant;

// ANCHOR: sequence
/// A request the engine holds, waiting or running.
pub struct Sequence {
    pub id: u64,
    pub request: Request,
    /// Prompt, then every generated token (the last one not yet fed to the model).
    pub tokens: Vec<u32>,
    /// Positions of `tokens` whose K and V are in the cache.
    pub n_computed: usize,
    /// Its block table in the pool while running; `None` while waiting.
    pub seq_id: Option<SeqId>,
    /// Seeded per request: its draws do not depend on what it is batched with.
    pub sampler: Sampler,
    /// Tokens generated (emitted as `Event::Token`).
    pub generated: usize,
    /// Prompt positions found in the prefix cache at its first admission.
    pub cached_prompt_tokens: Option<usize>,
    pub arrived: Instant,
    pub last_token_at: Option<Instant>,
    /// Guesses of its next tokens, run this iteration after its pending token
    /// (speculation; empty otherwise).
    pub drafts: Vec<u32>,
}
// ANCHOR_END: sequence

impl Sequence {
    pub fn new(id: u64, request: Request) -> Sequence {
        Sequence {
            id,
            tokens: request.prompt.clone(),
            n_computed: 0,
            seq_id: None,
            sampler: Sampler::new(request.sampling.sampler_config()),
            generated: 0,
            cached_prompt_tokens: None,
            arrived: Instant::now(),
            last_token_at: None,
            drafts: Vec::new(),
            request,
        }
    }

    /// Rows still to run before the next token can be sampled.
    pub fn rows_left(&self) -> usize {
        self.tokens.len() - self.n_computed
    }
}
