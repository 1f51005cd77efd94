//! Greedy speculative decoding on the GPU: the CPU's loop (src/speculative/decode.rs)
//! with the verify pass on [`GpuModel`] over a [`GpuKvCache`]. Chapter "Speculative
//! decoding", section "On the GPU".
//!
//! The GPU forward already takes several rows at a start position (that is chunked
//! prefill), so a verify pass is one forward over the pending token and the `k` drafts at
//! the cache's length, reading the logits of every row
//! ([`GpuModel::forward_rows_logits`]). Rolling back a rejected draft is setting the
//! cache's length ([`GpuKvCache::truncate`]): later writes overwrite the forgotten rows.
//! Every GPU kernel is row-independent, so row `i` of a verify pass has the logits a
//! one-token step at that position has, and greedy speculative decoding emits plain
//! greedy decoding's tokens exactly (tests/cuda_speculative.rs checks it). Only the
//! n-gram drafter runs here: it needs no model, so nothing else has to live on the GPU.

use super::forward::{GpuKvSource, RunState};
use super::kv_cache::GpuKvCache;
use super::GpuModel;
use crate::error::{Error, Result};
use crate::generate::StopReason;
use crate::speculative::ngram::lookup;
use crate::speculative::verify::accept_greedy;
use serde::Serialize;

/// What one GPU speculative generation emitted, and how many passes it took.
#[derive(Debug, Clone, Serialize)]
pub struct GpuSpecGeneration {
    pub generated_ids: Vec<u32>,
    pub stop_reason: StopReason,
    /// Forward passes of the target, the prefill included.
    pub target_forwards: usize,
    pub drafted: usize,
    pub accepted: usize,
}

// ANCHOR: gpu_loop
/// Greedy generation after `prompt` with the n-gram drafter (n-grams up to `ngram`,
/// `draft_len` tokens a round) proposing and `model` verifying on the GPU. Stops at an
/// id of `eos_ids` or after `max_new_tokens`, like plain decoding.
pub fn generate_speculative_ngram(
    model: &GpuModel,
    prompt: &[u32],
    max_new_tokens: usize,
    draft_len: usize,
    ngram: usize,
    eos_ids: &[u32],
) -> Result<GpuSpecGeneration> {
    if prompt.is_empty() {
        return Err(Error::EmptyPrompt);
    }
    if max_new_tokens == 0 || draft_len == 0 || ngram == 0 {
        return Err(Error::InvalidArgument(
            "GPU speculative decoding needs max_new_tokens, the draft length and n all >= 1".into(),
        ));
    }
    let capacity = prompt
        .len()
        .checked_add(max_new_tokens)
        .filter(|&total| total <= model.config.max_position_embeddings)
        .ok_or(Error::ContextOverflow {
            prompt_len: prompt.len(),
            max_new_tokens,
            max_seq_len: model.config.max_position_embeddings,
        })?;
    let gpu = model.gpu();
    // The cache holds at most prompt + max_new_tokens - 1 positions at the end, but a
    // verify pass writes its drafts before they are judged: room for all of them.
    let mut cache = GpuKvCache::new(gpu, &model.config, capacity + draft_len)?;
    // The first pass is the longest: the whole prompt and its drafts.
    let mut state = RunState::new(gpu, &model.config, prompt.len() + draft_len)?;

    let mut context = prompt.to_vec(); // prompt + everything emitted
    let mut pending = prompt.to_vec(); // ids the cache lacks
    let mut generated = Vec::with_capacity(max_new_tokens);
    let (mut target_forwards, mut drafted, mut accepted_total) = (0, 0, 0);
    let stop_reason = 'rounds: loop {
        // Never draft past max_new_tokens: a round emits at most k + 1 tokens.
        let k = draft_len.min(max_new_tokens - generated.len() - 1);
        let drafts = lookup(&context, ngram, k);

        // One target pass over pending + drafts at the cache's length; rows for the
        // last 1 + k tokens.                                     rows: [1 + k][vocab]
        let base = cache.len();
        let fed: Vec<u32> = pending.iter().chain(&drafts).copied().collect();
        let rows = model.forward_rows_logits(
            &fed,
            GpuKvSource::Cache(&mut cache),
            &mut state,
            1 + drafts.len(),
        )?;
        target_forwards += 1;
        let outcome = accept_greedy(&drafts, &rows);
        drafted += drafts.len();
        accepted_total += outcome.accepted;
        // Roll back past the rejected drafts: the cache keeps pending + accepted.
        cache.truncate(base + pending.len() + outcome.accepted);

        // Emit accepted drafts, then the target's token, under plain decoding's stop rules.
        let emitted = drafts[..outcome.accepted]
            .iter()
            .chain(std::iter::once(&outcome.next));
        for &token in emitted {
            generated.push(token);
            context.push(token);
            let stop = if eos_ids.contains(&token) {
                Some(StopReason::Eos)
            } else if generated.len() == max_new_tokens {
                Some(StopReason::MaxNewTokens)
            } else {
                None
            };
            if let Some(reason) = stop {
                // Hold exactly what plain decoding would: every token but the last.
                cache.truncate(prompt.len() + generated.len() - 1);
                break 'rounds reason;
            }
        }
        pending = vec![outcome.next];
    };
    // ANCHOR_END: gpu_loop
    Ok(GpuSpecGeneration {
        generated_ids: generated,
        stop_reason,
        target_forwards,
        drafted,
        accepted: accepted_total,
    })
}
