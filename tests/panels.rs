//! Weights in panels (`Model::to_panels`, `--layout panels`) against their plain twin,
//! the row layout: the same chains of fused multiply-adds read from another order in
//! memory, so the logits must be bitwise equal — f32 and bf16, prefill (packed panels,
//! 32+ rows) and decode (strips, 1-31 rows), naive and cached.

mod common;

use common::{bits, cached_step_logits, naive_step_logits, tiny_config};
use kvlab::simd::{Isa, PANEL};
use kvlab::{Config, Model};
use proptest::prelude::*;

/// Llama shapes whose every output dimension is a multiple of 32 (heads of 32, a
/// vocabulary of 32·v), so every matrix has a panel form.
fn panel_config() -> impl Strategy<Value = Config> {
    (
        1usize..=2,
        1usize..=2,
        1usize..=3,
        1usize..=6,
        any::<bool>(),
    )
        .prop_map(|(layers, n_kv_heads, group, vocab_panels, tied)| {
            let mut c = tiny_config(
                layers,
                n_kv_heads * group,
                n_kv_heads,
                32,
                32 * vocab_panels,
            );
            c.tie_word_embeddings = tied;
            c
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn panels_give_the_bits_of_rows(
        (config, prompt, continuation) in panel_config().prop_flat_map(|c| {
            let v = c.vocab_size as u32;
            (
                Just(c),
                // Up to 40 prompt rows: both sides of the strips/panels switch (32 rows).
                prop::collection::vec(0..v, 1..40),
                prop::collection::vec(0..v, 0..6),
            )
        }),
        seed in any::<u64>(),
    ) {
        let rows = Model::random(config, seed).unwrap();
        let panels = rows.to_panels().unwrap();
        let expected = cached_step_logits(&rows, &prompt, &continuation);
        prop_assert_eq!(bits(&cached_step_logits(&panels, &prompt, &continuation)), bits(&expected));
        prop_assert_eq!(bits(&naive_step_logits(&panels, &prompt, &continuation)), bits(&expected));

        let half = rows.to_bf16();
        let half_panels = half.to_panels().unwrap();
        prop_assert_eq!(
            bits(&cached_step_logits(&half_panels, &prompt, &continuation)),
            bits(&cached_step_logits(&half, &prompt, &continuation))
        );
    }
}

#[test]
fn every_isa_reads_panels_to_the_same_bits() {
    // One [96, 160] matrix, 1..=5 rows of x, every strip of whole panels: each ISA on
    // panels equals the portable kernel on rows.
    let (d_in, d_out) = (96, 160);
    let w = ndarray::Array2::from_shape_fn((d_in, d_out), |(k, j)| {
        ((k * 31 + j * 17) % 23) as f32 * 0.37 - 4.0
    });
    let panels = kvlab::weights::to_panels(&w).unwrap();
    let flat_rows = w.as_slice().unwrap();
    let flat_panels = panels.as_slice().unwrap();
    for n in 1..=5 {
        let x: Vec<f32> = (0..n * d_in)
            .map(|i| (i % 13) as f32 * 0.11 - 0.6)
            .collect();
        for (j0, width) in [(0, 32), (32, 96), (0, d_out), (128, 32)] {
            let mut expected = vec![0.0f32; n * width];
            Isa::Portable.strip(&x, d_in, flat_rows, d_out, j0, &mut expected);
            for isa in Isa::available() {
                let mut got = vec![0.0f32; n * width];
                isa.strip(&x, d_in, flat_panels, d_out, j0, &mut got);
                let b = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    b(&got),
                    b(&expected),
                    "{isa:?}, {n} rows, columns {j0}..{}",
                    j0 + width
                );
            }
        }
    }
}

#[test]
fn a_model_without_a_panel_form_is_refused_by_name() {
    // head_dim 4: q, k and v have 8 or 4 output columns, not a multiple of 32.
    let model = Model::random(tiny_config(1, 2, 1, 4, 64), 1).unwrap();
    let Err(err) = model.to_panels() else {
        panic!("a model with 8-column matrices has no panel form");
    };
    let err = err.to_string();
    assert!(
        err.contains("layer 0 wq") && err.contains("--layout rows"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
    assert_eq!(PANEL, 32);
}

#[test]
fn the_real_model_decodes_the_same_tokens_and_logits_in_panels() {
    if !common::real_model_present() {
        return;
    }
    let model = kvlab::loader::load_model(std::path::Path::new(common::MODEL_DIR)).unwrap();
    let panels = model.to_panels().unwrap();
    let prompt = [1, 504, 3458, 282, 253, 1345, 30];
    let rows = cached_step_logits(&model, &prompt, &[28, 3003, 314]);
    assert_eq!(
        bits(&cached_step_logits(&panels, &prompt, &[28, 3003, 314])),
        bits(&rows)
    );
}

#[test]
fn panels_if_keeps_rows_unless_panels_were_named() {
    use kvlab::device::WeightLayout;
    use kvlab::weights::panels_if;
    let no_form = Model::random(tiny_config(1, 2, 1, 4, 64), 1).unwrap();
    assert!(panels_if(&no_form, WeightLayout::Panels, false)
        .unwrap()
        .is_none());
    let Err(err) = panels_if(&no_form, WeightLayout::Panels, true) else {
        panic!("--layout panels named on a model without a panel form must be refused");
    };
    assert!(err.to_string().contains("--layout rows"), "{err}");
    let with_form = Model::random(tiny_config(1, 2, 1, 32, 64), 1).unwrap();
    assert!(panels_if(&with_form, WeightLayout::Rows, true)
        .unwrap()
        .is_none());
    assert!(panels_if(&with_form, WeightLayout::Panels, true)
        .unwrap()
        .is_some());
}
