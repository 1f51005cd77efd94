//! The `use_cache=True` vs `use_cache=False` experiment (book: naive-vs-cached.md):
//! the same request through both paths, the tokens checked equal, the time compared.

use super::against_engine::AgainstEngine;
use crate::error::{Error, Result};
use crate::generate::{generate_with, timed, Decoder, GenerateOptions, Generation, PathKind};
use crate::lab::timing::median;
use serde::Serialize;

/// Cumulative and per-step time of both paths at one token index.
#[derive(Debug, Clone, Serialize)]
pub struct Checkpoint {
    /// 1-based index of the generated token.
    pub token: usize,
    /// Sequence length the step processed (prompt + tokens before it).
    pub context: usize,
    pub naive_step_ms: f64,
    pub cached_step_ms: f64,
    /// Mean latency of the steps since the previous checkpoint (this one included):
    /// single steps jitter by 10-20 % on a shared machine, the mean shows the trend.
    pub naive_mean_step_ms: f64,
    pub cached_mean_step_ms: f64,
    pub naive_cumulative_ms: f64,
    pub cached_cumulative_ms: f64,
}

/// One path's time to first token, over the counted rounds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TtftSamples {
    /// Building the decoder, every round: reserving and zero-filling the KV cache.
    pub alloc_ms: Vec<f64>,
    /// Prefill + sampling the first token, every round (the clock starts after the
    /// decoder is built).
    pub ttft_ms: Vec<f64>,
    pub median_alloc_ms: f64,
    pub median_ttft_ms: f64,
    /// The median of `alloc + ttft` per round: the first token as a request sees it.
    pub median_ttft_with_alloc_ms: f64,
}

/// TTFT measured apart from the full generations: one warm-up round, then `rounds`
/// counted ones, the two paths alternating which goes first. A single cold run puts the
/// first touch of the weights, the allocator's first pages and a cold cache on whichever
/// path runs first, and a one-off on whichever path it hits: the median of alternating
/// rounds cancels both.
#[derive(Debug, Clone, Serialize)]
pub struct TtftRounds {
    /// Counted rounds (the warm-up round is not among them).
    pub rounds: usize,
    /// The order of every round, the warm-up first.
    pub order: Vec<[PathKind; 2]>,
    pub cached: TtftSamples,
    pub naive: TtftSamples,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Same generated tokens on both paths.
    pub identical: bool,
    /// Naive total time / cached total time (the full generations).
    pub speedup: f64,
    /// TTFT alone, medians over alternating rounds: the figure to quote for TTFT.
    pub ttft: TtftRounds,
    /// The order the two full generations ran in (after the TTFT rounds, so warm).
    pub generation_order: [PathKind; 2],
    pub checkpoints: Vec<Checkpoint>,
    pub cached: Generation,
    pub naive: Generation,
    /// With `--impl textbook|learner`: the same prompt through the engine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub against_engine: Option<AgainstEngine>,
}

/// More rounds than this only make a learner wait: the median of 5 is already stable.
pub const MAX_TTFT_ROUNDS: usize = 100;

/// Round `r`'s order: cached first in even rounds, naive first in odd ones.
fn round_order(r: usize) -> [PathKind; 2] {
    if r.is_multiple_of(2) {
        [PathKind::Cached, PathKind::Naive]
    } else {
        [PathKind::Naive, PathKind::Cached]
    }
}

/// Token indices the table shows: 1, 2, 4, 8, 16, 32... and the last.
pub fn checkpoint_tokens(n: usize) -> Vec<usize> {
    let mut at: Vec<usize> = std::iter::successors(Some(1usize), |&t| Some(t * 2))
        .take_while(|&t| t <= n)
        .collect();
    if at.last() != Some(&n) && n > 0 {
        at.push(n);
    }
    at
}

