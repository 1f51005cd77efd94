//! The forward pass on the GPU: src/model.rs's `forward_hidden`, line for line, with each
//! CPU call replaced by the kernel that does the same thing.
//!
//! As on the CPU there is one forward function, and the two generation paths differ only
//! in where attention gets its keys and values ([`GpuKvSource`]): the K and V this very pass
//! computed (naive), or the KV cache after appending them (cached). Every other kernel is
//! shared, and every kernel is row-independent (a row's numbers never depend on how many
//! rows are in the launch), so on the GPU too the two paths give bitwise-identical logits.

use super::gpu::CudaContextExt;
use super::int8_cache::GpuInt8Cache;
use super::kv_cache::GpuKvCache;
use super::ops::AttentionVersion;
use super::ops_splitk::SplitKScratch;
use super::paged_cache::GpuPagedCache;
use super::GpuModel;
use crate::attention::Heads;
use crate::config::Config;
use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};

/// Where attention reads keys and values from: the one difference between the two paths.
pub enum GpuKvSource<'a> {
    /// Naive: the pass covers the whole sequence, so its own K and V are all there is.
    ThisPass,
    /// Cached: append this pass's K and V to the cache, then attend over all of it.
    Cache(&'a mut GpuKvCache),
    /// Cached, in blocks: the same, through the sequence's block table (`--cache paged`).
    Paged(&'a mut GpuPagedCache),
    /// Cached, in int8: this pass's K and V quantized into the cache (`--kv int8`).
    Int8(&'a mut GpuInt8Cache),
}

// ANCHOR: run_state
/// The activations of one forward pass, allocated once per request for its longest pass
/// (llama2.c's `RunState`): the naive path's last step runs `prompt + max_new_tokens - 1`
/// rows, the cached path's prefill `prompt` rows. Each pass uses the first `n` rows.
pub struct RunState {
    /// Rows every buffer holds.
    pub rows: usize,
    /// `[rows]` the token ids of this pass
    pub tokens: CudaSlice<u32>,
    /// `[rows, dim]` the residual stream
    pub x: CudaSlice<f32>,
    /// `[rows, dim]` the input of a sub-block after RMSNorm
    pub xb: CudaSlice<f32>,
    /// `[rows, n_heads * head_dim]`
    pub q: CudaSlice<f32>,
    /// `[rows, n_kv_heads * head_dim]`
    pub k: CudaSlice<f32>,
    /// `[rows, n_kv_heads * head_dim]`
    pub v: CudaSlice<f32>,
    /// `[rows, n_heads * head_dim]` attention's output, before the O projection
    pub att: CudaSlice<f32>,
    /// `[rows, dim]` a sub-block's output, before it joins the residual stream
    pub proj: CudaSlice<f32>,
    /// `[rows, hidden]`
    pub gate: CudaSlice<f32>,
    /// `[rows, hidden]`
    pub up: CudaSlice<f32>,
    /// `[vocab]` the last token's logits
    pub logits: CudaSlice<f32>,
    /// `[1]` the greedy token, when it is picked on the GPU
    pub next_token: CudaSlice<u32>,
    /// `[1]` the pass's first position, on the GPU: read by the kernels that a CUDA graph
    /// replays (attention v3, the fused RoPE + KV append), since a graph's arguments are frozen
    pub pos: CudaSlice<i32>,
    /// Attention v3's partial softmaxes, allocated on the first pass that needs them
    pub split_k: Option<SplitKScratch>,
    /// `[rows, n_kv_heads * head_dim]` twice: the fused naive path's rotated keys and values
    /// (its one-layer "cache", rewritten by every layer), allocated when first needed
    pub naive_kv: Option<(CudaSlice<f32>, CudaSlice<f32>)>,
}
// ANCHOR_END: run_state

impl RunState {
    pub fn new(gpu: &super::Gpu, c: &Config, rows: usize) -> Result<RunState> {
        let rows = rows.max(1);
        let (dim, hidden) = (c.hidden_size, c.intermediate_size);
        let (q_dim, kv_dim) = (
            c.num_attention_heads * c.head_dim(),
            c.n_kv_heads() * c.head_dim(),
        );
        Ok(RunState {
            rows,
            tokens: gpu.zeros(rows)?,
            x: gpu.zeros(rows * dim)?,
            xb: gpu.zeros(rows * dim)?,
            q: gpu.zeros(rows * q_dim)?,
            k: gpu.zeros(rows * kv_dim)?,
            v: gpu.zeros(rows * kv_dim)?,
            att: gpu.zeros(rows * q_dim)?,
            proj: gpu.zeros(rows * dim)?,
            gate: gpu.zeros(rows * hidden)?,
            up: gpu.zeros(rows * hidden)?,
            logits: gpu.zeros(c.vocab_size)?,
            next_token: gpu.zeros(1)?,
            pos: gpu.zeros(1)?,
            split_k: None,
            naive_kv: None,
        })
    }

    /// Allocates what a pass of `n` rows over `key_rows` keys needs beyond the fixed buffers
    /// (before a graph capture: nothing may be allocated while capturing).
    pub fn prepare(
        &mut self,
        gpu: &super::Gpu,
        c: &Config,
        key_rows: usize,
        split_k: bool,
        naive_kv: bool,
    ) -> Result<()> {
        let heads = Heads::of(c);
        if split_k
            && !self
                .split_k
                .as_ref()
                .is_some_and(|s| s.fits(self.rows, key_rows, heads))
        {
            self.split_k = Some(SplitKScratch::new(gpu, self.rows, key_rows, heads)?);
        }
        if naive_kv && self.naive_kv.is_none() {
            let kv_dim = heads.n_kv_heads * heads.head_dim;
            self.naive_kv = Some((
                gpu.zeros(self.rows * kv_dim)?,
                gpu.zeros(self.rows * kv_dim)?,
            ));
        }
        Ok(())
    }
}

/// Attention of this pass's queries with the kernel `version`: v1 and v2 take the position
/// as a number, v3 (split-K) reads it from `pos` on the GPU and needs its scratch.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend(
    gpu: &super::Gpu,
    version: AttentionVersion,
    out: &mut CudaViewMut<f32>,
    q: &CudaView<f32>,
    (keys, values): (&CudaView<f32>, &CudaView<f32>),
    (pos, split_k): (&CudaView<i32>, Option<&mut SplitKScratch>),
    n: usize,
    start_pos: usize,
    heads: Heads,
    window: Option<usize>,
) -> Result<()> {
    match (version, split_k) {
        (AttentionVersion::V3, Some(scratch)) => gpu.attention_v3(
            out, q, keys, values, pos, start_pos, n, heads, scratch, window,
        ),
        (AttentionVersion::V3, None) => Err(Error::Cuda(
            "internal: attention v3 without its scratch (RunState::prepare was not called)".into(),
        )),
        _ => gpu.attention(out, q, keys, values, n, start_pos, heads, version, window),
    }
}

// ANCHOR: add_residual
/// `x += proj`: a sub-block's output joins the residual stream, normalised first when the
/// model has a sandwich norm there (Gemma 3's `post_attention_norm`, `post_ffw_norm`).
fn add_residual(
    gpu: &super::Gpu,
    st: &mut RunState,
    post_norm: &Option<CudaSlice<f32>>,
    eps: f32,
    n: usize,
    dim: usize,
) -> Result<()> {
    let out = match post_norm {
        Some(w) => {
            // xb is free here: the sub-block's input was consumed by its matmuls.
            let normed = &mut st.xb.slice_mut(..n * dim);
            gpu.rmsnorm(normed, &st.proj.slice(..n * dim), &w.as_view(), eps, n)?;
            &st.xb
        }
        None => &st.proj,
    };
    gpu.add_inplace(&mut st.x.as_view_mut(), &out.as_view(), n * dim)
}
// ANCHOR_END: add_residual

impl GpuModel {
    // ANCHOR: forward
    /// Runs `tokens` (positions `start_pos..start_pos + n`) through every layer and leaves the
    /// **last** token's logits in `st.logits`, on the GPU. Mirrors `Model::forward`.
    ///
    /// Three steps: check the request and find its position (`begin_pass`); copy
    /// the token ids and the position to the GPU (`stage_inputs`); queue the
    /// kernels (`forward_kernels`) — only launches, which is what a CUDA graph
    /// can capture (src/cuda/graph.rs).
    pub fn forward(&self, tokens: &[u32], mut kv: GpuKvSource, st: &mut RunState) -> Result<()> {
        let start_pos = self.begin_pass(tokens.len(), &kv, st)?;
        if let GpuKvSource::Paged(cache) = &mut kv {
            // The block manager takes this pass's blocks (all or nothing) before any write.
            cache.prepare(&self.gpu, tokens)?;
        }
        self.stage_inputs(tokens, start_pos, &kv, st)?;
        self.forward_kernels(tokens.len(), start_pos, &mut kv, st)?;
        // (A pass that fails advances nothing: the blocks it took stay in the table, and
        // the next pass at this position writes into them.)
        match kv {
            GpuKvSource::ThisPass => {}
            GpuKvSource::Cache(cache) => cache.advance(tokens.len()),
            GpuKvSource::Paged(cache) => cache.advance(tokens.len()),
            GpuKvSource::Int8(cache) => cache.advance(tokens.len()),
        }
        Ok(())
    }
    // ANCHOR_END: forward

    /// Checks that a pass of `n` tokens fits the buffers, the cache and the model, and returns
    /// its first position (0 on the naive path, the cache's length on the cached one).
    pub(crate) fn begin_pass(&self, n: usize, kv: &GpuKvSource, st: &RunState) -> Result<usize> {
        if n == 0 {
            return Err(Error::EmptyPrompt);
        }
        if n > st.rows {
            return Err(Error::Cuda(format!(
                "this decoder's buffers hold {} positions and a pass of {n} does not fit: \
                 size the decoder for prompt + max_new_tokens",
                st.rows
            )));
        }
        let start_pos = match kv {
            GpuKvSource::ThisPass => 0,
            GpuKvSource::Cache(cache) => {
                cache.reserve(n)?;
                cache.len()
            }
            GpuKvSource::Paged(cache) => cache.len(),
            GpuKvSource::Int8(cache) => {
                cache.reserve(n)?;
                cache.len()
            }
        };
        let max = self.config.max_position_embeddings;
        if start_pos + n > max {
            return Err(Error::PromptTooLong {
                prompt_len: start_pos + n,
                max_seq_len: max,
            });
        }
        Ok(start_pos)
    }

    /// Copies the token ids (checked against the vocabulary) and, for the kernels that read
    /// it from the GPU, the first position; allocates any scratch the pass needs.
    pub(crate) fn stage_inputs(
        &self,
        tokens: &[u32],
        start_pos: usize,
        kv: &GpuKvSource,
        st: &mut RunState,
    ) -> Result<()> {
        let gpu = &*self.gpu;
        let vocab = self.weights.embed.rows;
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::TokenOutOfRange {
                id,
                vocab_size: vocab,
            });
        }
        gpu.stream
            .memcpy_htod(tokens, &mut st.tokens.slice_mut(..tokens.len()))
            .cuda("copying token ids")?;
        let split_k = self.fused || self.attention == AttentionVersion::V3;
        if split_k {
            let pos = [super::ops::int("start_pos", start_pos)?];
            gpu.stream
                .memcpy_htod(&pos, &mut st.pos)
                .cuda("copying the position")?;
        }
        let key_rows = match kv {
            GpuKvSource::ThisPass => st.rows,
            GpuKvSource::Cache(cache) => cache.capacity(),
            GpuKvSource::Paged(cache) => cache.capacity(),
            GpuKvSource::Int8(cache) => cache.capacity(),
        };
        let naive_kv = self.fused && matches!(kv, GpuKvSource::ThisPass);
        st.prepare(gpu, &self.config, key_rows, split_k, naive_kv)
    }

    /// Queues every kernel of a pass whose inputs are staged: launches only (no copies, no
    /// allocations), so that a CUDA graph can capture it. The fused kernels when
    /// `self.fused`, else the unfused ones below.
    pub(crate) fn forward_kernels(
        &self,
        n: usize,
        start_pos: usize,
        kv: &mut GpuKvSource,
        st: &mut RunState,
    ) -> Result<()> {
        if self.fused {
            return self.forward_kernels_fused(n, start_pos, kv, st);
        }
        let (gpu, w, c) = (&*self.gpu, &self.weights, &self.config);
        let (dim, hidden) = (c.hidden_size, c.intermediate_size);
        let heads = Heads::of(&self.config);
        let kv_dim = heads.n_kv_heads * heads.head_dim;
        let (mm, attn_version) = (self.matmul, self.attention);
        let eps = c.rms_norm_eps as f32;
        let activation = c.activation()?;

        // Token embedding: row `token` of the table, times √dim for Gemma.   x: [n, dim]
        gpu.embedding_ids(
            &mut st.x.slice_mut(..n * dim),
            &w.embed,
            &st.tokens.slice(..n),
            c.embed_scale().unwrap_or(1.0),
        )?;

        for (l, layer) in w.layers.iter().enumerate() {
            // The keys a query reaches back to: all of them, or a local layer's window.
            let window = c.layer_window(l);
            // ---- attention block ----
            gpu.rmsnorm(
                &mut st.xb.as_view_mut(),
                &st.x.as_view(),
                &layer.attn_norm.as_view(),
                eps,
                n,
            )?;
            gpu.matmul(&mut st.q.as_view_mut(), &st.xb.as_view(), &layer.wq, n, mm)?; // [n, n_heads * head_dim]
            gpu.matmul(&mut st.k.as_view_mut(), &st.xb.as_view(), &layer.wk, n, mm)?; // [n, n_kv_heads * head_dim]
            gpu.matmul(&mut st.v.as_view_mut(), &st.xb.as_view(), &layer.wv, n, mm)?; // [n, n_kv_heads * head_dim]
            for (bias, t) in [
                (&layer.bq, &mut st.q),
                (&layer.bk, &mut st.k),
                (&layer.bv, &mut st.v),
            ] {
                if let Some(b) = bias {
                    gpu.add_bias(&mut t.as_view_mut(), &b.as_view(), n)?;
                }
            }
            // ANCHOR: qk_norm
            // QK-norm (Gemma 3): each head of each row is one RMSNorm row of head_dim.
            if let (Some(q_norm), Some(k_norm)) = (&layer.q_norm, &layer.k_norm) {
                let q_heads = n * heads.n_heads;
                let k_heads = n * heads.n_kv_heads;
                let q = &mut st.q.slice_mut(..q_heads * heads.head_dim);
                gpu.rmsnorm_inplace(q, &q_norm.as_view(), eps, q_heads)?;
                let k = &mut st.k.slice_mut(..k_heads * heads.head_dim);
                gpu.rmsnorm_inplace(k, &k_norm.as_view(), eps, k_heads)?;
            }
            gpu.rope(
                &mut st.q.as_view_mut(),
                &mut st.k.as_view_mut(),
                w.rope_of(c, l),
                n,
                heads,
                start_pos,
            )?;
            // ANCHOR_END: qk_norm
            // ANCHOR: kv_sources
            // The only lines where the two paths differ (and, on the cached path, the caches).
            match kv {
                GpuKvSource::ThisPass => {
                    let (keys, values) = (st.k.slice(..n * kv_dim), st.v.slice(..n * kv_dim));
                    attend(
                        gpu,
                        attn_version,
                        &mut st.att.as_view_mut(),
                        &st.q.as_view(),
                        (&keys, &values),
                        (&st.pos.as_view(), st.split_k.as_mut()),
                        n,
                        0,
                        heads,
                        window,
                    )?;
                }
                GpuKvSource::Cache(cache) => {
                    cache.write(gpu, l, &st.k.as_view(), &st.v.as_view(), n)?;
                    let (keys, values) = cache.read(l, start_pos + n);
                    attend(
                        gpu,
                        attn_version,
                        &mut st.att.as_view_mut(),
                        &st.q.as_view(),
                        (&keys, &values),
                        (&st.pos.as_view(), st.split_k.as_mut()),
                        n,
                        start_pos,
                        heads,
                        window,
                    )?;
                }
                // The paged cache reads through its block table with attention_paged
                // (v2's body), the int8 cache with attention_int8 (v2's body, codes
                // dequantized in registers), whichever version `attn_version` names.
                GpuKvSource::Paged(cache) => {
                    cache.write(gpu, l, &st.k.as_view(), &st.v.as_view(), n)?;
                    let (out, q) = (&mut st.att.as_view_mut(), &st.q.as_view());
                    cache.attend(gpu, l, out, q, (n, start_pos, window), heads)?;
                }
                GpuKvSource::Int8(cache) => {
                    cache.write(gpu, l, &st.k.as_view(), &st.v.as_view(), n)?;
                    let (out, q) = (&mut st.att.as_view_mut(), &st.q.as_view());
                    cache.attend(gpu, l, out, q, (n, start_pos, window))?;
                }
            }
            // ANCHOR_END: kv_sources
            gpu.matmul(
                &mut st.proj.as_view_mut(),
                &st.att.as_view(),
                &layer.wo,
                n,
                mm,
            )?; // [n, dim]
            add_residual(gpu, st, &layer.post_attn_norm, eps, n, dim)?;

            // ---- MLP block ----
            gpu.rmsnorm(
                &mut st.xb.as_view_mut(),
                &st.x.as_view(),
                &layer.mlp_norm.as_view(),
                eps,
                n,
            )?;
            gpu.matmul(
                &mut st.gate.as_view_mut(),
                &st.xb.as_view(),
                &layer.w_gate,
                n,
                mm,
            )?; // [n, hidden]
            gpu.matmul(
                &mut st.up.as_view_mut(),
                &st.xb.as_view(),
                &layer.w_up,
                n,
                mm,
            )?; // [n, hidden]
            let (gate, up) = (&mut st.gate.as_view_mut(), &st.up.as_view());
            gpu.gated(activation, gate, up, n * hidden)?; // SwiGLU, or Gemma's GeGLU
            gpu.matmul(
                &mut st.proj.as_view_mut(),
                &st.gate.as_view(),
                &layer.w_down,
                n,
                mm,
            )?; // [n, dim]
            add_residual(gpu, st, &layer.post_mlp_norm, eps, n, dim)?;
        }
        // Final RMSNorm and LM head, for the last token only.    logits: [vocab]
        let last = st.x.slice((n - 1) * dim..n * dim);
        gpu.rmsnorm(
            &mut st.xb.slice_mut(..dim),
            &last,
            &w.final_norm.as_view(),
            eps,
            1,
        )?;
        gpu.matmul(
            &mut st.logits.as_view_mut(),
            &st.xb.slice(..dim),
            &w.lm_head,
            1,
            mm,
        )
    }

    /// [`GpuModel::forward`], then the logits copied to the host, `[vocab]`.
    pub fn forward_logits(
        &self,
        tokens: &[u32],
        kv: GpuKvSource,
        st: &mut RunState,
    ) -> Result<Vec<f32>> {
        self.forward(tokens, kv, st)?;
        self.gpu.download(&st.logits)
    }

    // ANCHOR: forward_rows
    /// [`GpuModel::forward`], then the logits of the **last `rows`** tokens copied to the
    /// host, `[rows][vocab]`: what a speculative verify pass reads (row `i` scores the
    /// token after `tokens[n - rows + i]`). Chapter "Speculative decoding".
    ///
    /// The final norm and the LM head run once over all `rows` (the head is a fifth of
    /// SmolLM2's weights: streaming it once per row would make a verify pass cost `rows`
    /// steps). Both kernels are row-independent, so each row's logits are bit for bit those
    /// of a pass that ends at that row.
    pub fn forward_rows_logits(
        &self,
        tokens: &[u32],
        kv: GpuKvSource,
        st: &mut RunState,
        rows: usize,
    ) -> Result<Vec<Vec<f32>>> {
        let n = tokens.len();
        if rows == 0 || rows > n {
            return Err(Error::InvalidArgument(format!(
                "a pass over {n} tokens has 1 to {n} rows of logits, not {rows}"
            )));
        }
        self.forward(tokens, kv, st)?;
        let (gpu, w, c) = (&*self.gpu, &self.weights, &self.config);
        let (dim, vocab) = (c.hidden_size, c.vocab_size);
        let last_rows = st.x.slice((n - rows) * dim..n * dim); // [rows, dim]
        gpu.rmsnorm(
            &mut st.xb.slice_mut(..rows * dim),
            &last_rows,
            &w.final_norm.as_view(),
            c.rms_norm_eps as f32,
            rows,
        )?;
        let mut logits = gpu.zeros::<f32>(rows * vocab)?; // [rows, vocab]
        gpu.matmul(
            &mut logits.as_view_mut(),
            &st.xb.slice(..rows * dim),
            &w.lm_head,
            rows,
            self.matmul,
        )?;
        let host = gpu.download(&logits)?;
        Ok(host.chunks_exact(vocab).map(<[f32]>::to_vec).collect())
    }
    // ANCHOR_END: forward_rows

    /// [`GpuModel::forward`], then the greedy token picked on the GPU: 4 bytes come back
    /// instead of `4 * vocab`.
    pub fn forward_greedy(
        &self,
        tokens: &[u32],
        kv: GpuKvSource,
        st: &mut RunState,
    ) -> Result<u32> {
        self.forward(tokens, kv, st)?;
        self.gpu
            .argmax(&mut st.next_token.as_view_mut(), &st.logits.as_view())?;
        Ok(self.gpu.download(&st.next_token)?[0])
    }
}
