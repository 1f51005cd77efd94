//! `kvlab attention-map`: the attention probabilities of a real model, made visible
//! (book: attention.md).
//!
//! Row `i` of a head's map is `softmax(q_i · Kᵀ / sqrt(head_dim))` over positions
//! `0..=i`: the causal mask shows as an upper triangle of exact zeros, because those
//! scores are never computed. The same run also measures, per layer, how much of each
//! query's attention lands on the very first token: the "attention sink" (Xiao et al.
//! 2023, StreamingLLM), a token that many heads use as a place to put attention they
//! do not need elsewhere.
//!
//! The engine's attention ([`causal_attention`]) returns only `softmax(...) · V`, never
//! the probabilities. Rather than add a hook to the engine, this file runs the naive
//! forward pass layer by layer with the same `ops` calls as `Model::forward_hidden`, and
//! recomputes each head's probabilities with the same arithmetic as `attention_over`
//! (the same chain of `mul_add` per score, the same scale, the same `softmax`). The
//! tests check both claims bitwise: the final hidden states equal `forward_hidden`'s,
//! and `Σ_j p_ij · v_j` (in order of `j`) equals the engine's attention output.

use crate::attention::{self, causal_attention, Heads};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::ops;
use serde::Serialize;

/// One head's probabilities, and the attention sink of every layer.
#[derive(Debug, Clone, Serialize)]
pub struct AttentionMap {
    pub layer: usize,
    pub head: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    /// `[t][t]`: row `i` is query position `i`, column `j` key position `j`;
    /// `probs[i][j] == 0.0` exactly for `j > i`.
    pub probs: Vec<Vec<f32>>,
    /// Per layer: the mean over heads and over query positions `1..t` of the
    /// probability on position 0 (position 0 itself is left out: it can only
    /// attend to itself).
    pub first_token_mass: Vec<f64>,
}

// ANCHOR: probabilities
/// The attention probabilities of every head, `[n_heads][t][t]`, for queries `q`
/// `[t, n_heads * head_dim]` and keys `[t, n_kv_heads * head_dim]` of one layer
/// (the naive path: queries at positions `0..t`, already rotated).
pub fn attention_probs(q: &[f32], keys: &[f32], heads: Heads) -> Vec<Vec<Vec<f32>>> {
    let Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    } = heads;
    let (q_dim, kv_dim) = (n_heads * head_dim, n_kv_heads * head_dim);
    let t = q.len() / q_dim;
    let kv_mul = n_heads / n_kv_heads;
    let scale = 1.0 / (head_dim as f32).sqrt();
    (0..n_heads)
        .map(|h| {
            let kv_head = h / kv_mul;
            (0..t)
                .map(|i| {
                    let q_head = &q[i * q_dim + h * head_dim..][..head_dim];
                    let mut row = vec![0.0f32; t]; // j > i stays exactly 0: the causal mask
                    for (j, score) in row.iter_mut().enumerate().take(i + 1) {
                        let k_head = &keys[j * kv_dim + kv_head * head_dim..][..head_dim];
                        // The engine's own q·k (a fixed-order dot, src/attention.rs).
                        *score = attention::score(q_head, k_head) * scale;
                    }
                    ops::softmax(&mut row[..=i]);
                    row
                })
                .collect()
        })
        .collect()
}
// ANCHOR_END: probabilities

/// Runs `tokens` through every layer (the naive path) and hands each layer's
/// probabilities `[n_heads][t][t]` to `on_layer`. Returns the final hidden states
/// `[t * dim]`, before the final norm: what `Model::forward_hidden` returns.
pub fn forward_with_probs(
    model: &Model,
    tokens: &[u32],
    mut on_layer: impl FnMut(usize, Vec<Vec<Vec<f32>>>),
) -> Result<Vec<f32>> {
    let c = &model.config;
    let (dim, n) = (c.hidden_size, tokens.len());
    let heads = Heads::of(c);
    let (q_dim, kv_dim) = (
        heads.n_heads * heads.head_dim,
        heads.n_kv_heads * heads.head_dim,
    );
    if n == 0 {
        return Err(Error::EmptyPrompt);
    }
    if n > c.max_position_embeddings {
        return Err(Error::PromptTooLong {
            prompt_len: n,
            max_seq_len: c.max_position_embeddings,
        });
    }
    if let Some(&id) = tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
        return Err(Error::TokenOutOfRange {
            id,
            vocab_size: c.vocab_size,
        });
    }
    let slice = |a: &ndarray::Array1<f32>| a.as_slice().expect("contiguous").to_vec();
    let linear = |input: &[f32], w: &ndarray::Array2<f32>| {
        let (d_in, d_out) = w.dim();
        let mut out = vec![0.0f32; input.len() / d_in * d_out];
        ops::matmul(
            input,
            w.as_slice().expect("contiguous"),
            &mut out,
            d_in,
            d_out,
        );
        out
    };
    let mut x = vec![0.0f32; n * dim]; // [n, dim]
    for (i, &token) in tokens.iter().enumerate() {
        for (x_d, &e) in x[i * dim..(i + 1) * dim]
            .iter_mut()
            .zip(model.embed.row(token as usize))
        {
            *x_d = e;
        }
    }
    let rope: Vec<(Vec<f32>, Vec<f32>)> = (0..n)
        .map(|pos| ops::rope_cos_sin(pos, heads.head_dim, c.rope_theta))
        .collect();
    let eps = c.rms_norm_eps as f32;
    let mut xb = vec![0.0f32; n * dim];
    for (l, layer) in model.layers.iter().enumerate() {
        ops::rmsnorm(&x, &slice(&layer.attn_norm), eps, &mut xb);
        let mut q = linear(&xb, &layer.wq); // [n, n_heads * head_dim]
        let mut k = linear(&xb, &layer.wk); // [n, n_kv_heads * head_dim]
        let mut v = linear(&xb, &layer.wv); // [n, n_kv_heads * head_dim]
        for (bias, t) in [
            (&layer.bq, &mut q),
            (&layer.bk, &mut k),
            (&layer.bv, &mut v),
        ] {
            if let Some(b) = bias {
                ops::add_bias(t, &slice(b));
            }
        }
        for (i, (cos, sin)) in rope.iter().enumerate() {
            ops::apply_rope(&mut q[i * q_dim..(i + 1) * q_dim], heads.head_dim, cos, sin);
            ops::apply_rope(
                &mut k[i * kv_dim..(i + 1) * kv_dim],
                heads.head_dim,
                cos,
                sin,
            );
        }
        on_layer(l, attention_probs(&q, &k, heads));
        let attn = causal_attention(&q, &k, &v, 0, heads);
        ops::add_inplace(&mut x, &linear(&attn, &layer.wo));
        ops::rmsnorm(&x, &slice(&layer.mlp_norm), eps, &mut xb);
        let mut gate = linear(&xb, &layer.w_gate); // [n, hidden]
        let up = linear(&xb, &layer.w_up); // [n, hidden]
        ops::swiglu(&mut gate, &up);
        ops::add_inplace(&mut x, &linear(&gate, &layer.w_down));
    }
    Ok(x)
}