/// Runs `prompt` through both paths, each with a decoder from `make_decoder` (on the
/// CPU or the GPU, in any cache layout: see `crate::backend`). First TTFT alone: a
/// warm-up round and `ttft_rounds` counted rounds of building a decoder and taking its
/// first token, the paths alternating ([`TtftRounds`]). Then one full generation each,
/// in the order after the last round's, for the per-step table and the tokens.
pub fn compare_with<'a>(
    mut make_decoder: impl FnMut(PathKind) -> Result<Box<dyn Decoder + 'a>>,
    prompt: &[u32],
    opts: &GenerateOptions,
    ttft_rounds: usize,
) -> Result<Comparison> {
    if !(1..=MAX_TTFT_ROUNDS).contains(&ttft_rounds) {
        return Err(Error::InvalidArgument(format!(
            "--ttft-rounds {ttft_rounds}: give 1 to {MAX_TTFT_ROUNDS} (the TTFT figures are medians over rounds)"
        )));
    }
    opts.sampler.validate()?;
    // A generation of one token: its TTFT, timed as every generation's is.
    let mut first_token = |path| -> Result<(f64, f64)> {
        let (mut decoder, alloc_ms) = timed(|| make_decoder(path))?;
        let one = GenerateOptions {
            max_new_tokens: 1,
            path,
            ..opts.clone()
        };
        let generation = generate_with(decoder.as_mut(), prompt, &one, |_| {})?;
        Ok((alloc_ms, generation.ttft_ms))
    };
    let mut ttft = TtftRounds {
        rounds: ttft_rounds,
        order: Vec::with_capacity(ttft_rounds + 1),
        cached: TtftSamples::default(),
        naive: TtftSamples::default(),
    };
    for round in 0..=ttft_rounds {
        let order = round_order(round);
        for path in order {
            let (alloc_ms, ttft_ms) = first_token(path)?;
            // Round 0 warms up: the weights' pages, the allocator, the instruction cache.
            if round > 0 {
                let samples = match path {
                    PathKind::Cached => &mut ttft.cached,
                    PathKind::Naive => &mut ttft.naive,
                };
                samples.alloc_ms.push(alloc_ms);
                samples.ttft_ms.push(ttft_ms);
            }
        }
        ttft.order.push(order);
    }
    for samples in [&mut ttft.cached, &mut ttft.naive] {
        samples.median_alloc_ms = median(samples.alloc_ms.clone());
        samples.median_ttft_ms = median(samples.ttft_ms.clone());
        let with_alloc = samples.alloc_ms.iter().zip(&samples.ttft_ms);
        samples.median_ttft_with_alloc_ms = median(with_alloc.map(|(a, t)| a + t).collect());
    }

    let generation_order = round_order(ttft_rounds + 1);
    let mut run = |path| -> Result<Generation> {
        let (mut decoder, alloc_ms) = timed(|| make_decoder(path))?;
        let opts = GenerateOptions {
            path,
            ..opts.clone()
        };
        let generation = generate_with(decoder.as_mut(), prompt, &opts, |_| {})?;
        Ok(generation.with_alloc_ms(alloc_ms))
    };
    let [first, second] = generation_order;
    let (first, second) = (run(first)?, run(second)?);
    let (cached, naive) = match generation_order[0] {
        PathKind::Cached => (first, second),
        PathKind::Naive => (second, first),
    };
    let identical = cached.generated_ids == naive.generated_ids;
    let n = cached.token_ms.len().min(naive.token_ms.len());
    let cumulative = |ms: &[f64], t: usize| ms[..t].iter().sum::<f64>();
    let at = checkpoint_tokens(n);
    let previous: Vec<usize> = std::iter::once(0).chain(at.iter().copied()).collect();
    let mean =
        |ms: &[f64], from: usize, to: usize| ms[from..to].iter().sum::<f64>() / (to - from) as f64;
    let checkpoints = at
        .iter()
        .zip(&previous)
        .map(|(&t, &prev)| Checkpoint {
            naive_mean_step_ms: mean(&naive.token_ms, prev, t),
            cached_mean_step_ms: mean(&cached.token_ms, prev, t),
            token: t,
            context: prompt.len() + t - 1,
            naive_step_ms: naive.token_ms[t - 1],
            cached_step_ms: cached.token_ms[t - 1],
            naive_cumulative_ms: cumulative(&naive.token_ms, t),
            cached_cumulative_ms: cumulative(&cached.token_ms, t),
        })
        .collect();
    Ok(Comparison {
        identical,
        speedup: naive.total_ms / cached.total_ms,
        ttft,
        generation_order,
        checkpoints,
        cached,
        naive,
        against_engine: None,
    })
}

impl Comparison {
    /// [`Error::Mismatch`] unless both paths generated the same tokens.
    pub fn check(&self) -> Result<()> {
        if self.identical {
            Ok(())
        } else {
            Err(Error::Mismatch(
                "the naive and cached paths generated different tokens".into(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::KvBytes;
    use crate::sampler::SamplerConfig;

    /// A decoder whose best next token is always `(last + 1) % 4`: no model needed.
    struct Counting(u32);

    impl Decoder for Counting {
        fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>> {
            self.step(*prompt.last().unwrap_or(&0))
        }
        fn step(&mut self, token: u32) -> Result<Vec<f32>> {
            self.0 = token;
            let mut logits = vec![0.0; 4];
            logits[(token as usize + 1) % 4] = 1.0;
            Ok(logits)
        }
        fn kv_bytes(&self) -> KvBytes {
            KvBytes::default()
        }
    }

    fn opts() -> GenerateOptions {
        GenerateOptions {
            max_new_tokens: 5,
            path: PathKind::Cached,
            sampler: SamplerConfig::default(),
            eos_ids: vec![],
        }
    }

    #[test]
    fn ttft_rounds_alternate_and_skip_the_warm_up() {
        let mut built = Vec::new();
        let cmp = compare_with(
            |path| {
                built.push(path);
                Ok(Box::new(Counting(0)))
            },
            &[1, 2],
            &opts(),
            3,
        )
        .unwrap();
        use PathKind::{Cached as C, Naive as N};
        // Warm-up (C, N), rounds (N, C), (C, N), (N, C), then the generations (C, N).
        assert_eq!(built, [C, N, N, C, C, N, N, C, C, N]);
        assert_eq!(cmp.ttft.order, [[C, N], [N, C], [C, N], [N, C]]);
        assert_eq!(cmp.generation_order, [C, N]);
        for samples in [&cmp.ttft.cached, &cmp.ttft.naive] {
            assert_eq!((samples.alloc_ms.len(), samples.ttft_ms.len()), (3, 3));
            let sums: Vec<f64> = (0..3)
                .map(|i| samples.alloc_ms[i] + samples.ttft_ms[i])
                .collect();
            assert_eq!(samples.median_ttft_with_alloc_ms, median(sums));
        }
        assert!(cmp.identical);
        assert_eq!(cmp.cached.generated_ids, [3, 0, 1, 2, 3]);
        let g = &cmp.cached;
        assert_eq!(g.ttft_with_alloc_ms, g.alloc_ms + g.ttft_ms);
    }

    #[test]
    fn zero_rounds_is_refused_with_the_fix() {
        let err = compare_with(|_| Ok(Box::new(Counting(0))), &[1], &opts(), 0).unwrap_err();
        assert!(
            err.to_string().contains("--ttft-rounds 0: give 1 to 100"),
            "{err}"
        );
    }
}
