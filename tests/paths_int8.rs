//! The central claim again, with int8 weights (`Model::to_int8`, Q8_0 blocks): the naive
//! and cached paths give bitwise-identical logits, for any Llama shape whose matrices
//! split into whole blocks and any prompt; and the int8 model is bit for bit the f32
//! model of its dequantized weights (`Model::dequantize`, its plain twin): each weight
//! `q · scale` is exact in f32, and the kernels run the same chains on it.

mod common;

use common::{bits, block_config_strategy, cached_step_logits, naive_step_logits, tiny_config};
use kvlab::Model;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn naive_and_cached_logits_are_bitwise_equal_in_int8(
        (config, prompt, continuation) in block_config_strategy().prop_flat_map(|c| {
            let v = c.vocab_size as u32;
            (
                Just(c),
                prop::collection::vec(0..v, 1..20),
                prop::collection::vec(0..v, 0..10),
            )
        }),
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap().to_int8().unwrap();
        let cached = cached_step_logits(&model, &prompt, &continuation);
        let naive = naive_step_logits(&model, &prompt, &continuation);
        prop_assert_eq!(bits(&cached), bits(&naive));
    }
}

#[test]
fn int8_model_is_the_f32_model_of_its_dequantized_weights() {
    // Prompts of 5 and 12 tokens: the prefill runs in strips (n < 8) and in packed
    // panels (n >= 8); the steps after it in strips.
    for (prompt, tied) in [(vec![1, 5, 9, 13, 2], true), ((0..12).collect(), false)] {
        let mut config = tiny_config(2, 4, 2, 16, 64);
        config.tie_word_embeddings = tied;
        let int8 = Model::random(config, 7).unwrap().to_int8().unwrap();
        let twin = int8.dequantize();
        let a = cached_step_logits(&int8, &prompt, &[3, 4, 60]);
        let b = cached_step_logits(&twin, &prompt, &[3, 4, 60]);
        assert_eq!(bits(&a), bits(&b), "cached, tied = {tied}");
        let a = naive_step_logits(&int8, &prompt, &[3]);
        let b = naive_step_logits(&twin, &prompt, &[3]);
        assert_eq!(bits(&a), bits(&b), "naive, tied = {tied}");
        // The embedding holds the same Q8_0 values a tied LM head does: row t of the
        // embedding is column t of the head.
        if tied {
            for (t, row) in twin.embed.rows().into_iter().enumerate() {
                let column = twin.lm_head.column(t);
                assert!(row
                    .iter()
                    .zip(column)
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
            }
        }
    }
}

#[test]
fn int8_moves_the_logits_by_little() {
    // Not the twin: the f32 model it was quantized from. Q8_0 moves each weight by at
    // most half a step (1/254 of its block's largest), so the logits move, but not far.
    let f32_model = Model::random(tiny_config(2, 4, 2, 16, 64), 3).unwrap();
    let int8 = f32_model.to_int8().unwrap();
    let a = cached_step_logits(&f32_model, &[1, 2, 3], &[4]);
    let b = cached_step_logits(&int8, &[1, 2, 3], &[4]);
    let diff = a
        .iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    let scale = a.iter().flatten().fold(0.0f32, |m, x| m.max(x.abs()));
    assert!(diff > 0.0 && diff < 0.05 * scale, "{diff} of {scale}");
}

#[test]
fn int8_refuses_a_model_that_does_not_split_into_blocks() {
    // hidden 24: not a whole number of 32-input blocks.
    let model = Model::random(tiny_config(1, 3, 1, 8, 64), 0).unwrap();
    let err = model
        .to_int8()
        .err()
        .expect("24 inputs are not whole blocks")
        .to_string();
    assert!(err.contains("--dtype int8") && err.contains("24"), "{err}");
    assert!(err.contains("use --dtype f32 or bf16"), "{err}");
    // A vocabulary of 40: hidden 32 is fine, but the LM head's 40 columns are not 16s.
    let model = Model::random(tiny_config(1, 2, 1, 16, 40), 0).unwrap();
    let err = model.to_int8().err().expect("40 outputs").to_string();
    assert!(err.contains("LM head") && err.contains("40"), "{err}");
}
