//! The roofline's two roofs and where each measurement sits under them (book: roofline.md,
//! prefill-decode.md; Williams, Waterman & Patterson 2009).
//!
//! A kernel that does `F` FLOPs while moving `B` bytes from memory has an *arithmetic
//! intensity* `I = F / B` (FLOP/byte). It cannot run faster than either roof:
//! `attainable = min(peak FLOP/s, I x bandwidth)`. Prefill of `n` tokens reads every
//! weight once and uses it `n` times (`I ≈ n / 2` for f32): it climbs towards the compute
//! roof. A cached decode step uses every weight once (`I ≈ 0.5`): it sits under the
//! bandwidth roof, whatever the context.
//!
//! The compute roof is measured in [`super::peak`]: every thread runs independent chains of
//! fused multiply-adds on registers, as wide as the CPU allows (AVX-512 or AVX2, detected
//! at run time), with no memory traffic at all. The bandwidth roof is
//! [`super::bench::memory_bandwidth`].

use crate::model::Model;
use crate::simd::WeightElem;

pub use super::peak::{fma_peak, fma_peak_with, FmaPeak};

// ANCHOR: roofline
/// FLOPs of a prefill of `n` tokens: 2 per weight per token in the layers
/// (multiply + add), the LM head for the last token only, and attention's
/// `q·k` and `p·v` (2 x 2 x head_dim per query head per (query, key) pair, causal).
pub fn prefill_flops<E: WeightElem>(model: &Model<E>, n: usize) -> f64 {
    let c = &model.config;
    let lm_head = E::weights(&model.lm_head);
    let untied_head = if model.tied_embeddings { 0 } else { lm_head };
    let layer_weights =
        (model.n_params() - model.embed.len() - model.final_norm.len() - untied_head) as f64;
    let pairs = (n * (n + 1) / 2) as f64;
    let attention =
        4.0 * (c.num_attention_heads * c.head_dim()) as f64 * pairs * c.num_hidden_layers as f64;
    2.0 * layer_weights * n as f64 + 2.0 * lm_head as f64 + attention
}

/// Bytes a cached decode step must read from memory: every weight once, in the
/// format it is stored in ([`streamed_weight_bytes`]: 4 bytes a matrix weight in
/// f32, 2 in bf16, 1.125 in int8; the LM head whole), one f32 embedding row, and the f32 K and V of
/// every cached position in every layer.
pub fn decode_bytes<E: WeightElem>(model: &Model<E>, context: usize) -> f64 {
    let c = &model.config;
    let f32_bytes = 4.0;
    let embed_row = c.hidden_size as f64;
    let kv = 2.0 * (c.num_hidden_layers * c.n_kv_heads() * c.head_dim() * context) as f64;
    streamed_weight_bytes(model) + (embed_row + kv) * f32_bytes
}
// ANCHOR_END: roofline

// ANCHOR: intensity
/// Bytes of the weights every forward pass reads once, whatever its token count: the
/// weight matrices (every layer's and the LM head) in their format — 4 bytes a weight in
/// f32, 2 in bf16, 576 per int8 block of 512 (1.125) — and the norms and biases, which
/// stay f32. The embedding is not here: a pass reads only its tokens' rows of it.
pub fn streamed_weight_bytes<E: WeightElem>(model: &Model<E>) -> f64 {
    let f32_len = |v: &ndarray::Array1<f32>| v.len();
    let bias_len = |b: &Option<ndarray::Array1<f32>>| b.as_ref().map_or(0, f32_len);
    // Elements, not weights: `size_of::<E>()` is an element's bytes (an int8 block's 576).
    let (mut matrices, mut vectors) = (model.lm_head.len(), model.final_norm.len());
    for l in &model.layers {
        matrices += [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]
            .iter()
            .map(|w| w.len())
            .sum::<usize>();
        vectors += f32_len(&l.attn_norm)
            + f32_len(&l.mlp_norm)
            + bias_len(&l.bq)
            + bias_len(&l.bk)
            + bias_len(&l.bv)
            + bias_len(&l.q_norm)
            + bias_len(&l.k_norm)
            + bias_len(&l.post_attn_norm)
            + bias_len(&l.post_mlp_norm);
    }
    (matrices * std::mem::size_of::<E>() + vectors * 4) as f64
}

/// Bytes a prefill of `n` tokens must move at the least: every layer weight and the LM
/// head read once (however many tokens use them), `n` embedding rows read, and the K
/// and V of `n` positions written. Real kernels move more (tiles of the weights are
/// read again for each block of tokens): the intensity from this count is an upper bound.
pub fn prefill_bytes<E: WeightElem>(model: &Model<E>, n: usize) -> f64 {
    let c = &model.config;
    let embed_rows = n * c.hidden_size;
    let kv_written = 2 * c.num_hidden_layers * c.n_kv_heads() * c.head_dim() * n;
    streamed_weight_bytes(model) + 4.0 * (embed_rows + kv_written) as f64
}

