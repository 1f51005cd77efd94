//! The quantized caches (src/cache/quant/) against their plain twin, an f32 cache holding
//! fake-quantized K and V: bitwise-equal logits on random tiny models and texts; the
//! codec's rounding error within half a step; the bytes against their formula.

mod common;

use common::{bits, step_logits_on, tiny_config};
use kvlab::cache::new_policy_store;
use kvlab::cache::policy::{KvPolicy, PolicyParams};
use kvlab::cache::quant::codec::{dequantize_i8, dequantize_u4, quantize_i8, quantize_u4};
use kvlab::cache::quant::{reserved_bytes, FakeQuantCache, QuantCache};
use kvlab::cache::KvStore;
use kvlab::kv_size::{KvDtype, KvShape};
use kvlab::model::KvSource;
use kvlab::{Config, Model};
use proptest::prelude::*;

/// Random small shapes (MHA, GQA, MQA; 1-2 layers), with a quantization group that divides
/// head_dim, and one of the three quantized policies.
fn case_strategy() -> impl Strategy<Value = (Config, KvPolicy)> {
    (
        1usize..=2,
        1usize..=3,
        1usize..=3,
        1usize..=3,
        16usize..=96,
        0usize..3,
        any::<prop::sample::Index>(),
    )
        .prop_map(|(layers, n_kv_heads, group, half_head, vocab, which, g)| {
            let config = tiny_config(layers, n_kv_heads * group, n_kv_heads, 4 * half_head, vocab);
            let head_dim = config.head_dim();
            let divisors: Vec<usize> = (1..=head_dim)
                .filter(|&d| head_dim.is_multiple_of(d))
                .collect();
            let group = divisors[g.index(divisors.len())];
            let policy = match which {
                0 => KvPolicy::Int8,
                1 => KvPolicy::Int4PerToken { group },
                _ => KvPolicy::Int4Kivi { group },
            };
            (config, policy)
        })
}

fn ids(vocab: usize, len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(0..vocab as u32, len)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// A quantized cache gives the logits of the f32 cache holding the same values
    /// quantized-then-dequantized, bit for bit, at every step: attention's in-place
    /// dequantization adds no rounding of its own.
    #[test]
    fn quantized_cache_equals_its_fake_quantized_twin(
        (config, policy) in case_strategy(),
        seed in 0u64..1000,
        prompt in ids(16, 1..12),
        continuation in ids(16, 0..24),
    ) {
        let model = Model::random(config.clone(), seed).unwrap();
        let capacity = prompt.len() + continuation.len();
        let mut quant = QuantCache::new(&config, policy, capacity).unwrap();
        let mut fake = FakeQuantCache::new(&config, policy, capacity).unwrap();
        let q = step_logits_on(&model, &mut quant, &prompt, &continuation);
        let f = step_logits_on(&model, &mut fake, &prompt, &continuation);
        prop_assert_eq!(bits(&q), bits(&f));
    }

    /// The same after a truncation (a chat turn that diverges), which in KIVI's layout may
    /// cut into a group already quantized: both put the same values back.
    #[test]
    fn truncation_keeps_the_twins_equal(
        (config, policy) in case_strategy(),
        seed in 0u64..1000,
        first in ids(16, 2..20),
        cut in any::<prop::sample::Index>(),
        second in ids(16, 1..12),
    ) {
        let model = Model::random(config.clone(), seed).unwrap();
        let capacity = first.len() + second.len();
        let mut quant = QuantCache::new(&config, policy, capacity).unwrap();
        let mut fake = FakeQuantCache::new(&config, policy, capacity).unwrap();
        let keep = 1 + cut.index(first.len() - 1);
        let mut after = Vec::new();
        for cache in [&mut quant as &mut dyn KvStore, &mut fake] {
            step_logits_on(&model, cache, &first[..1], &first[1..]);
            cache.truncate(keep);
            after.push(step_logits_on(&model, cache, &second[..1], &second[1..]));
        }
        prop_assert_eq!(bits(&after[0]), bits(&after[1]));
    }

    /// Rounding to the nearest of the 255 int8 levels is off by at most half a step
    /// (`scale / 2`) per element, plus the f32 rounding of one division and one
    /// multiplication (a few ulps of the element: `4 * EPSILON * |x|`).
    #[test]
    fn int8_error_is_at_most_half_a_step(x in prop::collection::vec(-1e3f32..1e3, 1..96)) {
        let mut codes = vec![0i8; x.len()];
        let scale = quantize_i8(&x, &mut codes);
        for (&v, &q) in x.iter().zip(&codes) {
            let err = (v - dequantize_i8(q, scale)).abs();
            prop_assert!(err <= 0.5 * scale + 4.0 * f32::EPSILON * v.abs().max(scale), "x {v} q {q} scale {scale} err {err}");
        }
    }

    /// The same for the 16 int4 levels between the run's min and max.
    #[test]
    fn int4_error_is_at_most_half_a_step(x in prop::collection::vec(-1e3f32..1e3, 1..96)) {
        let mut codes = vec![0u8; x.len()];
        let (scale, min) = quantize_u4(&x, &mut codes);
        let max_abs = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (&v, &q) in x.iter().zip(&codes) {
            prop_assert!(q <= 15);
            let err = (v - dequantize_u4(q, scale, min)).abs();
            prop_assert!(err <= 0.5 * scale + 4.0 * f32::EPSILON * max_abs, "x {v} q {q} scale {scale} min {min} err {err}");
        }
    }

    /// Bytes: what each quantized cache reserves is its formula; what it uses after `n`
    /// tokens is `n x quantized_bytes_per_token` (per token), or codes and scales of the
    /// full groups plus the f32 residual (KIVI's keys).
    #[test]
    fn bytes_match_the_formula((config, policy) in case_strategy(), n in 1usize..40) {
        let model = Model::random(config.clone(), 7).unwrap();
        let mut cache = QuantCache::new(&config, policy, n).unwrap();
        prop_assert_eq!(cache.bytes_reserved(), reserved_bytes(&config, policy, n).unwrap());
        let prompt: Vec<u32> = (0..n as u32).map(|i| i % 16).collect();
        model.forward(&prompt, KvSource::Cache(&mut cache)).unwrap();
        let shape = KvShape::of(&config, KvDtype::Int8);
        let kv_dim = config.n_kv_heads() * config.head_dim();
        let layers = config.num_hidden_layers;
        let used = match policy {
            KvPolicy::Int8 => n * shape.quantized_bytes_per_token(8, config.head_dim()),
            KvPolicy::Int4PerToken { group } => n * shape.quantized_bytes_per_token(4, group),
            KvPolicy::Int4Kivi { group } => {
                let full = n / group;
                // Values per token; keys: codes + (scale, min) per channel per full group,
                // and the tail in f32.
                n * shape.quantized_bytes_per_token(4, group) / 2
                    + layers * (full * group * kv_dim / 2 + full * kv_dim * 8 + (n - full * group) * kv_dim * 4)
            }
            _ => unreachable!(),
        };
        prop_assert_eq!(cache.bytes_used(), used);
    }
}

