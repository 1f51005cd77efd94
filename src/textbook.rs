//! The reference core: the whole of inference in one file, single-threaded, in the order
//! the formulas read (after llama2.c's `run.c` and Raschka's KV-cache bonus; book:
//! forward-pass.md).
//!
//! ```text
//! tokens ─ embed ─┬─ [ RMSNorm ─ Q,K,V ─ RoPE ─ attention ─ O ] ─(+)─┬─ [ RMSNorm ─ SwiGLU MLP ] ─(+)─ ... ─ RMSNorm ─ LM head ─ logits
//!                 └──────────────── residual ──────────────────────┘└────────── residual ─────────┘
//! ```
//!
//! Nothing here is optimised: no threads, no SIMD intrinsics, no weight panels, no
//! paging. [`forward`] is one function for both paths, and the paths differ in one `match`:
//! the **naive** path ([`naive_logits`]) runs the whole sequence and attends over the K
//! and V this very pass computed; the **cached** path ([`TextbookCache`]) runs only the
//! new tokens, appends their K and V to a cache, and attends over all of it.
//!
//! **Bitwise equal to the fast engine** (`tests/textbook.rs`, on random models and on
//! SmolLM2): the engine in `src/model.rs` is this arithmetic, parallelised and
//! vectorised, and every output element of both is computed by the same chain of
//! operations (book: naive-vs-cached.md, "row independence"):
//! - a matmul output is `acc = fma(x[k], w[k][j], acc)` for `k = 0, 1, 2, ...` from 0.0;
//! - a score `q·k` sums in 16 lanes folded by halves ([`score`]: the one place where this
//!   file writes the order the engine's vector registers need, not the order of the
//!   formula; a plain left-to-right sum would differ in the last bits);
//! - the softmax and the weighted sum of values run in order of position.
//!
//! RMSNorm, RoPE and softmax are already textbook code in `src/ops.rs`, shared with the
//! engine. Only f32 weights as loaded (`Model<f32>`, rows) are read here.
//!
//! The three pieces a learner writes in the exercises (RMSNorm, RoPE, attention) sit
//! behind [`Kernels`]: [`Reference`] is this file's, and `--impl learner`
//! (`src/learner.rs`) runs the same pass with the learner's own functions.

use crate::attention::Heads;
use crate::cache::KvBytes;
use crate::error::{Error, Result};
use crate::generate::{Decoder, PathKind};
// `slice(&array)`: a weight's floats, row-major (`model.rs`'s `s`).
use crate::config::Activation;
use crate::model::{s as slice, Model};
use crate::ops::{apply_rope, gelu_tanh, rmsnorm, rope_cos_sin, softmax};

// ANCHOR: textbook_cache
/// One layer's KV cache, as the cached path uses it: append each new position's K and V,
/// then read every position's back. [`Rows`] is the textbook's; exercise 10's
/// preallocated `KvCache` is another (`--impl learner`, `src/learner.rs`).
pub trait LayerCache {
    /// Positions held: the next one appended is position `len()`.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Writes the next position's K and V, `[n_kv_heads * head_dim]` each.
    fn append(&mut self, k: &[f32], v: &[f32]) -> Result<()>;
    /// Every position's keys so far, `[len, n_kv_heads * head_dim]`.
    fn keys(&self) -> &[f32];
    /// Every position's values so far, `[len, n_kv_heads * head_dim]`.
    fn values(&self) -> &[f32];
    /// Forgets every position (a new request), keeping the memory.
    fn reset(&mut self);
    /// The bytes it holds and the bytes it has reserved.
    fn bytes(&self) -> KvBytes;
}

/// The textbook's layer cache, as simple as it gets: the keys and the values of every
/// position so far, one row after another, in lists that grow as they fill.
#[derive(Debug, Clone, Default)]
pub struct Rows {
    pub k_cache: Vec<f32>, // [len, n_kv_heads * head_dim]
    pub v_cache: Vec<f32>, // [len, n_kv_heads * head_dim]
    pub len: usize,
}

impl LayerCache for Rows {
    fn len(&self) -> usize {
        self.len
    }
    fn append(&mut self, k: &[f32], v: &[f32]) -> Result<()> {
        self.k_cache.extend_from_slice(k);
        self.v_cache.extend_from_slice(v);
        self.len += 1;
        Ok(())
    }
    fn keys(&self) -> &[f32] {
        &self.k_cache
    }
    fn values(&self) -> &[f32] {
        &self.v_cache
    }
    fn reset(&mut self) {
        self.k_cache.clear();
        self.v_cache.clear();
        self.len = 0;
    }
    fn bytes(&self) -> KvBytes {
        let f32_bytes = std::mem::size_of::<f32>();
        KvBytes {
            reserved: (self.k_cache.capacity() + self.v_cache.capacity()) * f32_bytes,
            used: (self.k_cache.len() + self.v_cache.len()) * f32_bytes,
        }
    }
}

