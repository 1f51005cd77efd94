//! The draft side of speculative decoding behind one small trait (the spec a user names
//! a drafter by is in `spec.rs`). Chapter "Speculative decoding", section "Drafters".
//!
//! A drafter only has to be *cheap*; it never has to be right. The target checks every
//! proposal, so a bad drafter costs speed, never correctness.

use crate::error::Result;
use crate::rng::Rng;
use crate::sampler::SamplerConfig;

// ANCHOR: drafter
/// What a drafter proposed for one round.
#[derive(Debug, Clone, Default)]
pub struct Draft {
    /// Up to `k` tokens to follow the context; fewer (even none) is allowed.
    pub tokens: Vec<u32>,
    /// The distribution each token was drawn from, `[len, vocab]` (speculative sampling
    /// needs `q`); `None` when the proposal is deterministic (`q` is one-hot).
    pub probs: Option<Vec<Vec<f32>>>,
    /// Forward passes of a draft model this proposal took (0 for a lookup).
    pub forwards: usize,
}

/// A source of cheap guesses.
pub trait Drafter {
    /// A short name for reports: `ngram:3`, `early-exit:8`, `bf16`.
    fn name(&self) -> String;

    /// Proposes up to `k` tokens to follow `context` (the prompt and every token emitted
    /// so far). A model drafter picks each token as `sampler` says (argmax when greedy,
    /// else a draw from its own distribution with `rng`).
    fn propose(
        &mut self,
        context: &[u32],
        k: usize,
        sampler: &SamplerConfig,
        rng: &mut Rng,
    ) -> Result<Draft>;
}
// ANCHOR_END: drafter
