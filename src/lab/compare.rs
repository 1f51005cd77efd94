//! The `use_cache=True` vs `use_cache=False` experiment (book: naive-vs-cached.md):
//! the same request through both paths, the tokens checked equal, the time compared.

use crate::error::{Error, Result};
use crate::generate::{generate_with, Decoder, GenerateOptions, Generation, PathKind};
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

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Same generated tokens on both paths.
    pub identical: bool,
    /// Naive total time / cached total time.
    pub speedup: f64,
    pub checkpoints: Vec<Checkpoint>,
    pub cached: Generation,
    pub naive: Generation,
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

/// Runs `prompt` through the cached path, then the naive path, each with a decoder from
/// `make_decoder` (on the CPU or the GPU, in any cache layout: see `crate::backend`).
pub fn compare_with<'a>(
    mut make_decoder: impl FnMut(PathKind) -> Result<Box<dyn Decoder + 'a>>,
    prompt: &[u32],
    opts: &GenerateOptions,
) -> Result<Comparison> {
    let mut run = |path| -> Result<Generation> {
        let mut decoder = make_decoder(path)?;
        let opts = GenerateOptions {
            path,
            ..opts.clone()
        };
        generate_with(decoder.as_mut(), prompt, &opts, |_| {})
    };
    let cached = run(PathKind::Cached)?;
    let naive = run(PathKind::Naive)?;
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
        checkpoints,
        cached,
        naive,
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