/// Head `head` of layer `layer` on `tokens`, and every layer's first-token mass.
pub fn attention_map(
    model: &Model,
    tokens: &[u32],
    layer: usize,
    head: usize,
) -> Result<AttentionMap> {
    let (n_layers, n_heads) = (
        model.config.num_hidden_layers,
        model.config.num_attention_heads,
    );
    if layer >= n_layers || head >= n_heads {
        return Err(Error::InvalidArgument(format!(
            "--layer {layer} --head {head}: this model has layers 0..{n_layers} and heads 0..{n_heads}"
        )));
    }
    let mut probs = Vec::new();
    let mut first_token_mass = Vec::with_capacity(n_layers);
    forward_with_probs(model, tokens, |l, layer_probs| {
        let rows = (tokens.len() - 1).max(1) * n_heads;
        let mass: f64 = layer_probs
            .iter()
            .flat_map(|head| head.iter().skip(1).map(|row| row[0] as f64))
            .sum();
        first_token_mass.push(mass / rows as f64);
        if l == layer {
            probs = layer_probs.into_iter().nth(head).unwrap_or_default();
        }
    })?;
    Ok(AttentionMap {
        layer,
        head,
        n_layers,
        n_heads,
        probs,
        first_token_mass,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::model::KvSource;

    fn tiny_model() -> Model {
        let config = Config {
            hidden_size: 64,
            intermediate_size: 96,
            num_hidden_layers: 3,
            num_attention_heads: 4,
            num_key_value_heads: Some(2),
            vocab_size: 97,
            max_position_embeddings: 64,
            ..Config::smollm2_135m()
        };
        Model::random(config, 7).unwrap()
    }

    #[test]
    fn the_twin_forward_pass_matches_the_engine_bitwise() {
        let model = tiny_model();
        let tokens: Vec<u32> = (0..13).map(|i| (i * 31 + 5) % 97).collect();
        let twin = forward_with_probs(&model, &tokens, |_, _| {}).unwrap();
        let engine = model
            .forward_hidden(&tokens, &mut KvSource::ThisPass)
            .unwrap();
        assert_eq!(twin, engine.as_slice().unwrap());
    }

    #[test]
    fn probabilities_are_the_ones_the_engine_uses() {
        let model = tiny_model();
        let heads = Heads::of(&model.config);
        let (t, head_dim) = (11, heads.head_dim);
        let (q_dim, kv_dim) = (heads.n_heads * head_dim, heads.n_kv_heads * head_dim);
        let values = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (((i * 7 + seed) % 23) as f32 - 11.0) / 7.0)
                .collect()
        };
        let (q, k, v) = (
            values(t * q_dim, 1),
            values(t * kv_dim, 2),
            values(t * kv_dim, 3),
        );
        let probs = attention_probs(&q, &k, heads);
        let out = causal_attention(&q, &k, &v, 0, heads);
        for (h, head) in probs.iter().enumerate() {
            let kv_head = h / (heads.n_heads / heads.n_kv_heads);
            for (i, row) in head.iter().enumerate() {
                assert!(row[i + 1..].iter().all(|&p| p == 0.0), "causal mask");
                let sum: f32 = row.iter().sum();
                assert!((sum - 1.0).abs() < 1e-5, "row {i} sums to {sum}");
                // Σ_j p_ij v_j in order of j, as attention_over sums it.
                let mut o = vec![0.0f32; head_dim];
                for (j, &p) in row[..=i].iter().enumerate() {
                    let v_j = &v[j * kv_dim + kv_head * head_dim..][..head_dim];
                    for (o, &v) in o.iter_mut().zip(v_j) {
                        *o = p.mul_add(v, *o);
                    }
                }
                assert_eq!(o, &out[i * q_dim + h * head_dim..][..head_dim]);
            }
        }
    }

    #[test]
    fn the_map_checks_its_layer_and_head() {
        let model = tiny_model();
        let map = attention_map(&model, &[1, 2, 3, 4], 2, 3).unwrap();
        assert_eq!((map.probs.len(), map.first_token_mass.len()), (4, 3));
        assert_eq!(map.probs[0], vec![1.0, 0.0, 0.0, 0.0]);
        assert!(attention_map(&model, &[1, 2], 3, 0).is_err());
        assert!(attention_map(&model, &[1, 2], 0, 4).is_err());
        assert!(attention_map(&model, &[], 0, 0).is_err());
    }
}
