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
