//! `kvlab bench-kv`: what each `--kv` policy costs in decode time (book: kv-quantization.md).
//!
//! One decode step with `context` positions cached, for every policy, steps interleaved
//! rep by rep (a slow moment of the shared machine hits them all), medians reported. A
//! quantized cache reads 4-6x fewer bytes of K and V but dequantizes each head's run
//! inside attention; at SmolLM2's size decode streams ~540 MB of weights per token against
//! ~90 MB of f32 cache at 2048 positions, so the cache's share, and what quantizing it can
//! win or lose, is bounded by that ratio.

use super::timing::{machine_name, median, ms_since, synthetic_prompt};
use crate::cache::{new_policy_store, KvPolicy, KvStore};
use crate::error::{Error, Result};
use crate::model::{KvSource, Model};
use serde::Serialize;
use std::time::Instant;

/// One policy at one context.
#[derive(Debug, Clone, Serialize)]
pub struct KvDecodeAt {
    pub kv: String,
    pub label: String,
    pub context: usize,
    /// Median time of one decode step.
    pub ms: f64,
    pub tok_s: f64,
    /// Step time relative to the full cache's at the same context (1.2 = 20 % slower).
    pub vs_full: f64,
    /// Bytes the cache reserves for `context + 1` positions.
    pub kv_cache_bytes: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct KvBench {
    pub machine: String,
    pub model: String,
    pub threads: usize,
    pub reps: usize,
    pub rows: Vec<KvDecodeAt>,
}

// ANCHOR: kv_bench
/// Decode step time of each policy in `policies` (the first is the baseline, normally the
/// full cache) at each context.
pub fn run(
    model: &Model,
    model_name: &str,
    policies: &[KvPolicy],
    contexts: &[usize],
    reps: usize,
) -> Result<KvBench> {
    let max = model.config.max_position_embeddings;
    if let Some(&c) = contexts.iter().find(|&&c| c == 0 || c >= max) {
        return Err(Error::InvalidArgument(format!(
            "context {c}: contexts must be between 1 and {}",
            max - 1
        )));
    }
    if policies.is_empty() {
        return Err(Error::InvalidArgument(
            "give at least one --kv policy".into(),
        ));
    }
    let mut rows = Vec::new();
    for &context in contexts {
        let seq = synthetic_prompt(context + 1, model.config.vocab_size, 0);
        let mut caches = Vec::new();
        for &policy in policies {
            let mut cache = new_policy_store(&model.config, policy, context + 1)?;
            model.forward_hidden(&seq[..context], &mut KvSource::Cache(&mut cache))?;
            caches.push((policy, cache, Vec::new()));
        }
        // One warm-up step each, then `reps` rounds, policies interleaved.
        for round in 0..=reps {
            for (_, cache, times) in caches.iter_mut() {
                cache.truncate(context);
                let t = Instant::now();
                model.forward(&seq[context..], KvSource::Cache(&mut **cache))?;
                if round > 0 {
                    times.push(ms_since(t));
                }
            }
        }
        let base = median(caches[0].2.clone());
        for (policy, cache, times) in caches {
            let ms = median(times);
            rows.push(KvDecodeAt {
                kv: policy.name().into(),
                label: policy.label(),
                context,
                ms,
                tok_s: 1e3 / ms,
                vs_full: ms / base,
                kv_cache_bytes: cache.bytes_reserved(),
            });
        }
    }
    Ok(KvBench {
        machine: machine_name(),
        model: model_name.into(),
        threads: rayon::current_num_threads(),
        reps,
        rows,
    })
}
// ANCHOR_END: kv_bench
