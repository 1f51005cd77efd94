//! What one verify pass costs, in decode steps: the premise of speculative decoding,
//! measured. Behind `kvlab bench-verify`; chapter "Speculative decoding", section
//! "What a verify pass costs".
//!
//! A round feeds the target the last emitted token and `k` drafts: `k + 1` rows in one
//! pass on top of the cache ([`crate::speculative::verify::verify_pass`]). Leviathan et
//! al.'s speedup formula assumes that pass costs one decode step, because decode is
//! memory-bound: every weight is streamed once however many rows use it. This
//! experiment times the pass for `k = 1..=max_k` against one plain decode step at the
//! same context, on the same cache, and reports the ratio. A ratio near 1 means the
//! extra rows ride along for free; a ratio near `k + 1` means each row costs a step
//! (compute-bound, or a kernel that streams the weights once per row).
//!
//! The repetitions are interleaved (one of every `k` per round) and summarised by
//! medians, so that a slow moment of a shared machine hits every `k` alike.

use super::timing::{machine_name, median, ms_since, synthetic_prompt};
use crate::cache::{new_store, CacheKind, DEFAULT_BLOCK_SIZE};
use crate::error::{Error, Result};
use crate::model::{KvSource, Model};
use crate::speculative::verify::verify_pass;
use serde::Serialize;
use std::time::Instant;

/// The cost of one verify pass over `k` drafts.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyCost {
    /// Drafts checked by the pass.
    pub k: usize,
    /// Rows in the pass: the last emitted token and the `k` drafts.
    pub rows: usize,
    /// Median time of the pass.
    pub verify_ms: f64,
    /// `verify_ms / decode_step_ms`: 1.0 if the extra rows were free.
    pub ratio: f64,
    /// `ratio / rows`: the cost of one row, in decode steps.
    pub ratio_per_row: f64,
}

/// `kvlab bench-verify`'s report.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyCostReport {
    pub model: String,
    pub machine: String,
    /// Positions in the cache under every pass.
    pub context: usize,
    pub reps: usize,
    /// Median time of one plain decode step (one row, logits of it).
    pub decode_step_ms: f64,
    pub rows: Vec<VerifyCost>,
}

// ANCHOR: verify_cost
/// Times one decode step and one verify pass of `k + 1` rows for `k = 1..=max_k`, each
/// on a cache holding `context` positions (rolled back after every pass), `reps` times.
pub fn run(
    model: &Model,
    name: &str,
    context: usize,
    max_k: usize,
    reps: usize,
) -> Result<VerifyCostReport> {
    let limit = model.config.max_position_embeddings;
    if context == 0 || max_k == 0 || reps == 0 {
        return Err(Error::InvalidArgument(
            "--context, --max-k and --reps must each be at least 1".into(),
        ));
    }
    let capacity = max_k
        .checked_add(1)
        .and_then(|rows| context.checked_add(rows))
        .filter(|&c| c <= limit)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "a context of {context} plus {} verify rows does not fit the model's {limit} positions: lower --context or --max-k",
                max_k.saturating_add(1)
            ))
        })?;
    let vocab = model.config.vocab_size;
    let mut cache = new_store(
        &model.config,
        CacheKind::Preallocated,
        capacity,
        DEFAULT_BLOCK_SIZE,
    )?;
    let prompt = synthetic_prompt(context, vocab, 0);
    model.forward(&prompt, KvSource::Cache(cache.as_mut()))?;
    let fed = synthetic_prompt(max_k + 1, vocab, 1); // the last token, then the drafts

    // times[0]: the decode step; times[k]: the pass over k drafts.
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(reps); max_k + 1];
    for rep in 0..=reps {
        for (k, slot) in times.iter_mut().enumerate() {
            let start = Instant::now();
            if k == 0 {
                model.forward(&fed[..1], KvSource::Cache(cache.as_mut()))?;
            } else {
                verify_pass(model, cache.as_mut(), &fed[..k + 1], k + 1)?;
            }
            let ms = ms_since(start);
            cache.truncate(context);
            if rep > 0 {
                slot.push(ms); // round 0 warms the caches up
            }
        }
    }
    let mut medians = times.into_iter().map(median);
    let step_ms = medians.next().unwrap_or(0.0);
    let rows = medians
        .enumerate()
        .map(|(i, verify_ms)| {
            let (k, ratio) = (i + 1, verify_ms / step_ms);
            VerifyCost {
                k,
                rows: k + 1,
                verify_ms,
                ratio,
                ratio_per_row: ratio / (k + 1) as f64,
            }
        })
        .collect();
    Ok(VerifyCostReport {
        model: name.into(),
        machine: machine_name(),
        context,
        reps,
        decode_step_ms: step_ms,
        rows,
    })
}
// ANCHOR_END: verify_cost
