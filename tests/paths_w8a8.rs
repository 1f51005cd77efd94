//! The central claim in the two activation modes — W8A8 (`--dtype w8a8`: int8 weights
//! times activations quantized to int8 per row, `src/simd/w8a8.rs`) and bf16a (`--dtype
//! bf16a`: bf16 weights times activations rounded to bf16, `src/simd/bf16a.rs`): the
//! naive and cached paths give bitwise-identical logits, and a sequence batched with
//! others gets the bits it gets alone. Rounding the activations changes the model, not
//! the contract: each row is rounded on its own and every output is one fixed chain.

mod common;

use common::{bits, block_config_strategy, cached_step_logits, naive_step_logits, tiny_config};
use kvlab::simd::WeightElem;
use kvlab::Model;
use proptest::prelude::*;

/// The two twins of one mode, `$convert` making its model from a random f32 one.
macro_rules! activation_mode_twins {
    ($mode:ident, $convert:ident) => {
        mod $mode {
            use super::*;

            proptest! {
                #![proptest_config(ProptestConfig::with_cases(24))]

                #[test]
                fn naive_and_cached_logits_are_bitwise_equal(
                    (config, prompt, continuation) in block_config_strategy().prop_flat_map(|c| {
                        let v = c.vocab_size as u32;
                        (
                            Just(c),
                            prop::collection::vec(0..v, 1..40),
                            prop::collection::vec(0..v, 0..10),
                        )
                    }),
                    seed in any::<u64>(),
                ) {
                    let model = Model::random(config, seed).unwrap().$convert().unwrap();
                    let cached = cached_step_logits(&model, &prompt, &continuation);
                    let naive = naive_step_logits(&model, &prompt, &continuation);
                    prop_assert_eq!(bits(&cached), bits(&naive));
                }

                #[test]
                fn batched_passes_equal_solo_runs(
                    config in block_config_strategy(),
                    seed in any::<u64>(),
                    lens in prop::collection::vec(1usize..40, 1..8),
                    plan_seed in any::<u64>(),
                    block_size in 1usize..20,
                ) {
                    let model = Model::random(config, seed).unwrap().$convert().unwrap();
                    let vocab = model.config.vocab_size as u64;
                    let mut rng = kvlab::rng::Rng::new(plan_seed);
                    let seqs: Vec<Vec<u32>> = lens
                        .iter()
                        .map(|&len| (0..len).map(|_| (rng.next_u64() % vocab) as u32).collect())
                        .collect();
                    common::batched_equals_solo(&model, &seqs, block_size, false, &mut rng)?;
                }
            }
        }
    };
}

activation_mode_twins!(w8a8, to_w8a8);
activation_mode_twins!(bf16a, to_bf16a);

/// Near `a`'s logits but not its bits: `b` rounds what `a` keeps (the activations).
fn near_but_not_equal<A: WeightElem, B: WeightElem>(a: &Model<A>, b: &Model<B>) {
    let a = cached_step_logits(a, &[1, 2, 3, 9, 40], &[4, 7]);
    let b = cached_step_logits(b, &[1, 2, 3, 9, 40], &[4, 7]);
    let diff = a
        .iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    let scale = a.iter().flatten().fold(0.0f32, |m, x| m.max(x.abs()));
    assert!(diff > 0.0 && diff < 0.05 * scale, "{diff} of {scale}");
}

/// Not int8's bits (the activations are rounded too), but near them: the logits move by
/// a few Q8_0 steps of the activations.
#[test]
fn w8a8_moves_the_int8_logits_by_little() {
    let f32_model = Model::random(tiny_config(2, 4, 2, 16, 64), 3).unwrap();
    near_but_not_equal(&f32_model.to_int8().unwrap(), &f32_model.to_w8a8().unwrap());
}

/// Not bf16's bits (the activations are rounded too), but near them.
#[test]
fn bf16a_moves_the_bf16_logits_by_little() {
    let f32_model = Model::random(tiny_config(2, 4, 2, 16, 64), 3).unwrap();
    near_but_not_equal(&f32_model.to_bf16(), &f32_model.to_bf16a().unwrap());
}

/// Both modes refuse a model whose 24 inputs do not split into blocks of 32, naming
/// their own flag.
#[test]
fn both_modes_refuse_a_model_that_does_not_split_into_blocks_naming_their_flag() {
    let model = Model::random(tiny_config(1, 3, 1, 8, 64), 0).unwrap();
    for (err, flag) in [
        (model.to_w8a8().err(), "--dtype w8a8"),
        (model.to_bf16a().err(), "--dtype bf16a"),
    ] {
        let err = err.expect("24 inputs").to_string();
        assert!(err.contains(flag) && err.contains("24"), "{err}");
    }
}
