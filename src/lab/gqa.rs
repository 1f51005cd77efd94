//! `kvlab gqa`: what fewer KV heads buy at a long context, measured instead of asserted.
//!
//! The same model shape three times, SmolLM2-135M's (9 query heads of 64 dimensions,
//! 30 layers), with 9, 3 and 1 KV heads: multi-head (MHA), grouped-query (GQA, what
//! SmolLM2 ships) and multi-query attention (MQA). For each, a cache of `context`
//! positions and one cached decode step on top of it:
//!
//! - the cache's bytes, per token and in all (the size formula of kv-size.md, in f32);
//! - the decode step's median time (the whole forward pass: weights, attention, LM head);
//! - attention alone over the same cache, all layers, timed separately: its share of
//!   the step is the part of decode that the number of KV heads can change.
//!
//! The cache is filled with synthetic K and V, not by prefilling `context` tokens (4096
//! tokens of prefill would take minutes on a laptop CPU): the cost of a decode step depends
//! on how many positions it reads, not on what they hold. The weights are random (seeded)
//! for the same reason. Book: gqa.md.

use super::timing::{machine_name, median, ms_since};
use crate::cache::{KvStore, PreallocatedCache};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::model::{KvSource, Model};
use crate::rng::Rng;
use serde::Serialize;
use std::time::Instant;

/// One attention variant at one context.
#[derive(Debug, Clone, Serialize)]
pub struct GqaRow {
    /// "MHA", "GQA" or "MQA".
    pub variant: String,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// Query heads per KV head (`n_heads / n_kv_heads`).
    pub kv_mul: usize,
    /// `2 x layers x n_kv_heads x head_dim x 4` (f32).
    pub kv_bytes_per_token: usize,
    /// The cache at `context` positions.
    pub kv_bytes: usize,
    /// Parameters of the model (K and V projections shrink with the KV heads too).
    pub params: usize,
    /// Median time of one cached decode step at `context`.
    pub decode_ms: f64,
    pub tok_s: f64,
    /// Median time of attention alone (every layer) over the same cache.
    pub attention_ms: f64,
    /// `attention_ms / decode_ms`.
    pub attention_share: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct GqaReport {
    pub machine: String,
    pub context: usize,
    pub reps: usize,
    pub rows: Vec<GqaRow>,
}

/// SmolLM2-135M's shape with `n_kv_heads` KV heads.
pub fn config_with_kv_heads(n_kv_heads: usize) -> Config {
    let mut config = Config::smollm2_135m();
    config.num_key_value_heads = Some(n_kv_heads);
    config
}

/// The name of an attention variant.
fn variant(n_heads: usize, n_kv_heads: usize) -> &'static str {
    match n_kv_heads {
        1 => "MQA",
        n if n == n_heads => "MHA",
        _ => "GQA",
    }
}

// ANCHOR: fill
/// A cache of `context` positions, every layer filled with synthetic K and V, and one
/// free position for the timed step. Values in ±1 like a normalised key's components:
/// what they are changes no timing.
/// The whole decode step, timed: one token through every layer of `model`, attending
/// over the `context` positions `cache` holds (plus its own), cut back to `context`
/// before each of `reps` steps (after a warm-up one). Their median, in ms.
pub fn median_step_ms(
    model: &Model,
    cache: &mut dyn KvStore,
    context: usize,
    reps: usize,
) -> Result<f64> {
    let token = [(context % model.config.vocab_size) as u32];
    let mut steps = Vec::with_capacity(reps);
    for rep in 0..=reps {
        cache.truncate(context);
        let t = Instant::now();
        std::hint::black_box(model.forward(&token, KvSource::Cache(cache))?);
        if rep > 0 {
            steps.push(ms_since(t));
        }
    }
    Ok(median(steps))
}

pub fn filled_cache(config: &Config, context: usize, seed: u64) -> Result<PreallocatedCache> {
    let mut cache = PreallocatedCache::new(config, context + 1)?;
    let kv_dim = config.n_kv_heads() * config.head_dim();
    let mut rng = Rng::new(seed);
    let mut k = vec![0.0f32; context * kv_dim]; // [context, n_kv_heads * head_dim]
    let mut v = vec![0.0f32; context * kv_dim]; // reused for every layer
    for layer in 0..config.num_hidden_layers {
        k.iter_mut().for_each(|x| *x = rng.symmetric(1.0));
        v.iter_mut().for_each(|x| *x = rng.symmetric(1.0));
        cache.write(layer, &k, &v)?;
    }
    cache.advance(context);
    Ok(cache)
}
// ANCHOR_END: fill

