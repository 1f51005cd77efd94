//! The reference core (`src/textbook.rs`: single-threaded, nothing optimised) and the
//! fast engine (`src/model.rs`: threads, SIMD, the preallocated cache) give bitwise-equal
//! logits on both paths, on random models of every attention shape and on SmolLM2, and
//! the textbook's greedy tokens are the transformers reference's.

mod common;

use common::{bits, cached_step_logits, ids, naive_step_logits, tiny_config, MODEL_DIR};
use kvlab::ops::argmax;
use kvlab::textbook::{self, TextbookCache};
use kvlab::{loader, Error, Model};
use proptest::prelude::*;
use std::path::Path;

/// Logits after each prefix `prompt + continuation[..i]`, on the textbook's cached path.
fn textbook_cached(model: &Model, prompt: &[u32], continuation: &[u32]) -> Vec<Vec<f32>> {
    let mut cache = TextbookCache::default();
    let mut all = vec![cache.logits(model, prompt).unwrap()];
    for &t in continuation {
        all.push(cache.logits(model, &[t]).unwrap());
    }
    all
}

/// The same on the textbook's naive path.
fn textbook_naive(model: &Model, prompt: &[u32], continuation: &[u32]) -> Vec<Vec<f32>> {
    let seq: Vec<u32> = prompt.iter().chain(continuation).copied().collect();
    (prompt.len()..=seq.len())
        .map(|end| textbook::naive_logits(model, &seq[..end]).unwrap())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// MHA, GQA and MQA; head_dim 4-16 (so the 16-lane score runs its tail too); with and
    /// without biases and tied embeddings; any tokens.
    #[test]
    fn textbook_equals_the_engine_bit_for_bit(
        (layers, n_kv_heads, group, half_head, vocab, bias) in
            (1usize..=2, 1usize..=3, 1usize..=3, 1usize..=4, 32usize..=300, any::<bool>()),
        seed in any::<u64>(),
        lens in (1usize..20, 0usize..8),
    ) {
        let mut config = tiny_config(layers, n_kv_heads * group, n_kv_heads, 4 * half_head, vocab);
        config.attention_bias = bias;
        config.tie_word_embeddings = seed % 2 == 0;
        let model = Model::random(config, seed).unwrap();
        let tokens: Vec<u32> = (0..lens.0 + lens.1).map(|i| ((seed as usize / 7 + i * 31) % vocab) as u32).collect();
        let (prompt, continuation) = tokens.split_at(lens.0);
        let engine = bits(&cached_step_logits(&model, prompt, continuation));
        prop_assert_eq!(&bits(&textbook_cached(&model, prompt, continuation)), &engine);
        prop_assert_eq!(&bits(&textbook_naive(&model, prompt, continuation)), &engine);
        prop_assert_eq!(&bits(&naive_step_logits(&model, prompt, continuation)), &engine);
    }
}

#[test]
fn textbook_on_smollm2_gives_the_engines_bits_and_the_reference_tokens() {
    if !common::real_model_present() {
        return;
    }
    let model = loader::load_model(Path::new(MODEL_DIR)).unwrap();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/smollm2-135m-instruct.json"
    );
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let case = &fixture["cases"][0];
    let prompt = ids(&case["prompt_ids"]);
    let expected = ids(&case["greedy_ids"]);
    // Six greedy steps on the textbook's cached path, each one's logits against the engine.
    let steps = 6.min(expected.len());
    let mut cache = TextbookCache::default();
    let mut logits = cache.logits(&model, &prompt).unwrap();
    let mut tokens = Vec::new();
    for _ in 0..steps {
        let token = argmax(&logits) as u32;
        tokens.push(token);
        logits = cache.logits(&model, &[token]).unwrap();
    }
    assert_eq!(
        tokens,
        expected[..steps],
        "the textbook's greedy tokens are not transformers'"
    );
    let engine = cached_step_logits(&model, &prompt, &tokens);
    let textbook = textbook_cached(&model, &prompt, &tokens);
    assert_eq!(
        bits(&textbook),
        bits(&engine),
        "textbook and engine logits differ on SmolLM2"
    );
    // The naive path, once, at the longest sequence.
    let seq: Vec<u32> = prompt.iter().chain(&tokens).copied().collect();
    let naive = textbook::naive_logits(&model, &seq).unwrap();
    assert_eq!(
        bits(&[naive]),
        bits(&engine[steps..]),
        "textbook naive differs from the engine"
    );
}

#[test]
fn textbook_refuses_bad_input_like_the_engine() {
    let model = Model::random(tiny_config(1, 2, 1, 8, 40), 1).unwrap();
    assert!(matches!(
        textbook::naive_logits(&model, &[]),
        Err(Error::EmptyPrompt)
    ));
    assert!(matches!(
        textbook::naive_logits(&model, &[3, 40]),
        Err(Error::TokenOutOfRange {
            id: 40,
            vocab_size: 40
        })
    ));
    let too_long = vec![1u32; model.config.max_position_embeddings + 1];
    assert!(matches!(
        textbook::naive_logits(&model, &too_long),
        Err(Error::PromptTooLong { .. })
    ));
    // A cache that is full refuses one more token instead of growing past the context.
    let mut cache = TextbookCache::default();
    cache.logits(&model, &too_long[1..]).unwrap();
    assert!(matches!(
        cache.logits(&model, &[1]),
        Err(Error::PromptTooLong { .. })
    ));
}