/// SmolLM2-135M (30 layers, 3 KV heads of 64), by hand: f32 is 2 x 30 x 192 x 4 = 46 080
/// bytes per token; int8 with one f32 scale per head, 2 x 30 x (192 + 3 x 4) = 12 240;
/// int4 with a scale and a zero point per 32 values, 2 x 30 x (96 + 6 x 8) = 8 640.
#[test]
fn smollm2_bytes_per_token() {
    let shape = KvShape::of(&Config::smollm2_135m(), KvDtype::F32);
    assert_eq!(shape.bytes_per_token(), 46_080);
    assert_eq!(shape.quantized_bytes_per_token(8, 64), 12_240);
    assert_eq!(shape.quantized_bytes_per_token(4, 32), 8_640);
}

/// The policies' names and their errors, as `--kv` gives them.
#[test]
fn policy_names_parse_and_bad_ones_say_what_to_do() {
    let p = PolicyParams::default();
    assert_eq!(KvPolicy::parse("int8", p).unwrap(), KvPolicy::Int8);
    assert_eq!(
        KvPolicy::parse("int4", p).unwrap(),
        KvPolicy::Int4Kivi { group: 32 }
    );
    assert_eq!(
        KvPolicy::parse(
            "int4-per-token",
            PolicyParams {
                group: Some(16),
                ..p
            }
        )
        .unwrap(),
        KvPolicy::Int4PerToken { group: 16 }
    );
    // An option the policy does not read is refused, never silently ignored.
    for (name, params, flag) in [
        (
            "full",
            PolicyParams {
                budget: Some(100),
                ..p
            },
            "--budget",
        ),
        (
            "int8",
            PolicyParams {
                group: Some(16),
                ..p
            },
            "--group",
        ),
        (
            "window",
            PolicyParams {
                window: Some(64),
                recent: Some(8),
                ..p
            },
            "--recent",
        ),
        (
            "h2o",
            PolicyParams {
                budget: Some(64),
                sinks: Some(4),
                ..p
            },
            "--sinks",
        ),
    ] {
        let err = KvPolicy::parse(name, params).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{flag} does nothing with --kv {name}")),
            "{err}"
        );
    }
    let err = KvPolicy::parse("int3", p).unwrap_err().to_string();
    assert!(
        err.contains("unknown KV policy `int3`") && err.contains("int4-per-token"),
        "{err}"
    );
    let config = Config::smollm2_135m();
    let err = new_policy_store(&config, KvPolicy::Int4Kivi { group: 48 }, 8)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("--group 48 does not divide head_dim 64"),
        "{err}"
    );
    assert!(!err.contains('\n'));
}
