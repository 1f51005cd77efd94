//! A Llama-family transformer's forward pass, read top to bottom (after llama2.c's `forward`).
//!
//! ```text
//! tokens ─ embed ─┬─ [ RMSNorm ─ Q,K,V ─ RoPE ─ attention ─ O ] ─(+)─┬─ [ RMSNorm ─ SwiGLU MLP ] ─(+)─ ... ─ RMSNorm ─ LM head ─ logits
//!                 └──────────────── residual ──────────────────────┘└────────── residual ─────────┘
//! ```
//!
//! The same pass runs Gemma 3 (book: sliding-window-model.md), whose `config.json` adds
//! five things, each one `if` below: the embedding scaled by √dim, QK-norm before RoPE, a
//! norm on each sub-block's output before the residual add (the "sandwich"), GeGLU, and
//! local layers that attend to a window and turn RoPE at their own base.
//!
//! There is one forward function. The two generation paths differ only in
//! where attention gets its keys and values from ([`KvSource`]):
//! - **naive** (`use_cache=False`): every step runs the *whole* sequence again,
//!   and attention uses the K and V this very pass computed for every position;
//! - **cached**: each pass runs only the new tokens, appends their K and V to
//!   a cache ([`KvStore`](crate::cache::KvStore): preallocated, growable, paged or prefix-shared) and
//!   attends over everything the cache holds.

use crate::attention::Heads;
use crate::cache::source::BatchKv;
pub use crate::cache::source::KvSource;
use crate::cache::view::KvView;
use crate::config::{Activation, Config};
use crate::error::{Error, Result};
use crate::mask::Window;
use crate::ops;
use crate::simd::WeightElem;
use ndarray::{Array1, Array2};
use rayon::prelude::*;

// ANCHOR: weights
/// One transformer block's weights. Matrices are `[d_in, d_out]`: PyTorch's
/// `[d_out, d_in]` transposed at load time, so `y = x · W` reads contiguous rows of `W`.
/// A norm holds the factor each normalised element is multiplied by: Gemma's checkpoints
/// store `w` for a factor of `1 + w`, and the loader adds the 1 (`loader::GEMMA_NORM_OFFSET`).
/// Their element type `E` is f32 as loaded, bf16 (`Model::to_bf16`, half the bytes for
/// memory-bound decode) or int8 blocks (`Model::to_int8`: the array is then
/// `[d_in / 32, d_out / 16]` blocks, see `simd::q8`); norms and biases stay f32.
pub struct Layer<E = f32> {
    /// `[dim]`
    pub attn_norm: Array1<f32>,
    /// `[dim, n_heads * head_dim]`
    pub wq: Array2<E>,
    /// `[dim, n_kv_heads * head_dim]`
    pub wk: Array2<E>,
    /// `[dim, n_kv_heads * head_dim]`
    pub wv: Array2<E>,
    /// `[n_heads * head_dim, dim]`
    pub wo: Array2<E>,
    /// Optional q/k/v biases (Qwen2): `[n_heads * head_dim]`, `[kv_dim]`, `[kv_dim]`.
    pub bq: Option<Array1<f32>>,
    pub bk: Option<Array1<f32>>,
    pub bv: Option<Array1<f32>>,
    /// `[dim]`
    pub mlp_norm: Array1<f32>,
    /// `[dim, hidden]`
    pub w_gate: Array2<E>,
    /// `[dim, hidden]`
    pub w_up: Array2<E>,
    /// `[hidden, dim]`
    pub w_down: Array2<E>,
    /// Gemma 3's QK-norm: an RMSNorm of every query head and every key head before RoPE,
    /// `[head_dim]` each, shared by the heads; None for Llama.
    pub q_norm: Option<Array1<f32>>,
    pub k_norm: Option<Array1<f32>>,
    /// Gemma 3's sandwich norms: the attention's and the MLP's outputs are normalised
    /// before they join the residual stream, `[dim]` each; None for Llama.
    pub post_attn_norm: Option<Array1<f32>>,
    pub post_mlp_norm: Option<Array1<f32>>,
}