// ANCHOR: measure
/// One variant: the decode step at `context`, and attention alone over the same cache.
pub fn measure(n_kv_heads: usize, context: usize, reps: usize) -> Result<GqaRow> {
    let config = config_with_kv_heads(n_kv_heads);
    let model = Model::random(config.clone(), 0)?;
    let mut cache = filled_cache(&config, context, 1)?;
    let decode_ms = median_step_ms(&model, &mut cache, context, reps)?;

    // Attention alone, as the step runs it in each layer: one query (all 9 heads) over
    // the `context + 1` positions the cache now holds.
    let heads = crate::attention::Heads::of(&config);
    let mut rng = Rng::new(2);
    let q: Vec<f32> = (0..heads.n_heads * heads.head_dim)
        .map(|_| rng.symmetric(1.0))
        .collect();
    let mut attention = Vec::with_capacity(reps);
    for rep in 0..=reps {
        let t = Instant::now();
        for layer in 0..config.num_hidden_layers {
            let view = KvStore::read(&cache, layer, context + 1);
            std::hint::black_box(view.attend(&q, context, heads));
        }
        if rep > 0 {
            attention.push(ms_since(t));
        }
    }

    let attention_ms = median(attention);
    let kv_bytes_per_token = crate::cache::bytes_per_token(&config);
    Ok(GqaRow {
        variant: variant(heads.n_heads, n_kv_heads).into(),
        n_heads: heads.n_heads,
        n_kv_heads,
        kv_mul: config.kv_mul(),
        kv_bytes_per_token,
        kv_bytes: kv_bytes_per_token * context,
        params: model.n_params(),
        decode_ms,
        tok_s: 1e3 / decode_ms,
        attention_ms,
        attention_share: attention_ms / decode_ms,
    })
}
// ANCHOR_END: measure

/// MHA, GQA and MQA on SmolLM2-135M's shape (9 query heads: 9, 3 and 1 KV heads).
pub fn run(context: usize, reps: usize) -> Result<GqaReport> {
    let max = Config::smollm2_135m().max_position_embeddings;
    if context == 0 || context >= max {
        return Err(Error::InvalidArgument(format!(
            "--context {context}: give a context between 1 and {}",
            max - 1
        )));
    }
    let reps = reps.max(1);
    let rows = [9, 3, 1]
        .into_iter()
        .map(|n_kv_heads| measure(n_kv_heads, context, reps))
        .collect::<Result<Vec<_>>>()?;
    Ok(GqaReport {
        machine: machine_name(),
        context,
        reps,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::KvStore;

    #[test]
    fn the_three_variants_have_smollm2s_shape_and_their_kv_heads() {
        for (n_kv_heads, name, kv_mul) in [(9, "MHA", 1), (3, "GQA", 3), (1, "MQA", 9)] {
            let config = config_with_kv_heads(n_kv_heads);
            config.validate().unwrap();
            assert_eq!(config.n_kv_heads(), n_kv_heads);
            assert_eq!(config.kv_mul(), kv_mul);
            assert_eq!(variant(config.num_attention_heads, n_kv_heads), name);
            // 2 x 30 layers x n_kv_heads x 64 x 4 bytes.
            let per_token = crate::cache::bytes_per_token(&config);
            assert_eq!(per_token, 2 * 30 * n_kv_heads * 64 * 4);
        }
    }

    #[test]
    fn the_filled_cache_holds_context_positions_and_room_for_one_more() {
        let mut config = config_with_kv_heads(3);
        config.num_hidden_layers = 2;
        let cache = filled_cache(&config, 10, 1).unwrap();
        assert_eq!(KvStore::len(&cache), 10);
        assert_eq!(cache.capacity(), 11);
        assert_eq!(
            cache.bytes_used(),
            10 * crate::cache::bytes_per_token(&config)
        );
        let (k, v) = cache.read(1, 10);
        assert!(k.iter().chain(v).all(|x| x.abs() <= 1.0));
        assert!(
            k.iter().any(|&x| x != 0.0) && k != v,
            "synthetic K and V are filled"
        );
    }

    #[test]
    fn a_context_outside_the_model_is_an_error() {
        for context in [0, 8192, usize::MAX] {
            let err = run(context, 1).unwrap_err().to_string();
            assert!(err.contains("--context"), "{err}");
        }
    }
}
