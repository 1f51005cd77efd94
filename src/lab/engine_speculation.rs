//! Prompt-lookup speculation in the serving engine, measured: `kvlab bench-batch
//! --speculative ngram` (book: speculative.md, "In the engine").
//!
//! The load is *input-grounded*: each request's prompt is a random passage given
//! twice, so a model that has learned to copy (an induction head, Olsson et al. 2022)
//! goes on with the passage a third time, and the last tokens it wrote have occurred
//! before, followed by what it writes next. That is the shape of real copying work
//! (quoting, editing code, summaries that reuse phrases), where prompt lookup drafts
//! well; on free text it drafts little and costs little.
//!
//! The same requests run through the continuous engine without and with drafts,
//! alternately, `REPS` times each: the tokens must be identical (greedy verification,
//! row-independent kernels), and the speed-up is the ratio of the median throughputs.

use super::engine_load::{config_for, greedy, run_all};
use super::timing::median;
use crate::batch::BatchModel;
use crate::cache::KvPolicy;
use crate::engine::{EngineConfig, Policy, Request, Speculation};
use crate::error::Result;
use crate::rng::Rng;
use serde::Serialize;
use std::sync::Arc;

/// Runs of each engine, alternated.
const REPS: usize = 3;

/// `bench-batch --speculative`'s figures.
#[derive(Debug, Clone, Serialize)]
pub struct SpeculationRun {
    pub concurrency: usize,
    pub ngram: usize,
    pub draft_len: usize,
    /// Output tokens/s of the continuous engine, median of the runs.
    pub plain_tok_s: f64,
    pub speculative_tok_s: f64,
    /// `speculative_tok_s / plain_tok_s`.
    pub speedup: f64,
    /// Iterations (forward passes) each engine took for the load.
    pub plain_iterations: usize,
    pub speculative_iterations: usize,
    pub drafted_tokens: u64,
    pub accepted_tokens: u64,
    /// `accepted / drafted`.
    pub acceptance: f64,
    /// Every request got the same tokens from both engines, in every run.
    pub tokens_identical: bool,
}

// ANCHOR: grounded_prompt
/// Request `stream`'s prompt: `len / 2` random token ids, then the same ids again.
pub fn copy_prompt(len: usize, vocab: usize, stream: usize) -> Vec<u32> {
    let mut rng = Rng::new(0x5eed + stream as u64);
    let passage: Vec<u32> = (0..len.div_ceil(2))
        .map(|_| (rng.next_u64() % vocab.max(1) as u64) as u32)
        .collect();
    [&passage[..], &passage[..len / 2]].concat()
}
// ANCHOR_END: grounded_prompt

/// The load: `concurrency` greedy requests of [`copy_prompt`]s, on a pool of `kv` blocks.
#[derive(Debug, Clone, Copy)]
pub struct CopyLoad {
    pub concurrency: usize,
    pub prompt_len: usize,
    pub max_tokens: usize,
    pub kv: KvPolicy,
    pub block_size: usize,
}

/// The copy load through the continuous engine, without and with `spec`.
pub fn run(
    model: &Arc<dyn BatchModel>,
    load: &CopyLoad,
    spec: Speculation,
) -> Result<SpeculationRun> {
    let vocab = model.config().vocab_size;
    let concurrency = load.concurrency;
    let requests: Vec<Request> = (0..concurrency)
        .map(|i| greedy(copy_prompt(load.prompt_len, vocab, i), load.max_tokens))
        .collect();
    let positions = load.prompt_len + load.max_tokens;
    let policy = Policy::ContinuousChunked;
    let plain = config_for(
        model.config(),
        load.kv,
        load.block_size,
        policy,
        concurrency,
        positions,
    )?;
    let drafting = EngineConfig {
        speculation: Some(spec),
        ..plain.clone()
    };
    let (mut plain_tok_s, mut spec_tok_s) = (Vec::new(), Vec::new());
    let (mut identical, mut iterations) = (true, (0, 0));
    let (mut drafted, mut accepted) = (0, 0);
    for _ in 0..REPS {
        let without = run_all(model, plain.clone(), &requests)?;
        let with = run_all(model, drafting.clone(), &requests)?;
        plain_tok_s.push(tok_s(&without.tokens, without.seconds));
        spec_tok_s.push(tok_s(&with.tokens, with.seconds));
        identical &= without.tokens == with.tokens;
        iterations = (without.reports.len(), with.reports.len());
        (drafted, accepted) = (with.metrics.drafted_tokens, with.metrics.accepted_tokens);
    }
    let (plain_tok_s, speculative_tok_s) = (median(plain_tok_s), median(spec_tok_s));
    Ok(SpeculationRun {
        concurrency,
        ngram: spec.ngram,
        draft_len: spec.draft_len,
        plain_tok_s,
        speculative_tok_s,
        speedup: speculative_tok_s / plain_tok_s,
        plain_iterations: iterations.0,
        speculative_iterations: iterations.1,
        drafted_tokens: drafted,
        accepted_tokens: accepted,
        acceptance: accepted as f64 / drafted.max(1) as f64,
        tokens_identical: identical,
    })
}

fn tok_s(tokens: &[Vec<u32>], seconds: f64) -> f64 {
    tokens.iter().map(Vec::len).sum::<usize>() as f64 / seconds
}