/// The whole model: weight matrices of element type `E` (f32 unless converted).
pub struct Model<E = f32> {
    pub config: Config,
    /// `[vocab, dim]`
    pub embed: Array2<f32>,
    pub layers: Vec<Layer<E>>,
    /// `[dim]`
    pub final_norm: Array1<f32>,
    /// `[dim, vocab]`. When the checkpoint ties it to the embedding (SmolLM2
    /// does), this is a transposed copy of `embed`: the embedding is read one
    /// row (token) at a time, the LM head as a whole matrix, and each wants its
    /// own layout. The copy costs `vocab x dim` floats of memory, not of time.
    pub lm_head: Array2<E>,
    /// True when `lm_head` is a copy of `embed` (counted once in `n_params`).
    pub tied_embeddings: bool,
}
// ANCHOR_END: weights

/// Where one sequence's rows sit in the stacked batch.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    /// Index of its first row in `[total_rows, ..]`.
    pub first_row: usize,
    pub n_rows: usize,
    /// Position of its first row in its own sequence (its RoPE angle).
    pub start_pos: usize,
    /// Rows its attention reads before its own: `start_pos`, unless its cache evicts.
    pub rows_before: usize,
    /// Whether its cache wants the attention its rows received (H2O).
    pub observe: bool,
    /// The sliding window its cache reads keys through (`--kv sliding`), if any.
    pub window: Option<Window>,
}

impl Span {
    /// The spans of `batch`, one after another; an empty sequence is an error.
    pub fn of_batch(batch: &[&[u32]], kv: &dyn BatchKv) -> Result<Vec<Span>> {
        if batch.len() != kv.n_seqs() {
            return Err(Error::Internal(format!(
                "a batch of {} token lists for {} caches",
                batch.len(),
                kv.n_seqs()
            )));
        }
        let mut first_row = 0;
        let mut spans = Vec::with_capacity(batch.len());
        for (i, tokens) in batch.iter().enumerate() {
            if tokens.is_empty() {
                return Err(Error::EmptyPrompt);
            }
            spans.push(Span {
                first_row,
                n_rows: tokens.len(),
                start_pos: kv.start_pos(i)?,
                rows_before: 0, // set once the caches are prepared
                observe: false,
                window: None,
            });
            first_row += tokens.len();
        }
        if spans.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        Ok(spans)
    }

    /// The range of its rows in a `[total_rows, width]` buffer.
    pub fn rows(&self, width: usize) -> std::ops::Range<usize> {
        self.first_row * width..(self.first_row + self.n_rows) * width
    }
}

// ANCHOR: observer
/// What a caller may watch of the real pass, layer by layer: for sequence `seq` of the
/// batch, its rotated queries `q` (`[rows, n_heads * head_dim]`), the keys and values
/// its attention read (`kv`: `rows_before` rows before its own new ones), and what
/// attention returned (`out`, `[rows, n_heads * head_dim]`). `lab/attention_map.rs`
/// draws the attention probabilities from it; nothing else in the pass changes.
pub trait PassObserver: Send {
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &mut self,
        layer: usize,
        seq: usize,
        q: &[f32],
        kv: &KvView,
        rows_before: usize,
        heads: Heads,
        out: &[f32],
    );
}

/// Nobody watching: the pass every caller but `attention-map` runs.
pub struct NoObserver;

impl PassObserver for NoObserver {
    fn attention(
        &mut self,
        _: usize,
        _: usize,
        _: &[f32],
        _: &KvView,
        _: usize,
        _: Heads,
        _: &[f32],
    ) {
    }
}
// ANCHOR_END: observer

/// `(cos, sin)` of every row's position, `[rows][head_dim / 2]` each: one RoPE base's angles.
type RopeTable = Vec<(Vec<f32>, Vec<f32>)>;

