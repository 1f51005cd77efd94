//! §3.2, measured to 8k tokens: the cache grows linearly, the work of a generation
//! quadratically (book: kv-size.md, "Linear memory, quadratic work").
//!
//! A cached decode step at context `t` streams every weight once (a constant) and reads
//! `t` cached keys and values in every layer (a term linear in `t`). So the step grows
//! linearly with the context, and a generation of `n` tokens, the sum of its steps,
//! grows as `a·n + b·n²/2`: quadratically once attention is a real share of the step.
//! This times the step at each context on SmolLM2-135M's shape with 9, 3 and 1 KV heads
//! (MHA, GQA, MQA), over caches filled with synthetic K and V as `kvlab gqa` does (8k
//! tokens of real prefill per point would take minutes), and sums the measured curve.

use super::gqa::{config_with_kv_heads, filled_cache, median_step_ms};
use super::timing::machine_name;
use crate::error::{Error, Result};
use crate::model::Model;
use serde::Serialize;

/// One variant's decode step at one context, and the generation up to it.
#[derive(Debug, Clone, Serialize)]
pub struct ContextPoint {
    pub context: usize,
    /// Median time of one cached decode step with `context` positions in the cache.
    pub step_ms: f64,
    /// The KV cache at `context` positions (f32).
    pub kv_bytes: usize,
    /// Time to generate `context` tokens one by one from the first measured context:
    /// the sum of the steps, the measured step time interpolated linearly between the
    /// measured contexts (a step's cost is linear in its context, so this is the sum
    /// the generation would take, within the step's own noise).
    pub generation_ms: f64,
    /// The same generation if every step cost what the first measured step did: the
    /// work without attention's growth.
    pub flat_generation_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct VariantSweep {
    /// "MHA", "GQA" or "MQA".
    pub variant: String,
    pub n_kv_heads: usize,
    pub points: Vec<ContextPoint>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LongContextReport {
    pub machine: String,
    pub reps: usize,
    pub contexts: Vec<usize>,
    pub variants: Vec<VariantSweep>,
}

/// The median of `reps` decode steps (after a warm-up one) on a cache of `context`
/// synthetic positions.
fn step_ms(model: &Model, context: usize, reps: usize) -> Result<f64> {
    let mut cache = filled_cache(&model.config, context, 1)?;
    median_step_ms(model, &mut cache, context, reps)
}

// ANCHOR: generation_sum
/// The sum of the steps from `contexts[0]` to each measured context, the step time
/// linear between measured points (the trapezoid rule: exact for a step cost linear in
/// its context). `(contexts[i], step[i])` sorted by context.
pub fn generation_sums(points: &[(usize, f64)]) -> Vec<f64> {
    let mut sums = Vec::with_capacity(points.len());
    let mut total = 0.0;
    for (i, &(context, step)) in points.iter().enumerate() {
        if i > 0 {
            let (previous, previous_step) = points[i - 1];
            total += (context - previous) as f64 * (previous_step + step) / 2.0;
        }
        sums.push(total);
    }
    sums
}
// ANCHOR_END: generation_sum

/// MHA, GQA and MQA on SmolLM2-135M's shape, a decode step at each of `contexts`.
pub fn run(contexts: &[usize], reps: usize) -> Result<LongContextReport> {
    let max = config_with_kv_heads(3).max_position_embeddings;
    let mut contexts = contexts.to_vec();
    contexts.sort_unstable();
    contexts.dedup();
    if contexts.len() < 2 || contexts[0] == 0 || contexts[contexts.len() - 1] >= max {
        return Err(Error::InvalidArgument(format!(
            "--sweep {contexts:?}: give at least two contexts between 1 and {}",
            max - 1
        )));
    }
    let reps = reps.max(1);
    let mut variants = Vec::new();
    for (variant, n_kv_heads) in [("MHA", 9), ("GQA", 3), ("MQA", 1)] {
        let config = config_with_kv_heads(n_kv_heads);
        let model = Model::random(config.clone(), 0)?;
        let steps = contexts
            .iter()
            .map(|&context| Ok((context, step_ms(&model, context, reps)?)))
            .collect::<Result<Vec<_>>>()?;
        let sums = generation_sums(&steps);
        let first_step = steps[0].1;
        let per_token = crate::cache::bytes_per_token(&config);
        let points = steps
            .iter()
            .zip(sums)
            .map(|(&(context, step_ms), generation_ms)| ContextPoint {
                context,
                step_ms,
                kv_bytes: per_token * context,
                generation_ms,
                flat_generation_ms: (context - contexts[0]) as f64 * first_step,
            })
            .collect();
        variants.push(VariantSweep {
            variant: variant.into(),
            n_kv_heads,
            points,
        });
    }
    Ok(LongContextReport {
        machine: machine_name(),
        reps,
        contexts,
        variants,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sum_of_a_linear_step_is_exact() {
        // step(t) = 10 + 0.01 t: the sum over t = 1..n is 10 (n-1) + 0.01 (n²-1)/2.
        let step = |t: usize| 10.0 + 0.01 * t as f64;
        let points: Vec<(usize, f64)> =
            [1, 100, 1000, 8000].iter().map(|&t| (t, step(t))).collect();
        let sums = generation_sums(&points);
        for (&(n, _), sum) in points.iter().zip(sums) {
            let exact = 10.0 * (n - 1) as f64 + 0.01 * ((n * n - 1) as f64) / 2.0;
            assert!(
                (sum - exact).abs() < 1e-6 * exact.max(1.0),
                "{n}: {sum} vs {exact}"
            );
        }
    }

    #[test]
    fn fewer_than_two_contexts_or_one_past_the_model_is_refused() {
        for bad in [vec![512], vec![0, 512], vec![512, 8192]] {
            let err = run(&bad, 1).unwrap_err().to_string();
            assert!(
                err.contains("give at least two contexts between 1 and 8191"),
                "{err}"
            );
        }
    }
}
