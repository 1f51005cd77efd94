//! The central claim again, with bf16 weights (`Model::to_bf16`): the naive and
//! cached paths give bitwise-identical logits, for any Llama shape and prompt.
//! The kernels widen each bf16 weight exactly to f32 and run the same chains.

mod common;

use common::{bits, cached_step_logits, naive_step_logits, tiny_config};
use kvlab::{Config, Model};
use proptest::prelude::*;

fn config_strategy() -> impl Strategy<Value = Config> {
    (
        1usize..=2,
        1usize..=3,
        1usize..=3,
        1usize..=4,
        32usize..=300,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(layers, n_kv_heads, group, half_head, vocab, tied, bias)| {
                let mut c =
                    tiny_config(layers, n_kv_heads * group, n_kv_heads, 4 * half_head, vocab);
                c.tie_word_embeddings = tied;
                c.attention_bias = bias;
                c
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn naive_and_cached_logits_are_bitwise_equal_in_bf16(
        (config, prompt, continuation) in config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size as u32;
            (
                Just(c),
                prop::collection::vec(0..v, 1..20),
                prop::collection::vec(0..v, 0..10),
            )
        }),
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap().to_bf16();
        let cached = cached_step_logits(&model, &prompt, &continuation);
        let naive = naive_step_logits(&model, &prompt, &continuation);
        prop_assert_eq!(bits(&cached), bits(&naive));
    }
}

#[test]
fn bf16_model_is_the_f32_model_of_its_rounded_weights() {
    // Round the weights to bf16 but keep them in f32 arrays: the same logits, bit
    // for bit — the bf16 model changes the bytes read, not the arithmetic.
    let model = Model::random(tiny_config(2, 4, 2, 8, 64), 7).unwrap();
    let bf16 = model.to_bf16();
    let mut widened = Model::random(tiny_config(2, 4, 2, 8, 64), 7).unwrap();
    let wide = |a: &ndarray::Array2<half::bf16>| a.mapv(|v| v.to_f32());
    widened.embed = bf16.embed.clone();
    widened.lm_head = wide(&bf16.lm_head);
    for (w, b) in widened.layers.iter_mut().zip(&bf16.layers) {
        w.wq = wide(&b.wq);
        w.wk = wide(&b.wk);
        w.wv = wide(&b.wv);
        w.wo = wide(&b.wo);
        w.w_gate = wide(&b.w_gate);
        w.w_up = wide(&b.w_up);
        w.w_down = wide(&b.w_down);
    }
    let prompt = [1, 5, 9, 13, 2];
    let a = cached_step_logits(&bf16, &prompt, &[3, 4]);
    let b = cached_step_logits(&widened, &prompt, &[3, 4]);
    assert_eq!(bits(&a), bits(&b));
}