/// The KV cache: one [`LayerCache`] per layer, all holding the same positions.
#[derive(Debug, Clone, Default)]
pub struct TextbookCache<L = Rows> {
    pub layers: Vec<L>,
}

impl<L: LayerCache> TextbookCache<L> {
    /// Positions held (every layer holds the same ones).
    pub fn len(&self) -> usize {
        self.layers.first().map_or(0, L::len)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl TextbookCache {
    /// Runs `new_tokens` (at positions `len..len + n`) through `model`, appending their K
    /// and V, and returns the logits of the last one, `[vocab]`: the prefill when the
    /// cache is empty, one decode step when `new_tokens` is one token.
    pub fn logits(&mut self, model: &Model, new_tokens: &[u32]) -> Result<Vec<f32>> {
        self.layers.resize_with(model.layers.len(), Rows::default);
        forward(&Reference, model, new_tokens, Some(self))
    }
}

/// The naive path (`use_cache=False`): the whole sequence, every time. Step `t` costs a
/// prefill of `t` tokens; nothing is kept between calls.
pub fn naive_logits(model: &Model, seq: &[u32]) -> Result<Vec<f32>> {
    forward::<Rows>(&Reference, model, seq, None)
}
// ANCHOR_END: textbook_cache

// ANCHOR: textbook_kernels
/// The pieces of a layer that the exercises build (02 RMSNorm, 03 RoPE, 06 and 14
/// attention). [`forward`] calls them through this trait, so the same pass runs this
/// file's [`Reference`] or a learner's own code (`--impl learner`, `src/learner.rs`).
pub trait Kernels {
    /// RMSNorm of every row: `x` and `out` are `[n, dim]`, `weight` is `[dim]`.
    fn rmsnorm(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]);
    /// Rotates every head of one row at position `pos`: `x` is `[heads * head_dim]`.
    fn rope(&self, x: &mut [f32], pos: usize, head_dim: usize, theta: f64);
    /// Causal attention of `q` (`[n, n_heads * head_dim]`, positions `start_pos..`) over
    /// `keys` and `values` (`[start_pos + n, n_kv_heads * head_dim]`), as [`attention`];
    /// a local layer's `window` (Gemma 3) hides the keys older than it.
    fn attention(
        &self,
        q: &[f32],
        keys: &[f32],
        values: &[f32],
        start_pos: usize,
        heads: Heads,
        window: Option<usize>,
    ) -> Vec<f32>;
}

/// This file's kernels: `src/ops.rs`'s RMSNorm and RoPE (the engine's own) and
/// [`attention`] below.
pub struct Reference;

impl Kernels for Reference {
    fn rmsnorm(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
        rmsnorm(x, weight, eps, out);
    }
    fn rope(&self, x: &mut [f32], pos: usize, head_dim: usize, theta: f64) {
        let (cos, sin) = rope_cos_sin(pos, head_dim, theta);
        apply_rope(x, head_dim, &cos, &sin);
    }
    fn attention(
        &self,
        q: &[f32],
        keys: &[f32],
        values: &[f32],
        start_pos: usize,
        heads: Heads,
        window: Option<usize>,
    ) -> Vec<f32> {
        attention(q, keys, values, start_pos, heads, window)
    }
}
// ANCHOR_END: textbook_kernels

// ANCHOR: textbook_forward
/// `tokens` through every layer; returns the logits of the last token, `[vocab]`.
/// Without a cache the tokens are the whole sequence, from position 0; with one they
/// follow the positions it holds. `kernels` computes RMSNorm, RoPE and attention.
pub fn forward<L: LayerCache>(
    kernels: &dyn Kernels,
    model: &Model,
    tokens: &[u32],
    mut cache: Option<&mut TextbookCache<L>>,
) -> Result<Vec<f32>> {
    let c = &model.config;
    let (dim, hidden) = (c.hidden_size, c.intermediate_size);
    let heads = Heads::of(c);
    let (q_dim, kv_dim) = (
        heads.n_heads * heads.head_dim,
        heads.n_kv_heads * heads.head_dim,
    );
    let eps = c.rms_norm_eps as f32;
    let start_pos = cache.as_ref().map_or(0, |cache| cache.len());
    check(model, tokens, start_pos)?;
    if let Some(cache) = &cache {
        if cache.layers.len() != model.layers.len() {
            return Err(Error::InvalidArgument(format!(
                "the cache has {} layers and the model {}: make one LayerCache per layer",
                cache.layers.len(),
                model.layers.len()
            )));
        }
    }
    let n = tokens.len();

    // Token embedding: row `token` of the table.                       x: [n, dim]
    let mut x: Vec<f32> = tokens
        .iter()
        .flat_map(|&t| model.embed.row(t as usize).to_vec())
        .collect();
    // Gemma: the embedding times √dim.
    if let Some(scale) = c.embed_scale() {
        x.iter_mut().for_each(|x| *x *= scale);
    }
    let mut xb = vec![0.0f32; n * dim]; // a sub-block's normalised input, [n, dim]
                                        // RMSNorm into a new buffer: Gemma's QK-norm (rows of head_dim) and sandwich norms.
    let normed = |x: &[f32], weight: &[f32]| {
        let mut out = vec![0.0f32; x.len()];
        kernels.rmsnorm(x, weight, eps, &mut out);
        out
    };
    let activation = c.activation()?;

    for (l, layer) in model.layers.iter().enumerate() {
        // A local layer (Gemma 3) sees `window` positions and turns RoPE at its own base.
        let (window, theta) = (c.layer_window(l), c.layer_rope_theta(l));
        // ---- attention block ----
        kernels.rmsnorm(&x, slice(&layer.attn_norm), eps, &mut xb);
        let mut q = matmul(&xb, slice(&layer.wq), dim, q_dim); // [n, n_heads * head_dim]
        let mut k = matmul(&xb, slice(&layer.wk), dim, kv_dim); // [n, n_kv_heads * head_dim]
        let mut v = matmul(&xb, slice(&layer.wv), dim, kv_dim); // [n, n_kv_heads * head_dim]
        for (bias, t) in [
            (&layer.bq, &mut q),
            (&layer.bk, &mut k),
            (&layer.bv, &mut v),
        ] {
            if let Some(bias) = bias {
                for row in t.chunks_exact_mut(bias.len()) {
                    row.iter_mut().zip(bias).for_each(|(x, b)| *x += b);
                }
            }
        }
        // QK-norm (Gemma 3): every head of q and k normalised on its own.
        if let (Some(q_norm), Some(k_norm)) = (&layer.q_norm, &layer.k_norm) {
            q = normed(&q, slice(q_norm));
            k = normed(&k, slice(k_norm));
        }
        // RoPE: each row turns by its own position (Su et al. 2021).
        for i in 0..n {
            let pos = start_pos + i;
            kernels.rope(&mut q[i * q_dim..][..q_dim], pos, heads.head_dim, theta);
            kernels.rope(&mut k[i * kv_dim..][..kv_dim], pos, heads.head_dim, theta);
        }
        // The one difference between the paths: where the keys and values come from.
        let (keys, values): (&[f32], &[f32]) = match cache.as_deref_mut() {
            // Naive: this pass computed every position's K and V.
            None => (&k, &v),
            // Cached: append this pass's K and V, then read every position's back.
            Some(cache) => {
                let layer_cache = &mut cache.layers[l];
                for (k_row, v_row) in k.chunks_exact(kv_dim).zip(v.chunks_exact(kv_dim)) {
                    layer_cache.append(k_row, v_row)?;
                }
                (layer_cache.keys(), layer_cache.values())
            }
        };
        let want = (start_pos + n) * kv_dim;
        if keys.len() != want || values.len() != want {
            return Err(Error::InvalidArgument(format!(
                "layer {l}'s cache gave {} key and {} value floats after the pass, not {want} ({} positions of {kv_dim}): its append or its keys()/values() lose or add rows",
                keys.len(),
                values.len(),
                start_pos + n
            )));
        }
        let attn = kernels.attention(&q, keys, values, start_pos, heads, window); // [n, n_heads * head_dim]
        let mut out = matmul(&attn, slice(&layer.wo), q_dim, dim);
        if let Some(w) = &layer.post_attn_norm {
            out = normed(&out, slice(w)); // Gemma's sandwich norm
        }
        x.iter_mut().zip(&out).for_each(|(x, o)| *x += o); // residual

        // ---- MLP block: SwiGLU (Shazeer 2020), or Gemma's GeGLU ----
        kernels.rmsnorm(&x, slice(&layer.mlp_norm), eps, &mut xb);
        let mut gate = matmul(&xb, slice(&layer.w_gate), dim, hidden); // [n, hidden]
        let up = matmul(&xb, slice(&layer.w_up), dim, hidden); // [n, hidden]
        for (g, &u) in gate.iter_mut().zip(&up) {
            let act = match activation {
                Activation::Silu => *g / (1.0 + (-*g).exp()), // silu(g) = g·σ(g)
                Activation::GeluTanh => gelu_tanh(*g),
            };
            *g = act * u;
        }
        let mut out = matmul(&gate, slice(&layer.w_down), hidden, dim);
        if let Some(w) = &layer.post_mlp_norm {
            out = normed(&out, slice(w));
        }
        x.iter_mut().zip(&out).for_each(|(x, o)| *x += o); // residual
    }

    // Final RMSNorm and the LM head, for the last token only.
    let last = &x[(n - 1) * dim..];
    let mut normed = vec![0.0f32; dim];
    kernels.rmsnorm(last, slice(&model.final_norm), eps, &mut normed);
    Ok(matmul(&normed, slice(&model.lm_head), dim, c.vocab_size))
}
// ANCHOR_END: textbook_forward

// ANCHOR: textbook_attention
/// Causal self-attention (Vaswani et al. 2017): `out = softmax(q·Kᵀ / √head_dim + mask) · V`.
/// `q`: `[n, n_heads * head_dim]` at positions `start_pos..start_pos + n`; `keys`,
/// `values`: `[start_pos + n, n_kv_heads * head_dim]`. Query head `h` reads KV head
/// `h / kv_mul` (GQA; MHA is `kv_mul = 1`, MQA is one KV head). With a `window` (a
/// Gemma 3 local layer), position `pos` sees only the `window` positions ending at its own.
pub fn attention(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    start_pos: usize,
    heads: Heads,
    window: Option<usize>,
) -> Vec<f32> {
    let Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    } = heads;
    let kv_mul = n_heads / n_kv_heads;
    let (q_dim, kv_dim) = (n_heads * head_dim, n_kv_heads * head_dim);
    let n = q.len() / q_dim;
    let len = start_pos + n; // keys 0..len
    let scale = 1.0 / (head_dim as f32).sqrt();
    let mut out = vec![0.0f32; n * q_dim];
    for i in 0..n {
        let pos = start_pos + i;
        for h in 0..n_heads {
            let q_head = &q[i * q_dim + h * head_dim..][..head_dim];
            let kv_head = h / kv_mul;
            // 1. Scores: the query against every key, scaled.
            let mut scores: Vec<f32> = (0..len)
                .map(|j| {
                    score(q_head, &keys[j * kv_dim + kv_head * head_dim..][..head_dim]) * scale
                })
                .collect();
            // 2. The causal mask: position `pos` must not see the positions after it.
            //    exp(-inf) = 0, so they get no weight; adding those zeros changes no bit.
            for s in &mut scores[pos + 1..] {
                *s = f32::NEG_INFINITY;
            }
            //    The sliding window: neither may it see the positions before its window.
            if let Some(window) = window {
                for s in &mut scores[..(pos + 1).saturating_sub(window)] {
                    *s = f32::NEG_INFINITY;
                }
            }
            // 3. Softmax: the scores become weights that sum to 1.
            softmax(&mut scores);
            // 4. The weighted sum of the values, in order of position.
            let out_head = &mut out[i * q_dim + h * head_dim..][..head_dim];
            for (j, &p) in scores.iter().enumerate() {
                let value = &values[j * kv_dim + kv_head * head_dim..][..head_dim];
                for (o, &v) in out_head.iter_mut().zip(value) {
                    *o = p.mul_add(v, *o);
                }
            }
        }
    }
    out
}

