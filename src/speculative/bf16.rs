//! A lower-precision copy of the target as the drafter: every weight rounded to bf16
//! (8 bits of mantissa) and back to f32. Chapter "Speculative decoding", section
//! "Drafters".
//!
//! On a GPU a bf16 model streams half the bytes per decode step, so it is a cheaper
//! draft that agrees with the target almost always. kvlab's CPU kernels compute in f32
//! whatever the weights held, so here the copy costs exactly as much as the target
//! (`c ≈ 1`): it shows the acceptance a quantised draft reaches, and, in the measured
//! table, that a draft as slow as the target can only lose time.

use crate::model::{Layer, Model};
use ndarray::{Array, Dimension};

/// `x` rounded to the nearest bf16 (ties to even) and widened back.
fn round<D: Dimension>(a: &Array<f32, D>) -> Array<f32, D> {
    a.mapv(|x| half::bf16::from_f32(x).to_f32())
}

// ANCHOR: bf16_copy
/// A copy of `model` whose every weight is the nearest bf16 value.
pub fn bf16_copy(model: &Model) -> Model {
    let layers = model
        .layers
        .iter()
        .map(|l| Layer {
            attn_norm: round(&l.attn_norm),
            wq: round(&l.wq),
            wk: round(&l.wk),
            wv: round(&l.wv),
            wo: round(&l.wo),
            bq: l.bq.as_ref().map(round),
            bk: l.bk.as_ref().map(round),
            bv: l.bv.as_ref().map(round),
            mlp_norm: round(&l.mlp_norm),
            w_gate: round(&l.w_gate),
            w_up: round(&l.w_up),
            w_down: round(&l.w_down),
            q_norm: l.q_norm.as_ref().map(round),
            k_norm: l.k_norm.as_ref().map(round),
            post_attn_norm: l.post_attn_norm.as_ref().map(round),
            post_mlp_norm: l.post_mlp_norm.as_ref().map(round),
        })
        .collect();
    Model {
        config: model.config.clone(),
        embed: round(&model.embed),
        layers,
        final_norm: round(&model.final_norm),
        // Rounding commutes with the transpose, so a tied head stays the embedding's copy.
        lm_head: round(&model.lm_head),
        tied_embeddings: model.tied_embeddings,
    }
}
// ANCHOR_END: bf16_copy
