//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod cli;
#[cfg(feature = "cuda")]
pub mod gpu;

use kvlab::cache::PreallocatedCache;
use kvlab::model::KvSource;
use kvlab::simd::WeightElem;
use kvlab::{Config, Model};

/// A small Llama-shaped config.
pub fn tiny_config(
    layers: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    vocab: usize,
) -> Config {
    Config {
        hidden_size: n_heads * head_dim,
        intermediate_size: 3 * n_heads * head_dim,
        num_hidden_layers: layers,
        num_attention_heads: n_heads,
        num_key_value_heads: Some(n_kv_heads),
        head_dim: None,
        vocab_size: vocab,
        max_position_embeddings: 256,
        tie_word_embeddings: true,
        ..Config::smollm2_135m()
    }
}

/// Logits after each prefix `prompt + continuation[..i]`, i = 0..=len, on the cached path:
/// one prefill, then one token per step.
pub fn cached_step_logits<E: WeightElem>(
    model: &Model<E>,
    prompt: &[u32],
    continuation: &[u32],
) -> Vec<Vec<f32>> {
    let mut cache =
        PreallocatedCache::new(&model.config, prompt.len() + continuation.len()).unwrap();
    let mut all = vec![model.forward(prompt, KvSource::Cache(&mut cache)).unwrap()];
    for &t in continuation {
        all.push(model.forward(&[t], KvSource::Cache(&mut cache)).unwrap());
    }
    all
}

/// The same logits on the naive path: the whole prefix, recomputed every time.
pub fn naive_step_logits<E: WeightElem>(
    model: &Model<E>,
    prompt: &[u32],
    continuation: &[u32],
) -> Vec<Vec<f32>> {
    let mut seq = prompt.to_vec();
    let mut all = vec![model.forward(&seq, KvSource::ThisPass).unwrap()];
    for &t in continuation {
        seq.push(t);
        all.push(model.forward(&seq, KvSource::ThisPass).unwrap());
    }
    all
}

/// Bit patterns, so that comparisons are exact (and -0.0 != 0.0, NaN == NaN).
pub fn bits(rows: &[Vec<f32>]) -> Vec<Vec<u32>> {
    rows.iter()
        .map(|r| r.iter().map(|v| v.to_bits()).collect())
        .collect()
}