/// `q · k` in 16 lanes: lane `l` sums `d = l, l + 16, ...` (fused multiply-adds from
/// 0.0), then the lanes are folded by halves (`l + 8` onto `l`, then `+ 4`, `+ 2`,
/// `+ 1`). Mathematically `Σ_d q[d]·k[d]`; this order is the engine's (two AVX2 or one
/// AVX-512 multiply-add per step), so that the bits agree.
pub fn score(q: &[f32], k: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    for (d, (&q, &k)) in q.iter().zip(k).enumerate() {
        lanes[d % 16] = q.mul_add(k, lanes[d % 16]);
    }
    for width in [8, 4, 2, 1] {
        for l in 0..width {
            lanes[l] += lanes[l + width];
        }
    }
    lanes[0]
}
// ANCHOR_END: textbook_attention

// ANCHOR: textbook_matmul
/// `x · w`: `x` is `[n, d_in]`, `w` is `[d_in, d_out]`, the result `[n, d_out]`. Every
/// output is `Σ_k x[i][k] · w[k][j]`, accumulated in order of `k` with fused
/// multiply-adds. The loop runs `k` outermost so that one row of `w` is read once for
/// all `n` rows (the same sums, in the same order, as the other loop orders).
pub fn matmul(x: &[f32], w: &[f32], d_in: usize, d_out: usize) -> Vec<f32> {
    let n = x.len() / d_in;
    let mut out = vec![0.0f32; n * d_out];
    for k in 0..d_in {
        let w_row = &w[k * d_out..][..d_out];
        for i in 0..n {
            let x_ik = x[i * d_in + k];
            for (o, &w_kj) in out[i * d_out..][..d_out].iter_mut().zip(w_row) {
                *o = x_ik.mul_add(w_kj, *o);
            }
        }
    }
    out
}
// ANCHOR_END: textbook_matmul

