//! Weight storage in bf16: half the bytes of f32 for every matrix, so that
//! memory-bound decode streams half as much (chapter "Performance to the roof").
//!
//! Rounding f32 → bf16 keeps the sign and the 8-bit exponent and rounds the
//! mantissa from 23 bits to 7, to nearest, ties to even (what PyTorch's
//! `.to(torch.bfloat16)` does): a relative error of at most 2⁻⁸ ≈ 0.4 % per weight.
//! The kernels widen each weight back to f32 exactly (`bits << 16`, see
//! `simd::WeightElem`) and run the same f32 fused-multiply-add chains as the f32
//! model, so within a bf16 model the naive and cached paths still agree bit for
//! bit; against the f32 model the logits move by the rounding of the weights.

use crate::model::{Layer, Model};
use half::bf16;
use ndarray::{Array1, Array2};

/// `w` rounded to bf16, element by element (round to nearest, ties to even).
pub fn round_to_bf16(w: &Array2<f32>) -> Array2<bf16> {
    w.mapv(bf16::from_f32)
}

impl Model {
    /// The same model with every weight matrix stored in bf16. The embedding
    /// table stays an f32 array (decode reads one row of it per token) but holds
    /// the bf16-rounded values, so a tied LM head and its embedding still agree;
    /// norms and biases stay f32 (a few thousand numbers, no bandwidth to save).
    pub fn to_bf16(&self) -> Model<bf16> {
        let bias = |b: &Option<Array1<f32>>| b.clone();
        Model {
            config: self.config.clone(),
            embed: self.embed.mapv(|v| bf16::from_f32(v).to_f32()),
            layers: self
                .layers
                .iter()
                .map(|l| Layer {
                    attn_norm: l.attn_norm.clone(),
                    wq: round_to_bf16(&l.wq),
                    wk: round_to_bf16(&l.wk),
                    wv: round_to_bf16(&l.wv),
                    wo: round_to_bf16(&l.wo),
                    bq: bias(&l.bq),
                    bk: bias(&l.bk),
                    bv: bias(&l.bv),
                    mlp_norm: l.mlp_norm.clone(),
                    w_gate: round_to_bf16(&l.w_gate),
                    w_up: round_to_bf16(&l.w_up),
                    w_down: round_to_bf16(&l.w_down),
                })
                .collect(),
            final_norm: self.final_norm.clone(),
            lm_head: round_to_bf16(&self.lm_head),
            tied_embeddings: self.tied_embeddings,
        }
    }
}
