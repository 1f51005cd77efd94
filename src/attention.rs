//! Causal self-attention with grouped-query heads (book: attention.md, gqa.md).
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
//!
//! Attention only needs to find "the key and value of position `j`" ([`KvRows`]).
//! In a contiguous cache, row `j` sits at `j * kv_dim`; in a paged cache it sits in
//! block `j / block_size` of the sequence's block table (PagedAttention, Kwon et al.
//! 2023). The arithmetic per (query, head) is the same for every layout — the same
//! chains of multiply-adds per score, the same softmax, the same sum in order of `j`
//! — so every layout gives bitwise-identical outputs (chapters "Attention" and
//! "Paged attention").

use crate::config::Config;
use crate::ops::softmax;
use rayon::prelude::*;

/// The sizes attention needs, from the config.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl Heads {
    /// The attention shape `config` describes.
    pub fn of(config: &Config) -> Heads {
        Heads {
            n_heads: config.num_attention_heads,
            n_kv_heads: config.n_kv_heads(),
            head_dim: config.head_dim(),
        }
    }
}

// ANCHOR: attention
/// `q`: `[n, n_heads * head_dim]`, already rotated, for positions `start_pos..start_pos + n`.
/// `keys`, `values`: `[start_pos + n, n_kv_heads * head_dim]`, contiguous.
/// Returns `[n, n_heads * head_dim]`.
pub fn causal_attention(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    start_pos: usize,
    heads: Heads,
) -> Vec<f32> {
    let kv_dim = heads.n_kv_heads * heads.head_dim;
    attention_over(&Contiguous::new(keys, values, kv_dim), q, start_pos, heads)
}

/// The same attention, reading position `j`'s key and value from any layout.
pub fn attention_over<R: KvRows + ?Sized>(
    rows: &R,
    q: &[f32],
    start_pos: usize,
    heads: Heads,
) -> Vec<f32> {
    let Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    } = heads;
    // GQA: query heads come in groups of `kv_mul` that share one KV head.
    // MHA is kv_mul = 1, MQA is n_kv_heads = 1. Same code for all three.
    let kv_mul = n_heads / n_kv_heads;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let end = start_pos + q.len() / (n_heads * head_dim);

    // Every KV head's keys, transposed: `[n_kv_heads, head_dim, end]`. Then the
    // scores of one query, `q · Kᵀ`, are `head_dim` passes of `score[j] += q[d] · kᵀ[d][j]`
    // over contiguous memory: vector instructions across positions `j`, no
    // horizontal sums. Each score is the chain `fma(q[d], k[j][d], ·)` for
    // d = 0, 1, 2... from 0.0, whatever the number of queries or positions.
    let mut keys_t = vec![0.0f32; n_kv_heads * head_dim * end];
    for j in 0..end {
        for (c, &k) in rows.key(j).iter().enumerate() {
            keys_t[c * end + j] = k;
        }
    }
    let mut out = vec![0.0f32; q.len()];

    // One task per (query row, head): each writes its own `head_dim` slice of `out`.
    out.par_chunks_mut(head_dim)
        .enumerate()
        .for_each(|(row_head, out_head)| {
            let (i, h) = (row_head / n_heads, row_head % n_heads);
            let pos = start_pos + i;
            let q_head = &q[row_head * head_dim..(row_head + 1) * head_dim];
            let kv_head = h / kv_mul;
            let k_t = &keys_t[kv_head * head_dim * end..][..head_dim * end];

            // The causal mask: position `pos` attends to positions 0..=pos only.
            let mut scores = vec![0.0f32; pos + 1];
            for (d, &q_d) in q_head.iter().enumerate() {
                let k_d = &k_t[d * end..][..pos + 1]; // dimension d of keys 0..=pos
                for (s, &k) in scores.iter_mut().zip(k_d) {
                    *s = q_d.mul_add(k, *s);
                }
            }
            for s in scores.iter_mut() {
                *s *= scale;
            }
            softmax(&mut scores);
            // out = Σ_j p_j · v_j, in order of j.
            for (j, &p) in scores.iter().enumerate() {
                let v = &rows.value(j)[kv_head * head_dim..][..head_dim];
                for (o, &v) in out_head.iter_mut().zip(v) {
                    *o = p.mul_add(v, *o);
                }
            }
        });
    out
}
// ANCHOR_END: attention

// ANCHOR: kv_rows
/// Where attention finds position `j`'s key and value: one `[n_kv_heads * head_dim]` row each.
pub trait KvRows: Sync {
    fn key(&self, j: usize) -> &[f32];
    fn value(&self, j: usize) -> &[f32];
}

/// Keys and values stored one position after another: `[len, kv_dim]` each.
pub struct Contiguous<'a> {
    keys: &'a [f32],
    values: &'a [f32],
    kv_dim: usize,
}

impl<'a> Contiguous<'a> {
    pub fn new(keys: &'a [f32], values: &'a [f32], kv_dim: usize) -> Self {
        Contiguous {
            keys,
            values,
            kv_dim,
        }
    }
}

impl KvRows for Contiguous<'_> {
    fn key(&self, j: usize) -> &[f32] {
        &self.keys[j * self.kv_dim..][..self.kv_dim]
    }
    fn value(&self, j: usize) -> &[f32] {
        &self.values[j * self.kv_dim..][..self.kv_dim]
    }
}
// ANCHOR_END: kv_rows

// ANCHOR: paged_rows
/// PagedAttention's view of one layer (Kwon et al. 2023, §4.1): the sequence's
/// positions live in fixed-size blocks scattered through a pool, listed in order by
/// its block table. Block `b` of the table holds positions
/// `b * block_size..(b + 1) * block_size`, as one `[block_size, kv_dim]` slice.
pub struct Paged<'a> {
    /// Layer `l`'s K slice of each block in the table, in table order: `[block_size, kv_dim]` each.
    pub k_blocks: Vec<&'a [f32]>,
    /// The same for V.
    pub v_blocks: Vec<&'a [f32]>,
    pub block_size: usize,
    pub kv_dim: usize,
}

impl KvRows for Paged<'_> {
    /// Position `j` is row `j % block_size` of block `j / block_size`: the only
    /// difference from the contiguous layout is this address computation.
    fn key(&self, j: usize) -> &[f32] {
        let (block, row) = (j / self.block_size, j % self.block_size);
        &self.k_blocks[block][row * self.kv_dim..][..self.kv_dim]
    }
    fn value(&self, j: usize) -> &[f32] {
        let (block, row) = (j / self.block_size, j % self.block_size);
        &self.v_blocks[block][row * self.kv_dim..][..self.kv_dim]
    }
}
// ANCHOR_END: paged_rows

/// One layer's keys and values for positions `0..end`, as a cache hands them to attention.
pub enum KvView<'a> {
    Contiguous(Contiguous<'a>),
    Paged(Paged<'a>),
}

impl KvView<'_> {
    /// Attention over this view: the match happens once per layer, and each arm runs
    /// a copy of [`attention_over`] compiled for its layout (no per-row dispatch).
    pub fn attend(&self, q: &[f32], start_pos: usize, heads: Heads) -> Vec<f32> {
        match self {
            KvView::Contiguous(rows) => attention_over(rows, q, start_pos, heads),
            KvView::Paged(rows) => attention_over(rows, q, start_pos, heads),
        }
    }
}
