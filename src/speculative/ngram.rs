//! Prompt lookup decoding (Saxena 2023; `prompt_lookup_num_tokens` in Hugging Face):
//! the draft is a *search*, not a model. Chapter "Speculative decoding", section
//! "Drafters".
//!
//! Find the latest earlier place where the last `n` tokens of the context occurred, and
//! propose the tokens that followed them there. When the output copies from the input
//! (summaries, code edits, quoting, repeating a passage) this guesses whole runs for
//! free; when it does not (a story), it finds nothing or guesses wrong, and the round is
//! a plain decode step. The lookup falls back to shorter n-grams, down to one token.

use super::drafter::{Draft, Drafter};
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::sampler::SamplerConfig;

/// Proposes what followed the latest earlier occurrence of the context's last `n` tokens.
pub struct NgramDrafter {
    /// The longest n-gram tried.
    n: usize,
}

impl NgramDrafter {
    pub fn new(n: usize) -> Result<NgramDrafter> {
        if n == 0 {
            return Err(Error::InvalidArgument(
                "the n-gram drafter needs n >= 1 (e.g. ngram:3)".into(),
            ));
        }
        Ok(NgramDrafter { n })
    }
}

// ANCHOR: lookup
/// Up to `k` tokens that followed the latest earlier occurrence of the last `n` tokens
/// of `context`, trying `n`, `n - 1`, ..., 1; empty when none occurs.
pub fn lookup(context: &[u32], n: usize, k: usize) -> Vec<u32> {
    for size in (1..=n.min(context.len().saturating_sub(1))).rev() {
        let suffix = &context[context.len() - size..];
        // Candidate starts, latest first; the suffix itself (start = len - size) is excluded.
        for start in (0..context.len() - size).rev() {
            if &context[start..start + size] == suffix {
                let follow = start + size;
                let end = (follow + k).min(context.len());
                return context[follow..end].to_vec();
            }
        }
    }
    Vec::new()
}
// ANCHOR_END: lookup

impl Drafter for NgramDrafter {
    fn name(&self) -> String {
        format!("ngram:{}", self.n)
    }

    fn propose(
        &mut self,
        context: &[u32],
        k: usize,
        _sampler: &SamplerConfig,
        _rng: &mut Rng,
    ) -> Result<Draft> {
        Ok(Draft {
            tokens: lookup(context, self.n, k),
            probs: None,
            forwards: 0,
        })
    }
}
