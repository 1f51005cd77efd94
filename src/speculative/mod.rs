//! Speculative decoding (the seed's §3.4): a cheap drafter guesses `k` tokens, the
//! target checks all of them in **one** forward pass, keeps the longest prefix it agrees
//! with plus one token of its own, and the KV cache is rolled back past the rest.
//! Chapter "Speculative decoding" (`book/src/speculative.md`).
//!
//! Reading order: [`drafter`] (the trait) → [`spec`] (a drafter by name) → [`ngram`], [`early_exit`],
//! [`bf16`] (three drafters) → [`verify`] (one pass, the longest agreeing prefix) →
//! [`sampling`] (the accept/resample rule that keeps sampling exact) → [`decode`] (the
//! loop, with rollback and the stop conditions of plain decoding) → the experiment in `lab::speculative`
//! (plain cached vs speculative, measured and predicted).
//!
//! Greedy output is token-for-token that of plain cached decoding, and on the CPU the
//! logits behind every emitted token are bitwise those of the plain path
//! (`tests/speculative.rs`).

pub mod bf16;
pub mod decode;
pub mod drafter;
pub mod early_exit;
pub mod ngram;
pub mod sampling;
pub mod spec;
pub mod verify;

pub use decode::{generate_speculative, SpecGeneration};
pub use drafter::{Draft, Drafter};
pub use early_exit::LmDrafter;
pub use ngram::NgramDrafter;
pub use sampling::AcceptRule;
pub use spec::DrafterSpec;

use crate::error::{Error, Result};
use crate::model::Model;
use crate::sampler::SamplerConfig;

/// What a speculative generation is asked for: plain decoding's options, plus the
/// draft length `k` and the acceptance rule.
#[derive(Debug, Clone)]
pub struct SpecOptions {
    pub max_new_tokens: usize,
    pub sampler: SamplerConfig,
    /// Token ids that end generation (emitted, then stop), as in plain decoding.
    pub eos_ids: Vec<u32>,
    /// Tokens proposed per round, `k`.
    pub draft_len: usize,
    /// [`AcceptRule::Exact`] unless a test wants to see a wrong rule caught.
    pub accept_rule: AcceptRule,
}

impl SpecOptions {
    /// Greedy, no EOS, the exact rule.
    pub fn greedy(max_new_tokens: usize, draft_len: usize) -> SpecOptions {
        SpecOptions {
            max_new_tokens,
            sampler: SamplerConfig::default(),
            eos_ids: Vec::new(),
            draft_len,
            accept_rule: AcceptRule::Exact,
        }
    }

    /// Checks the options against `model` before any work is done.
    pub fn validate(&self, model: &Model) -> Result<()> {
        self.sampler.validate()?;
        let context = model.config.max_position_embeddings;
        if self.draft_len == 0 {
            return Err(Error::InvalidArgument(
                "draft length must be at least 1 (k = 0 is plain decoding: use the cached path)"
                    .into(),
            ));
        }
        if self.draft_len >= context {
            return Err(Error::InvalidArgument(format!(
                "draft length {} does not fit the model's context of {context} tokens: use a k of a few tokens (2-8)",
                self.draft_len
            )));
        }
        Ok(())
    }
}
