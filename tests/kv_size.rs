//! The KV-size formula (the seed's §3.1), its figures, and the real cache's allocation.

mod common;

use kvlab::cache::PreallocatedCache;
use kvlab::kv_size::{KvDtype, KvShape};
use kvlab::model::KvSource;
use kvlab::{Config, Error, Model};

const LLAMA_7B: KvShape = KvShape {
    layers: 32,
    kv_heads: 32,
    head_dim: 128,
    dtype: KvDtype::Bf16,
};

#[test]
fn seed_7b_figures() {
    assert_eq!(LLAMA_7B.bytes_per_token(), 524_288); // 512 KiB per token
    assert_eq!(LLAMA_7B.bytes(2048, 1), 1_073_741_824);
    assert_eq!(LLAMA_7B.bytes(32768, 1), 17_179_869_184);
    assert_eq!(LLAMA_7B.bytes(2048, 8), 8 * 1_073_741_824); // 8 concurrent requests: 8x
}

#[test]
fn the_7b_cache_outgrows_its_weights_near_32k() {
    // §3.1: "at 32K the cache is larger than the 14 GB of weights". Llama-2-7B has
    // 6,738,415,616 parameters: 13.48 GB in bf16.
    let report = LLAMA_7B
        .report(32768, 1)
        .unwrap()
        .with_weights(6_738_415_616)
        .unwrap();
    let w = report.weights.unwrap();
    assert_eq!(w.weight_bytes, 13_476_831_232);
    assert_eq!(w.crossover_tokens, 25_706);
    // The first context past the weights: one token less is not.
    let cache = |tokens: u64| tokens * LLAMA_7B.bytes_per_token() as u64;
    assert!(cache(w.crossover_tokens) > w.weight_bytes);
    assert!(cache(w.crossover_tokens - 1) <= w.weight_bytes);
    assert!(
        report.bytes as u64 > w.weight_bytes,
        "at 32K the cache is the larger"
    );
    // Eight requests: eight caches, one set of weights.
    let eight = LLAMA_7B
        .report(2048, 8)
        .unwrap()
        .with_weights(6_738_415_616)
        .unwrap();
    assert_eq!(
        eight.weights.unwrap().crossover_tokens,
        13_476_831_232 / (8 * 524_288) + 1
    );
    // A parameter count from a user is checked.
    let err = LLAMA_7B
        .report(1, 1)
        .unwrap()
        .with_weights(u64::MAX)
        .unwrap_err();
    assert!(
        err.to_string().contains("overflows a 64-bit byte count"),
        "{err}"
    );
}

#[test]
fn smollm2_per_token_cost() {
    let c = Config::smollm2_135m();
    let shape = KvShape {
        layers: c.num_hidden_layers,
        kv_heads: c.n_kv_heads(),
        head_dim: c.head_dim(),
        dtype: KvDtype::Bf16,
    };
    assert_eq!(shape.bytes_per_token(), 23_040);
    // Without GQA (9 KV heads, one per query head) it would be 3x as much.
    assert_eq!(
        KvShape {
            kv_heads: 9,
            ..shape
        }
        .bytes_per_token(),
        3 * 23_040
    );
}

#[test]
fn formula_equals_the_real_allocation() {
    for (config, capacity) in [
        (Config::smollm2_135m(), 1000),
        (common::tiny_config(2, 6, 2, 8, 64), 37),
        (common::tiny_config(3, 4, 1, 16, 64), 5),
    ] {
        let cache = PreallocatedCache::new(&config, capacity).unwrap();
        let shape = KvShape {
            layers: config.num_hidden_layers,
            kv_heads: config.n_kv_heads(),
            head_dim: config.head_dim(),
            dtype: KvDtype::F32,
        };
        assert_eq!(cache.bytes_allocated(), shape.bytes(capacity, 1));
    }
}

#[test]
fn used_bytes_follow_the_tokens() {
    let config = common::tiny_config(2, 4, 2, 8, 64);
    let model = Model::random(config.clone(), 1).unwrap();
    let mut cache = PreallocatedCache::new(&config, 10).unwrap();
    let per_token = 2 * 2 * 2 * 8 * 4;
    model
        .forward(&[1, 2, 3], KvSource::Cache(&mut cache))
        .unwrap();
    assert_eq!(cache.bytes_used(), 3 * per_token);
    model.forward(&[4], KvSource::Cache(&mut cache)).unwrap();
    assert_eq!(cache.bytes_used(), 4 * per_token);
    assert_eq!(cache.bytes_allocated(), 10 * per_token);
}

