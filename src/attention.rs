//! Causal self-attention with grouped-query heads (the seed's §2.1).
//!
//! Each query is dotted with every key up to its own position, the scores are
//! softmaxed, and the result weights the values:
//! `out = softmax(q·Kᵀ / sqrt(head_dim)) · V` (Vaswani et al. 2017).
//!
//! One function serves both paths. Given queries for positions
//! `start_pos..start_pos + n` and keys/values for positions `0..start_pos + n`:
//! - the naive path passes the whole sequence (`start_pos = 0`, `n = seq_len`),
//!   with the K and V it has just recomputed for every position;
//! - the cached path passes one new token (`n = 1`) and the K and V read from the cache;
//! - a prefill, or several new tokens meeting a warm cache (chunked prefill, a
//!   second chat turn), is the general case: a *rectangular* causal mask, where
//!   query row `i` sees keys `0..=start_pos + i`.

use crate::ops::{dot, softmax};
use rayon::prelude::*;

/// The sizes attention needs, from the config.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

// ANCHOR: attention
/// `q`: `[n, n_heads * head_dim]`, already rotated, for positions `start_pos..start_pos + n`.
/// `keys`, `values`: `[start_pos + n, n_kv_heads * head_dim]`.
/// Returns `[n, n_heads * head_dim]`.
pub fn causal_attention(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    start_pos: usize,
    heads: Heads,
) -> Vec<f32> {
    let Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    } = heads;
    let kv_dim = n_kv_heads * head_dim;
    // GQA: query heads come in groups of `kv_mul` that share one KV head.
    // MHA is kv_mul = 1, MQA is n_kv_heads = 1. Same code for all three.
    let kv_mul = n_heads / n_kv_heads;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let mut out = vec![0.0f32; q.len()];

    // One task per (query row, head): each writes its own `head_dim` slice of `out`.
    out.par_chunks_mut(head_dim)
        .enumerate()
        .for_each(|(row_head, out_head)| {
            let (i, h) = (row_head / n_heads, row_head % n_heads);
            let pos = start_pos + i;
            let q_head = &q[row_head * head_dim..(row_head + 1) * head_dim];
            let kv_head = h / kv_mul;
            let key = |j: usize| &keys[j * kv_dim + kv_head * head_dim..][..head_dim];
            let value = |j: usize| &values[j * kv_dim + kv_head * head_dim..][..head_dim];

            // The causal mask: position `pos` attends to positions 0..=pos only.
            let mut scores: Vec<f32> = (0..=pos).map(|j| dot(q_head, key(j)) * scale).collect();
            softmax(&mut scores);
            for (j, &p) in scores.iter().enumerate() {
                for (o, &v) in out_head.iter_mut().zip(value(j)) {
                    *o += p * v;
                }
            }
        });
    out
}
// ANCHOR_END: attention
