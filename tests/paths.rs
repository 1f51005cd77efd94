//! The central claim: the naive path (recompute everything) and the cached path
//! (KV cache) produce bitwise-identical logits and identical tokens, for any
//! Llama shape — MHA, GQA or MQA — and any prompt.

mod common;

use common::{bits, cached_step_logits, naive_step_logits, tiny_config};
use kvlab::backend::generate;
use kvlab::cache::PreallocatedCache;
use kvlab::generate::{GenerateOptions, PathKind};
use kvlab::model::KvSource;
use kvlab::sampler::SamplerConfig;
use kvlab::{Config, Model};
use proptest::prelude::*;

/// Random small shapes: 1-3 layers, n_kv_heads dividing n_heads (MHA, GQA, MQA), even head_dim.
fn config_strategy() -> impl Strategy<Value = Config> {
    (
        1usize..=3,
        1usize..=4,
        1usize..=4,
        1usize..=4,
        32usize..=512,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(layers, n_kv_heads, group, half_head, vocab, tied, bias)| {
                let mut c = tiny_config(
                    layers,
                    n_kv_heads * group,
                    n_kv_heads,
                    2 * half_head * 2,
                    vocab,
                );
                c.tie_word_embeddings = tied;
                c.attention_bias = bias;
                c
            },
        )
}

fn tokens(vocab: usize, len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(0..vocab as u32, len)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Logits at every step are bitwise equal, for any continuation (not only the greedy one).
    #[test]
    fn naive_and_cached_logits_are_bitwise_equal(
        (config, prompt, continuation) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size;
            (Just(c), tokens(v, 1..24), tokens(v, 0..12))
        }),
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap();
        let cached = cached_step_logits(&model, &prompt, &continuation);
        let naive = naive_step_logits(&model, &prompt, &continuation);
        prop_assert_eq!(bits(&cached), bits(&naive));
    }

    /// Through the generation loop: same tokens, greedy and seeded sampling.
    #[test]
    fn naive_and_cached_generate_the_same_tokens(
        (config, prompt) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size;
            (Just(c), tokens(v, 1..20))
        }),
        seed in any::<u64>(),
        max_new_tokens in 1usize..12,
        temperature in prop_oneof![Just(0.0f32), 0.5f32..1.5],
        top_k in prop_oneof![Just(0usize), 1usize..40],
        top_p in prop_oneof![Just(1.0f32), 0.5f32..1.0],
    ) {
        let model = Model::random(config, seed).unwrap();
        let opts = |path| GenerateOptions {
            max_new_tokens,
            path,
            sampler: SamplerConfig { temperature, top_k, top_p, seed },
            eos_ids: vec![],
        };
        let cached = generate(&model, &prompt, &opts(PathKind::Cached), |_| {}).unwrap();
        let naive = generate(&model, &prompt, &opts(PathKind::Naive), |_| {}).unwrap();
        prop_assert_eq!(cached.generated_ids.len(), max_new_tokens);
        prop_assert_eq!(cached.generated_ids, naive.generated_ids);
    }

    /// Several new tokens meeting a warm cache (chunked prefill, a second chat turn)
    /// use a rectangular causal mask. Prefilling in random chunks must give the same
    /// logits, bit for bit, as prefilling in one go.
    #[test]
    fn chunked_prefill_equals_one_shot_prefill(
        (config, prompt, cuts) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size;
            (Just(c), tokens(v, 2..40), prop::collection::vec(1usize..8, 1..10))
        }),
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap();
        let mut one_shot_cache = PreallocatedCache::new(&model.config, prompt.len()).unwrap();
        let hidden_one_shot = model.forward_hidden(&prompt, &mut KvSource::Cache(&mut one_shot_cache)).unwrap();

        let mut cache = PreallocatedCache::new(&model.config, prompt.len()).unwrap();
        let mut rows = Vec::new();
        let mut start = 0;
        let mut cuts = cuts.into_iter().cycle();
        while start < prompt.len() {
            let end = (start + cuts.next().unwrap()).min(prompt.len());
            let h = model.forward_hidden(&prompt[start..end], &mut KvSource::Cache(&mut cache)).unwrap();
            rows.extend(h.iter().map(|v| v.to_bits()));
            start = end;
        }
        let one_shot: Vec<u32> = hidden_one_shot.iter().map(|v| v.to_bits()).collect();
        prop_assert_eq!(rows, one_shot);
    }
}

/// The SmolLM2-shaped random model (30 layers, 9 query / 3 KV heads): the full-size check.
#[test]
fn smollm2_shape_naive_equals_cached() {
    let model = Model::random(Config::smollm2_135m(), 7).unwrap();
    let prompt: Vec<u32> = (0..40).map(|i| (i * 977 % 49152) as u32).collect();
    let opts = |path| GenerateOptions {
        max_new_tokens: 6,
        path,
        sampler: SamplerConfig::default(),
        eos_ids: vec![],
    };
    let cached = generate(&model, &prompt, &opts(PathKind::Cached), |_| {}).unwrap();
    let naive = generate(&model, &prompt, &opts(PathKind::Naive), |_| {}).unwrap();
    assert_eq!(cached.generated_ids, naive.generated_ids);
    let continuation = &cached.generated_ids[..5];
    assert_eq!(
        bits(&cached_step_logits(&model, &prompt, continuation)),
        bits(&naive_step_logits(&model, &prompt, continuation))
    );
}