/// FLOPs of one cached decode step at `context` cached positions: 2 per weight (the
/// layers and the LM head), and attention's `q·k` and `p·v` over `context + 1` positions.
pub fn decode_flops<E: WeightElem>(model: &Model<E>, context: usize) -> f64 {
    // A prefill of one token is a decode step at context 0; each cached position adds
    // the attention of one (query, key) pair: 4 x head_dim per query head per layer.
    let c = &model.config;
    let per_position = 4.0 * (c.num_attention_heads * c.head_dim() * c.num_hidden_layers) as f64;
    prefill_flops(model, 1) + per_position * context as f64
}

/// Arithmetic intensity (FLOP/byte) of a prefill of `n` tokens.
pub fn prefill_intensity<E: WeightElem>(model: &Model<E>, n: usize) -> f64 {
    prefill_flops(model, n) / prefill_bytes(model, n)
}

/// Arithmetic intensity (FLOP/byte) of one cached decode step at `context`.
pub fn decode_intensity<E: WeightElem>(model: &Model<E>, context: usize) -> f64 {
    decode_flops(model, context) / decode_bytes(model, context)
}
// ANCHOR_END: intensity

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn prefill_climbs_and_decode_stays_low() {
        let model = Model::random(Config::smollm2_135m(), 0).unwrap();
        // f32 weights used by one token: 2 FLOPs per 4 bytes (the embedding row, the KV
        // writes and attention's few FLOPs move it a hair).
        let one = prefill_intensity(&model, 1);
        assert!((one - 0.5).abs() < 0.01, "{one}");
        // Each doubling of the prompt nearly doubles the intensity while the weights dominate.
        let (i64, i128) = (
            prefill_intensity(&model, 64),
            prefill_intensity(&model, 128),
        );
        assert!(i128 > 1.8 * i64 && i64 > 25.0, "{i64} {i128}");
        // Decode: one token per weight read. Each cached position adds 1.5 FLOP per KV
        // byte (GQA: 3 query heads share each K and V), so the intensity creeps up with
        // the context, but at contexts the weights dominate it stays near 0.5.
        for t in [0, 512] {
            let i = decode_intensity(&model, t);
            assert!(i > 0.4 && i < 0.6, "context {t}: {i}");
        }
    }

    #[test]
    fn bf16_weights_halve_the_weight_bytes() {
        let model = Model::random(Config::smollm2_135m(), 0).unwrap();
        let half = model.to_bf16();
        let (full_w, half_w) = (streamed_weight_bytes(&model), streamed_weight_bytes(&half));
        // Every matrix at 2 bytes instead of 4; the f32 norms (35,136 numbers next to
        // 134 M matrix weights) keep the ratio a hair above one half: 0.5 + 0.5 x 35,136 / 134.5 M.
        let ratio = half_w / full_w;
        assert!(ratio > 0.5 && ratio < 0.5002, "{ratio}");
        // The f32 parts are the same in both: the difference is exactly 2 bytes a matrix weight.
        let matrix_weights = (model.n_params() - model.embed.len() + model.lm_head.len()
            - (model.layers.len() * 2 + 1) * model.config.hidden_size)
            as f64;
        assert_eq!(full_w - half_w, 2.0 * matrix_weights);
        // Decode reads the embedding row and the KV cache in f32 in both formats.
        for t in [0, 512] {
            assert_eq!(
                decode_bytes(&model, t) - decode_bytes(&half, t),
                full_w - half_w
            );
        }
        // One token per weight read: 2 FLOPs per 2 bytes in bf16, intensity near 1.
        let i = decode_intensity(&half, 0);
        assert!(i > 0.95 && i < 1.0, "{i}");
    }

    #[test]
    fn int8_weights_take_1_125_bytes_each() {
        let model = Model::random(Config::smollm2_135m(), 0).unwrap();
        let int8 = model.to_int8().unwrap();
        let (full_w, int8_w) = (streamed_weight_bytes(&model), streamed_weight_bytes(&int8));
        // Every matrix at 576 bytes per block of 512 weights instead of 4 bytes a weight;
        // the f32 norms the same in both.
        let matrix_weights = (model.n_params() - model.embed.len() + model.lm_head.len()
            - (model.layers.len() * 2 + 1) * model.config.hidden_size)
            as f64;
        assert_eq!(model.n_params(), int8.n_params());
        assert_eq!(full_w - int8_w, (4.0 - 1.125) * matrix_weights);
        for t in [0, 512] {
            assert_eq!(
                decode_bytes(&model, t) - decode_bytes(&int8, t),
                full_w - int8_w
            );
        }
        // 2 FLOPs per 1.125 bytes: the intensity near 1.78, still far left of any ridge.
        let i = decode_intensity(&int8, 0);
        assert!(i > 1.7 && i < 1.78, "{i}");
    }
}