#[test]
fn a_full_cache_is_an_error_and_stays_intact() {
    let config = common::tiny_config(2, 4, 2, 8, 64);
    let model = Model::random(config.clone(), 1).unwrap();
    let mut cache = PreallocatedCache::new(&config, 4).unwrap();
    let logits = model
        .forward(&[1, 2, 3], KvSource::Cache(&mut cache))
        .unwrap();
    let err = model
        .forward(&[4, 5], KvSource::Cache(&mut cache))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::CacheFull {
                capacity: 4,
                used: 3,
                requested: 2
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("KV cache full"));
    // Nothing was written: the cache still serves the next token correctly.
    assert_eq!(cache.len(), 3);
    let next = model.forward(&[4], KvSource::Cache(&mut cache)).unwrap();
    let naive = model.forward(&[1, 2, 3, 4], KvSource::ThisPass).unwrap();
    assert_eq!(next, naive);
    assert_ne!(logits, next);
}

/// The figure, measured: Gemma 3 270M's own cache (a ring per local layer)
/// filled to 32,768 positions holds (3 × 32,768 + 15 × 512) / (18 × 32,768) of what
/// every layer holding every position would, exactly the per-group formula; it
/// reserves the window plus one pass per local layer beyond that.
#[test]
fn gemma3s_hybrid_cache_measured_at_32k_is_the_per_group_formula() {
    let config = Config::gemma3_270m();
    let context = 32_768;
    let measured = kvlab::lab::kv_fill::measure_kv(&config, context).unwrap();
    let formula = KvShape::of(&config, KvDtype::F32)
        .report(context, 1)
        .unwrap()
        .with_layer_groups(&config)
        .unwrap()
        .layer_groups
        .expect("Gemma 3 has local layers");
    assert_eq!((formula.global_layers, formula.local_layers), (3, 15));
    assert_eq!(measured.bytes_used, formula.bytes);
    assert_eq!(measured.used_fraction_of_full, formula.fraction_of_full);
    let row = 2 * 256 * 4; // K and V of one KV head of 256, f32, one layer-position
    assert_eq!(measured.bytes_used, (3 * context + 15 * 512) * row);
    let pass = kvlab::cache::hybrid::DEFAULT_PASS;
    assert_eq!(
        measured.bytes_reserved,
        (3 * context + 15 * (511 + pass)) * row
    );
    assert_eq!(measured.passes, context.div_ceil(pass));
    assert!((measured.used_fraction_of_full - 0.1797).abs() < 1e-4); // ≈ 18 %
}

/// A model without local layers: the measured cache is the full one, byte for byte.
#[test]
fn smollm2s_measured_cache_is_every_position() {
    let config = Config::smollm2_135m();
    let measured = kvlab::lab::kv_fill::measure_kv(&config, 1000).unwrap();
    let bytes = KvShape::of(&config, KvDtype::F32).bytes(1000, 1);
    assert_eq!(
        (measured.bytes_used, measured.bytes_reserved),
        (bytes, bytes)
    );
    assert_eq!(measured.passes, 1);
}

/// `--measure` fills a real cache: a size past its bound is refused before allocating.
#[test]
fn measuring_an_absurd_cache_is_refused_naming_the_fix() {
    let err = kvlab::lab::kv_fill::measure_kv(&Config::smollm2_135m(), usize::MAX / 4)
        .unwrap_err()
        .to_string();
    assert!(err.contains("smaller --seq-len"), "{err}");
}

/// A cut deeper than a ring can serve forgets everything (callers feed from `len()`),
/// and a rollback of one pass is served.
#[test]
fn a_hybrid_cache_serves_a_one_pass_rollback_and_forgets_all_on_a_deeper_cut() {
    use kvlab::cache::{HybridCache, KvStore};
    let config = common::tiny_gemma_config(2, 1, 8, 32, 4, &[true, false]);
    let model = Model::random(config, 7).unwrap();
    let mut cache = HybridCache::new(&model.config, 64, 2).unwrap();
    let prompt: Vec<u32> = (0..20).map(|i| i % 32).collect();
    kvlab::generate::prefill_in_passes(&model, &mut cache, &prompt).unwrap();
    assert_eq!(cache.slots_per_layer(), vec![4 - 1 + 2, 64]);
    cache.truncate(18);
    assert_eq!(cache.len(), 18, "a rollback of one pass");
    cache.truncate(15);
    assert_eq!(cache.len(), 0, "positions 12..15 are gone from the ring");
    let err = model
        .forward(&prompt[..3], KvSource::Cache(&mut cache))
        .unwrap_err()
        .to_string();
    assert!(err.contains("at most 2 tokens per forward pass"), "{err}");
}
