//! Speculative *sampling*: how to accept a drafted token so that what comes out is
//! distributed exactly as if the target had sampled it itself (Leviathan et al. 2023,
//! "Fast Inference from Transformers via Speculative Decoding", Algorithm 1; Chen et
//! al. 2023, "Accelerating LLM Decoding with Speculative Sampling"). Chapter
//! "Speculative decoding", section "Sampling".
//!
//! `p` is the target's distribution at a position, `q` the draft's, and the draft
//! token `x` was drawn from `q`:
//! - accept `x` with probability `min(1, p(x) / q(x))`;
//! - on rejection, draw from the residual `normalize(max(0, p - q))`.
//!
//! Then `P(out = y) = q(y)·min(1, p(y)/q(y)) + (1 - β)·residual(y) = min(p, q)(y) +
//! max(0, p - q)(y) = p(y)`, where `β = Σ min(p, q)` is the chance of accepting: the
//! rejected mass is exactly what the residual puts back. A deterministic drafter
//! (n-gram lookup) is the case `q = one-hot(x)`: accept with probability `p(x)`, else
//! draw from `p` with `x` removed.

use crate::ops::{argmax, softmax};
use crate::rng::Rng;
use crate::sampler::SamplerConfig;
use serde::Serialize;

/// How a drafted token is accepted. Only [`AcceptRule::Exact`] is correct; the other
/// two are the classic mistakes, kept so `tests/speculative.rs` can show that its
/// chi-square test catches them (a statistical test that passes everything proves nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AcceptRule {
    /// `min(1, p/q)`, then the residual `max(0, p - q)` on rejection.
    #[default]
    Exact,
    /// WRONG: every draft token is accepted (the output follows `q`, not `p`).
    AlwaysAccept,
    /// WRONG: `min(1, p/q)`, but on rejection draw from `p` instead of the residual
    /// (tokens the draft likes too much stay over-represented).
    NoResidual,
}

// ANCHOR: distribution
/// The distribution [`crate::sampler::Sampler::sample`] draws from, over the whole
/// vocabulary: temperature, then top-k, then top-p, renormalised; zero outside the
/// kept set. Greedy (`temperature == 0`) is the one-hot of the argmax.
pub fn distribution(logits: &[f32], config: &SamplerConfig) -> Vec<f32> {
    let mut probs = vec![0.0f32; logits.len()];
    if config.temperature == 0.0 {
        probs[argmax(logits)] = 1.0;
        return probs;
    }
    // Most likely first; ties: lower id first (as the sampler sorts).
    let mut ids: Vec<usize> = (0..logits.len()).collect();
    ids.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    if config.top_k > 0 {
        ids.truncate(config.top_k);
    }
    // (l - max) / T, as the sampler computes it: the same bits, and a tiny T still
    // gives the greedy one-hot (l / T alone overflows to inf, and inf - inf is NaN).
    let max = logits[ids[0]];
    let mut kept: Vec<f32> = ids
        .iter()
        .map(|&i| (logits[i] - max) / config.temperature)
        .collect();
    softmax(&mut kept);
    let mut mass = 0.0;
    let mut keep = kept.len();
    for (n, &p) in kept.iter().enumerate() {
        mass += p;
        if mass >= config.top_p {
            keep = n + 1;
            break;
        }
    }
    let total: f32 = kept[..keep].iter().sum();
    for (&id, &p) in ids.iter().zip(&kept[..keep]) {
        probs[id] = p / total;
    }
    probs
}
// ANCHOR_END: distribution

/// Draws one token from `probs` (inverse CDF, one random number). `probs` need not sum
/// to exactly 1: the draw is scaled by the total.
pub fn sample_from(probs: &[f32], rng: &mut Rng) -> u32 {
    let total: f32 = probs.iter().sum();
    let u = rng.next_f32() * total;
    let mut cdf = 0.0;
    let mut last_nonzero = 0;
    for (id, &p) in probs.iter().enumerate() {
        if p > 0.0 {
            last_nonzero = id;
        }
        cdf += p;
        if u < cdf {
            return id as u32;
        }
    }
    last_nonzero as u32
}

/// Picks a token from `logits` as the sampler would, and returns the distribution it
/// was drawn from (`None` when greedy: the choice is deterministic).
pub fn choose(logits: &[f32], config: &SamplerConfig, rng: &mut Rng) -> (u32, Option<Vec<f32>>) {
    if config.temperature == 0.0 {
        return (argmax(logits) as u32, None);
    }
    let probs = distribution(logits, config);
    (sample_from(&probs, rng), Some(probs))
}

/// The verdict on one drafted token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    /// Rejected; the target's own token for this position instead.
    Reject(u32),
}

// ANCHOR: accept
/// Accepts or rejects draft token `x`. `p`: the target's distribution at this position;
/// `q`: the draft's, or `None` for a deterministic draft (`q = one-hot(x)`).
pub fn accept_or_resample(
    x: u32,
    p: &[f32],
    q: Option<&[f32]>,
    rule: AcceptRule,
    rng: &mut Rng,
) -> Verdict {
    let x_i = x as usize;
    let q_x = q.map_or(1.0, |q| q[x_i]);
    let p_x = p.get(x_i).copied().unwrap_or(0.0);
    if rule == AcceptRule::AlwaysAccept {
        return Verdict::Accept;
    }
    // Accept with probability min(1, p(x) / q(x)): u < p/q  <=>  u·q < p.
    if rng.next_f32() * q_x < p_x {
        return Verdict::Accept;
    }
    if rule == AcceptRule::NoResidual {
        return Verdict::Reject(sample_from(p, rng));
    }
    // The residual max(0, p - q): the mass of p that acceptance under-delivered.
    let residual: Vec<f32> = match q {
        Some(q) => p.iter().zip(q).map(|(&p, &q)| (p - q).max(0.0)).collect(),
        None => {
            let mut r = p.to_vec();
            r[x_i] = 0.0;
            r
        }
    };
    // A residual of zero mass only happens through rounding (p ≈ q everywhere, yet the
    // draw rejected): p itself is then the right distribution to fall back on.
    if residual.iter().sum::<f32>() > 0.0 {
        Verdict::Reject(sample_from(&residual, rng))
    } else {
        Verdict::Reject(sample_from(p, rng))
    }
}
// ANCHOR_END: accept