/// The input checks the engine makes: a non-empty pass, ids in the vocabulary, positions
/// in the context.
fn check(model: &Model, tokens: &[u32], start_pos: usize) -> Result<()> {
    let c = &model.config;
    if tokens.is_empty() {
        return Err(Error::EmptyPrompt);
    }
    if let Some(&id) = tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
        return Err(Error::TokenOutOfRange {
            id,
            vocab_size: c.vocab_size,
        });
    }
    let end = start_pos.saturating_add(tokens.len());
    if end > c.max_position_embeddings {
        return Err(Error::PromptTooLong {
            prompt_len: end,
            max_seq_len: c.max_position_embeddings,
        });
    }
    Ok(())
}

/// The textbook's two paths behind the generation loop's [`Decoder`], with `kernels`
/// (so `kvlab generate` and `kvlab compare` run them with `--impl textbook`, or
/// `--impl learner` with the learner's kernels).
pub fn decoder<'a>(
    model: &'a Model,
    path: PathKind,
    kernels: &'a dyn Kernels,
) -> Box<dyn Decoder + 'a> {
    match path {
        PathKind::Naive => naive_decoder(model, kernels),
        PathKind::Cached => {
            let layers = vec![Rows::default(); model.layers.len()];
            cached_decoder(model, kernels, TextbookCache { layers })
        }
    }
}