/// RMSNorm of every row of `x` (rows of `weight.len()`), into a new buffer.
fn normed(x: &[f32], weight: &Array1<f32>, eps: f32) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    ops::rmsnorm(x, s(weight), eps, &mut out);
    out
}

/// Reads a standard-layout array as a slice. Every array here is built
/// contiguous (by the loader or by `Array2::zeros`), so this cannot fail.
pub(crate) fn s<A, D: ndarray::Dimension>(a: &ndarray::Array<A, D>) -> &[A] {
    a.as_slice().expect("arrays in kvlab are contiguous")
}

/// Runs `f` on one of rayon's threads and waits for it. The forward pass has
/// dozens of parallel regions per layer (each matmul, attention); started from
/// the main thread, each would be a hand-off to the pool and back (two thread
/// wake-ups, tens of microseconds — decode does ~200 of them per token); started
/// from a pool thread, a parallel region is a cheap work-stealing `join`. The
/// cache (`&mut dyn KvStore`, not `Send`) stays on the calling thread, so each
/// layer makes two trips: before the cache write, and after it.
fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::scope(|_| f())
}

impl<E: WeightElem> Model<E> {
    // ANCHOR: forward
    /// Runs `tokens`, which sit at positions `start_pos..start_pos + tokens.len()`,
    /// through every layer, and returns the logits of the **last** token, `[vocab]`.
    ///
    /// With `KvSource::ThisPass`, `start_pos` must be 0 (the pass sees the whole sequence).
    /// With `KvSource::Cache`, `start_pos` is the cache's length.
    pub fn forward(&self, tokens: &[u32], mut kv: KvSource) -> Result<Vec<f32>> {
        let hidden = self.forward_hidden(tokens, &mut kv)?;
        let dim = self.config.hidden_size;
        let last = &s(&hidden)[(tokens.len() - 1) * dim..];
        Ok(self.logits(last))
    }

    /// The final hidden states of every token, `[n, dim]`, before the final norm.
    pub fn forward_hidden(&self, tokens: &[u32], kv: &mut KvSource) -> Result<Array2<f32>> {
        self.forward_hidden_layers(tokens, kv, self.layers.len())
    }

    /// The same pass through the first `n_layers` layers only: an early exit, the
    /// self-speculative draft of `src/speculative/early_exit.rs`.
    pub fn forward_hidden_layers(
        &self,
        tokens: &[u32],
        kv: &mut KvSource,
        n_layers: usize,
    ) -> Result<Array2<f32>> {
        // A single sequence is a batch of one (`src/batch.rs` runs many).
        self.forward_layers(&[tokens], kv, n_layers)
    }

    /// The layer loop, over a **batch**: `batch[i]` are the new tokens of sequence `i`,
    /// whose keys and values `kv` keeps (sequence `i` starts at `kv.start_pos(i)`).
    /// Returns the final hidden states of every row, `[total_rows, dim]`, sequence after
    /// sequence. Every matmul runs over all rows stacked; only attention looks at one
    /// sequence at a time, over its own keys and values. The kernels are row-independent
    /// (`src/ops.rs`), so a row's result does not depend on the rows beside it: a batch
    /// of one is the single-sequence pass, and a batch of many gives each sequence the
    /// bits it would get alone (book: scheduling.md).
    pub fn forward_layers(
        &self,
        batch: &[&[u32]],
        kv: &mut dyn BatchKv,
        n_layers: usize,
    ) -> Result<Array2<f32>> {
        self.forward_layers_observed(batch, kv, n_layers, &mut NoObserver)
    }

