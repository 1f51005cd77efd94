//! Choosing the next token from the logits: greedy, or sampled with
//! temperature, top-k and top-p (nucleus, Holtzman et al. 2019), from a seeded RNG.

use crate::error::{Error, Result};
use crate::ops::{argmax, softmax};
use crate::rng::Rng;

/// How to pick tokens. `temperature == 0` means greedy (argmax). Any positive
/// temperature is valid: a tiny one (1e-38) approaches greedy smoothly, because the
/// sampler divides logit *differences* (see [`Sampler::sample`]); negative, NaN and
/// infinite temperatures are rejected by [`SamplerConfig::validate`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerConfig {
    pub temperature: f32,
    /// Keep only the `k` most likely tokens (0 = no limit).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches `p` (1.0 = no limit).
    pub top_p: f32,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    pub fn validate(&self) -> Result<()> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(Error::InvalidArgument(format!(
                "--temperature {}: give a finite number >= 0 (0 = greedy)",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::InvalidArgument(format!(
                "--top-p {}: give a number in (0, 1] (1 = off)",
                self.top_p
            )));
        }
        Ok(())
    }
}

pub struct Sampler {
    config: SamplerConfig,
    rng: Rng,
}

// ANCHOR: sample
impl Sampler {
    pub fn new(config: SamplerConfig) -> Sampler {
        Sampler {
            rng: Rng::new(config.seed),
            config,
        }
    }

    /// Picks the next token. Draws exactly one random number per sampled token,
    /// so two runs with the same seed and the same logits pick the same tokens.
    ///
    /// Logits must be finite: a NaN or an infinity (a model whose activations
    /// overflowed) is an error, never a token chosen from NaN probabilities.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32> {
        if let Some(i) = logits.iter().position(|l| !l.is_finite()) {
            return Err(Error::NonFinite(format!(
                "the model produced a non-finite logit ({} for token {i}): its weights or activations overflowed",
                logits[i]
            )));
        }
        if logits.is_empty() {
            return Err(Error::InvalidArgument("no logits to sample from".into()));
        }
        let c = self.config;
        if c.temperature == 0.0 {
            return Ok(argmax(logits) as u32);
        }
        // Candidates sorted by logit, most likely first (ties: lower id first).
        let mut ids: Vec<usize> = (0..logits.len()).collect();
        ids.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        if c.top_k > 0 {
            ids.truncate(c.top_k);
        }
        // softmax(l / T) = softmax((l - max) / T). Dividing the *differences* keeps
        // every value <= 0: a tiny T sends the others to -inf (probability 0) and the
        // most likely token to 0 (probability 1), the greedy limit, where `l / T`
        // alone would overflow to inf and make inf - inf = NaN.
        let max = logits[ids[0]];
        let mut probs: Vec<f32> = ids
            .iter()
            .map(|&i| (logits[i] - max) / c.temperature)
            .collect();
        softmax(&mut probs);
        // Nucleus: the shortest prefix whose probability mass reaches top_p (at least one).
        let mut mass = 0.0;
        let mut keep = probs.len();
        for (n, &p) in probs.iter().enumerate() {
            mass += p;
            if mass >= c.top_p {
                keep = n + 1;
                break;
            }
        }
        let probs = &probs[..keep];
        let total: f32 = probs.iter().sum();
        // Inverse-CDF sampling over the kept tokens (renormalised by `total`).
        let u = self.rng.next_f32() * total;
        let mut cdf = 0.0;
        for (n, &p) in probs.iter().enumerate() {
            cdf += p;
            if u < cdf {
                return Ok(ids[n] as u32);
            }
        }
        Ok(ids[keep - 1] as u32)
    }
}
// ANCHOR_END: sample