/// The naive path behind [`Decoder`]: the whole sequence through [`forward`] every step.
pub fn naive_decoder<'a>(model: &'a Model, kernels: &'a dyn Kernels) -> Box<dyn Decoder + 'a> {
    Box::new(NaiveDecoder {
        model,
        kernels,
        seq: Vec::new(),
    })
}

/// The cached path behind [`Decoder`], on `cache` (the textbook's [`Rows`], or any other
/// [`LayerCache`]: `--impl learner` passes exercise 10's), one per layer of `model`.
pub fn cached_decoder<'a, L: LayerCache + 'a>(
    model: &'a Model,
    kernels: &'a dyn Kernels,
    cache: TextbookCache<L>,
) -> Box<dyn Decoder + 'a> {
    Box::new(CachedDecoder {
        model,
        kernels,
        cache,
    })
}

struct NaiveDecoder<'a> {
    model: &'a Model,
    kernels: &'a dyn Kernels,
    seq: Vec<u32>,
}

impl Decoder for NaiveDecoder<'_> {
    fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>> {
        self.seq = prompt.to_vec();
        forward::<Rows>(self.kernels, self.model, &self.seq, None)
    }
    fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        self.seq.push(token);
        forward::<Rows>(self.kernels, self.model, &self.seq, None)
    }
    fn kv_bytes(&self) -> KvBytes {
        KvBytes::default()
    }
}

struct CachedDecoder<'a, L> {
    model: &'a Model,
    kernels: &'a dyn Kernels,
    cache: TextbookCache<L>,
}

impl<L: LayerCache> Decoder for CachedDecoder<'_, L> {
    fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>> {
        self.cache.layers.iter_mut().for_each(L::reset);
        forward(self.kernels, self.model, prompt, Some(&mut self.cache))
    }
    fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        forward(self.kernels, self.model, &[token], Some(&mut self.cache))
    }
    fn kv_bytes(&self) -> KvBytes {
        self.cache
            .layers
            .iter()
            .map(L::bytes)
            .fold(KvBytes::default(), |a, b| KvBytes {
                reserved: a.reserved + b.reserved,
                used: a.used + b.used,
            })
    }
}