    /// [`Model::forward_layers`], with `observer` shown each layer's attention.
    pub fn forward_layers_observed(
        &self,
        batch: &[&[u32]],
        kv: &mut dyn BatchKv,
        n_layers: usize,
        observer: &mut dyn PassObserver,
    ) -> Result<Array2<f32>> {
        let layers = self.layers.get(..n_layers).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "cannot run {n_layers} layers of a {}-layer model",
                self.layers.len()
            ))
        })?;
        let c = &self.config;
        let dim = c.hidden_size;
        let heads = Heads::of(&self.config);
        let (q_dim, kv_dim) = (
            heads.n_heads * heads.head_dim,
            heads.n_kv_heads * heads.head_dim,
        );
        // Where each sequence's rows sit in the stacked batch, and its first position.
        let mut spans = Span::of_batch(batch, kv)?;
        for (span, tokens) in spans.iter().zip(batch) {
            if span.start_pos + span.n_rows > c.max_position_embeddings {
                return Err(Error::PromptTooLong {
                    prompt_len: span.start_pos + span.n_rows,
                    max_seq_len: c.max_position_embeddings,
                });
            }
            if let Some(&id) = tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
                return Err(Error::TokenOutOfRange {
                    id,
                    vocab_size: c.vocab_size,
                });
            }
        }
        // The input is checked; `prepare` makes room (or fails) before any layer writes,
        // so a pass that fails leaves the cache as it was.
        for (i, tokens) in batch.iter().enumerate() {
            kv.prepare(i, tokens)?;
        }
        // ANCHOR: rows_before
        // Rows attention reads before each sequence's first new token: its start position,
        // unless its cache evicts (a window, H2O), in which case `prepare` has just made
        // room; and whether its cache wants to see the attention each row receives (H2O).
        for (i, span) in spans.iter_mut().enumerate() {
            span.rows_before = kv.rows_held(i);
            span.observe = kv.observes_attention(i);
            span.window = kv.window(i);
        }
        // ANCHOR_END: rows_before
        // A local layer's window counts positions; a cache that evicts rows (a window
        // imposed at run time, H2O) no longer knows which position a row held.
        if c.has_local_layers() {
            if let Some(w) = spans.iter().find_map(|s| s.window) {
                return Err(Error::InvalidArgument(format!(
                    "this model's local layers were trained with their own window of {} positions, and --kv sliding would lay a window of {} on its global layers too: use --kv full (its cache already keeps only each local layer's window)",
                    c.gemma.sliding_window.unwrap_or(0),
                    w.size
                )));
            }
            if let Some(span) = spans.iter().find(|s| s.rows_before != s.start_pos) {
                return Err(Error::InvalidArgument(format!(
                    "this model's local layers attend to the last {} positions, and its cache evicted rows ({} held for {} positions): use a cache that keeps every position (--kv full)",
                    c.gemma.sliding_window.unwrap_or(0),
                    span.rows_before,
                    span.start_pos
                )));
            }
        }
        let n: usize = spans.iter().map(|s| s.n_rows).sum();

        // Token embedding: row `token` of the table.        x: [n, dim]
        let mut x = Array2::<f32>::zeros((n, dim));
        for (i, &token) in batch.iter().copied().flatten().enumerate() {
            x.row_mut(i).assign(&self.embed.row(token as usize));
        }
        // Gemma scales the embedding by √dim (its LM head, tied to the table, does not).
        if let Some(scale) = c.embed_scale() {
            x.mapv_inplace(|v| v * scale);
        }

        // RoPE angles for each row's true position in its own sequence, one table per
        // base: Gemma 3's local and global layers turn at different speeds.
        let positions = || {
            spans
                .iter()
                .flat_map(|s| s.start_pos..s.start_pos + s.n_rows)
        };
        let mut rope_tables: Vec<(f64, RopeTable)> = Vec::new();
        for l in 0..layers.len() {
            let theta = c.layer_rope_theta(l);
            if !rope_tables.iter().any(|(t, _)| *t == theta) {
                let table = positions()
                    .map(|pos| ops::rope_cos_sin(pos, heads.head_dim, theta))
                    .collect();
                rope_tables.push((theta, table));
            }
        }
        let activation = c.activation()?;
        let eps = c.rms_norm_eps as f32;
        let linear = |input: &[f32], w: &Array2<E>| {
            let (d_in, d_out) = E::dims(w);
            let mut out = vec![0.0f32; input.len() / d_in * d_out];
            ops::matmuls(input, d_in, vec![(s(w), &mut out[..])]);
            out
        };
        let hidden_dim = c.intermediate_size;

        let mut xb = vec![0.0f32; n * dim]; // normalised input of a sub-block, [n, dim]
        for (l, layer) in layers.iter().enumerate() {
            let x_s = x.as_slice_mut().expect("x is contiguous");
            let theta = c.layer_rope_theta(l);
            let rope = &rope_tables
                .iter()
                .find(|(t, _)| *t == theta)
                .expect("a table per base")
                .1;
            // Positions this layer's queries reach back: all of them, a local layer's
            // window, or the window a sequence's cache reads through (`--kv sliding`).
            let layer_window = c.layer_window(l).map(Window::plain);

            // ---- attention block ----
            let (q, k, v) = in_pool(|| {
                ops::rmsnorm(x_s, s(&layer.attn_norm), eps, &mut xb);
                let mut q = vec![0.0f32; n * q_dim]; // [n, n_heads * head_dim]
                let mut k = vec![0.0f32; n * kv_dim]; // [n, n_kv_heads * head_dim]
                let mut v = vec![0.0f32; n * kv_dim]; // [n, n_kv_heads * head_dim]
                                                      // Q, K and V read the same input: one parallel region for the three.
                let qkv = vec![
                    (s(&layer.wq), &mut q[..]),
                    (s(&layer.wk), &mut k[..]),
                    (s(&layer.wv), &mut v[..]),
                ];
                ops::matmuls(&xb, dim, qkv);
                for (bias, t) in [
                    (&layer.bq, &mut q),
                    (&layer.bk, &mut k),
                    (&layer.bv, &mut v),
                ] {
                    if let Some(b) = bias {
                        ops::add_bias(t, s(b));
                    }
                }
                // QK-norm (Gemma 3): each head of each row is one RMSNorm row of head_dim.
                if let (Some(q_norm), Some(k_norm)) = (&layer.q_norm, &layer.k_norm) {
                    q = normed(&q, q_norm, eps);
                    k = normed(&k, k_norm, eps);
                }
                for (i, (cos, sin)) in rope.iter().enumerate() {
                    let head_dim = heads.head_dim;
                    ops::apply_rope(&mut q[i * q_dim..][..q_dim], head_dim, cos, sin);
                    ops::apply_rope(&mut k[i * kv_dim..][..kv_dim], head_dim, cos, sin);
                }
                (q, k, v)
            });
            // The only lines where the paths differ: where K and V come from. Each
            // sequence writes its rows into its own cache (or keeps them: naive path)...
            for (i, span) in spans.iter().enumerate() {
                kv.write(i, l, &k[span.rows(kv_dim)], &v[span.rows(kv_dim)])?;
            }
            // ...and attention reads them back as the cache keeps them: contiguous
            // rows, a block table (PagedAttention), quantized codes or the rows an
            // evicting cache kept: same arithmetic.
            let kv_rows: Vec<KvView> = (0..spans.len())
                .map(|i| {
                    let span = &spans[i];
                    let (k, v) = (&k[span.rows(kv_dim)], &v[span.rows(kv_dim)]);
                    kv.read(i, l, span.rows_before + span.n_rows, k, v)
                })
                .collect();
            let received = in_pool(|| {
                // Attention, each sequence over its own keys, all sequences in parallel;
                // `received[i]` is what each of sequence i's rows received, when its
                // cache asks (H2O), else empty.
                let (attn, received): (Vec<Vec<f32>>, Vec<Vec<f32>>) = kv_rows
                    .par_iter()
                    .zip(&spans)
                    .map(|(rows, span)| {
                        let q = &q[span.rows(q_dim)];
                        let window = layer_window.or(span.window);
                        rows.attend_observed(q, span.rows_before, heads, window, span.observe)
                    })
                    .unzip();
                for (i, (span, out)) in spans.iter().zip(&attn).enumerate() {
                    let q = &q[span.rows(q_dim)];
                    observer.attention(l, i, q, &kv_rows[i], span.rows_before, heads, out);
                }
                let attn = attn.concat(); // [n, n_heads * head_dim]
                let mut out = linear(&attn, &layer.wo); // [n, dim]
                if let Some(w) = &layer.post_attn_norm {
                    out = normed(&out, w, eps); // Gemma's sandwich: normalise, then add
                }
                ops::add_inplace(x_s, &out);

                // ---- MLP block ----
                ops::rmsnorm(x_s, s(&layer.mlp_norm), eps, &mut xb);
                let mut gate = vec![0.0f32; n * hidden_dim]; // [n, hidden]
                let mut up = vec![0.0f32; n * hidden_dim]; // [n, hidden]
                let gate_up = vec![
                    (s(&layer.w_gate), &mut gate[..]),
                    (s(&layer.w_up), &mut up[..]),
                ];
                ops::matmuls(&xb, dim, gate_up);
                match activation {
                    Activation::Silu => ops::swiglu(&mut gate, &up),
                    Activation::GeluTanh => ops::geglu(&mut gate, &up),
                }
                let mut out = linear(&gate, &layer.w_down); // [n, dim]
                if let Some(w) = &layer.post_mlp_norm {
                    out = normed(&out, w, eps);
                }
                ops::add_inplace(x_s, &out);
                received
            });
            // ANCHOR: observe
            // H2O's hook: the attention each row received (only where a cache asked).
            for (i, span) in spans.iter().enumerate() {
                if span.observe {
                    kv.observe(i, l, &received[i]);
                }
            }
            // ANCHOR_END: observe
        }
        for (i, span) in spans.iter().enumerate() {
            kv.advance(i, span.n_rows);
        }
        Ok(x)
    }
    // ANCHOR_END: forward

    /// Final RMSNorm and LM head for one hidden state `[dim]` → logits `[vocab]`.
    pub fn logits(&self, hidden: &[f32]) -> Vec<f32> {
        self.logits_rows(hidden)
    }

    /// The same for `m` hidden states at once, `[m, dim]` → `[m, vocab]`: the LM head
    /// (the largest matrix) is streamed once for all rows (batched decode).
    pub fn logits_rows(&self, hidden: &[f32]) -> Vec<f32> {
        let mut normed = vec![0.0f32; hidden.len()];
        ops::rmsnorm(
            hidden,
            s(&self.final_norm),
            self.config.rms_norm_eps as f32,
            &mut normed,
        );
        let (dim, vocab) = E::dims(&self.lm_head);
        let mut logits = vec![0.0f32; normed.len() / dim * vocab];
        in_pool(|| ops::matmuls(&normed, dim, vec![(s(&self.lm_head), &mut logits[..])]));
        logits
    }

    /// Parameters, for the bandwidth roofline (weights streamed per decode step).
    pub fn n_params(&self) -> usize {
        let weights = |w: &Array2<E>| E::weights(w); // not `len()`: an int8 block holds 512
        let layer_params: usize = self
            .layers
            .iter()
            .map(|l| {
                l.attn_norm.len()
                    + weights(&l.wq)
                    + weights(&l.wk)
                    + weights(&l.wv)
                    + weights(&l.wo)
                    + l.bq.as_ref().map_or(0, |b| b.len())
                    + l.bk.as_ref().map_or(0, |b| b.len())
                    + l.bv.as_ref().map_or(0, |b| b.len())
                    + l.mlp_norm.len()
                    + weights(&l.w_gate)
                    + weights(&l.w_up)
                    + weights(&l.w_down)
                    + [&l.q_norm, &l.k_norm, &l.post_attn_norm, &l.post_mlp_norm]
                        .iter()
                        .map(|n| n.as_ref().map_or(0, |n| n.len()))
                        .sum::<usize>()
            })
            .sum();
        self.embed.len()
            + layer_params
            + self.final_norm.len()
            + if self.tied_embeddings {
                0
            } else {
                weights(&self.lm_head)
            }
    }
}
