//! The target's side of a round: one forward pass over the drafted tokens on top of the
//! cache, then the longest agreeing prefix. Chapter "Speculative decoding", section
//! "Verify".
//!
//! The pass is chunked prefill on a non-empty cache: the `m` new tokens sit at
//! positions `len..len + m`, and row `i` attends to positions `0..=len + i` (the
//! rectangular causal mask of [`crate::attention`]). Row `i`'s logits are the target's
//! prediction *after* token `i`, so one pass scores every guess at once. Because each
//! kernel computes a row the same way however many rows come with it
//! ([`crate::ops`], "row independence"), row `i` is bitwise the logits `m` separate
//! decode steps would have produced.

use super::sampling::{accept_or_resample, distribution, AcceptRule, Verdict};
use crate::cache::KvStore;
use crate::error::Result;
use crate::generate::forward_hidden_in_passes;
use crate::model::Model;
use crate::ops::argmax;
use crate::rng::Rng;
use crate::sampler::SamplerConfig;

// ANCHOR: verify_pass
/// Runs `tokens` through the target on top of `cache` (one pass, every layer) and
/// returns the logits of the last `n_rows` of them, `[n_rows, vocab]`. A cache that
/// takes fewer tokens per pass (a window, a local layer's ring) gets them in passes,
/// as `generate::prefill_in_passes` feeds a prompt: row for row the same logits.
pub fn verify_pass(
    model: &Model,
    cache: &mut dyn KvStore,
    tokens: &[u32],
    n_rows: usize,
) -> Result<Vec<Vec<f32>>> {
    let first = tokens.len() - n_rows.min(tokens.len());
    let kept = forward_hidden_in_passes(model, cache, tokens, first)?; // [n_rows, dim]

    // The LM head (a fifth of SmolLM2's weights) is streamed once for all rows, where
    // `n_rows` calls of `Model::logits` would stream it `n_rows` times; row by row the
    // arithmetic is the same (row-independent kernels), bit for bit.
    let logits = model.logits_rows(kept.as_slice().expect("contiguous")); // [n_rows, vocab]
    let vocab = model.config.vocab_size;
    Ok(logits.chunks_exact(vocab).map(<[f32]>::to_vec).collect())
}

// ANCHOR_END: verify_pass

/// The outcome of a round: `drafts[..accepted]`, then `next` (the target's own token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub accepted: usize,
    pub next: u32,
}

// ANCHOR: accept_greedy
/// Greedy verification: accept drafts while each is the target's argmax; `next` is the
/// argmax at the first disagreement, or after the last draft when all agree (the bonus
/// token). `rows[i]` are the target's logits after the context and `drafts[..i]`.
pub fn accept_greedy(drafts: &[u32], rows: &[Vec<f32>]) -> Outcome {
    let mut accepted = 0;
    while accepted < drafts.len() && argmax(&rows[accepted]) as u32 == drafts[accepted] {
        accepted += 1;
    }
    Outcome {
        accepted,
        next: argmax(&rows[accepted]) as u32,
    }
}
// ANCHOR_END: accept_greedy

// ANCHOR: accept_sampled
/// Speculative sampling over a round: each draft in turn is accepted with probability
/// `min(1, p/q)`; the first rejection draws `next` from the residual and ends the
/// round; when every draft is accepted, `next` is drawn from `p` after the last one.
pub fn accept_sampled(
    drafts: &[u32],
    draft_probs: Option<&[Vec<f32>]>,
    rows: &[Vec<f32>],
    sampler: &SamplerConfig,
    rule: AcceptRule,
    rng: &mut Rng,
) -> Outcome {
    for (i, &x) in drafts.iter().enumerate() {
        let p = distribution(&rows[i], sampler);
        let q = draft_probs.map(|all| &all[i][..]);
        if let Verdict::Reject(next) = accept_or_resample(x, &p, q, rule, rng) {
            return Outcome { accepted: i, next };
        }
    }
    let p = distribution(&rows[drafts.len()], sampler);
    Outcome {
        accepted: drafts.len(),
        next: super::sampling::sample_from(&p, rng),
    }
}
// ANCHOR_END: accept_sampled
