//! The forward pass with the fused kernels (kernels/fused.cu) and split-K attention
//! (kernels/attention_splitk.cu): [`super::forward`]'s pass in 7 launches per layer instead
//! of 15. Chapter "The CUDA backend".
//!
//! The same pass, the same order: each fused kernel computes exactly what the unfused
//! kernels it replaces compute, bit for bit; only attention differs (v3 adds in another
//! order than v2). Both generation paths run these same kernels, so the GPU's naive and
//! cached logits stay bitwise equal. The position is read from `st.pos` on the GPU, never
//! passed as a number, so that a CUDA graph captured at one step replays at every step
//! (src/cuda/graph.rs).

use super::forward::{GpuKvSource, RunState};
use super::ops_fused::MatmulOut;
use super::GpuModel;
use crate::attention::Heads;
use crate::error::{Error, Result};

impl GpuModel {
    // ANCHOR: forward_fused
    /// Queues a pass of `n` staged tokens (positions `start_pos..start_pos + n`) with the
    /// fused kernels; the last token's logits end in `st.logits`. Launches only: capturable.
    pub(crate) fn forward_kernels_fused(
        &self,
        n: usize,
        start_pos: usize,
        kv: &mut GpuKvSource,
        st: &mut RunState,
    ) -> Result<()> {
        let (gpu, w, c) = (&*self.gpu, &self.weights, &self.config);
        let dim = c.hidden_size;
        let heads = Heads::of(c);
        let kv_dim = heads.n_kv_heads * heads.head_dim;
        let eps = c.rms_norm_eps as f32;
        let rows = st.rows;
        // The fused RoPE + KV append writes f32 rows of a contiguous cache (or of the naive
        // pass's own buffers): the paged and int8 caches run the unfused kernels.
        let mut cache = match kv {
            GpuKvSource::ThisPass => None,
            GpuKvSource::Cache(cache) => Some(&mut **cache),
            GpuKvSource::Paged(_) | GpuKvSource::Int8(_) => {
                return Err(Error::InvalidArgument(
                    "the fused kernels write a contiguous f32 KV cache: the paged and int8 caches run the unfused ones (drop the fused plan, or --cache paged / --kv int8)".into(),
                ))
            }
        };
        let RunState {
            tokens,
            x,
            q,
            k,
            v,
            att,
            gate,
            up,
            logits,
            pos,
            split_k,
            naive_kv,
            ..
        } = st;
        let (Some(scratch), pos) = (split_k.as_mut(), pos.as_view()) else {
            return Err(Error::Cuda(
                "internal: the fused pass runs before its scratch exists (stage_inputs)".into(),
            ));
        };

        // Token embedding (a Llama's: unscaled; GpuModel::set_plan refuses Gemma here).  x: [n, dim]
        gpu.embedding_ids(
            &mut x.slice_mut(..n * dim),
            &w.embed,
            &tokens.slice(..n),
            1.0,
        )?;

        for (l, layer) in w.layers.iter().enumerate() {
            // ---- attention block: 5 launches ----
            // RMSNorm, then Q, K and V (and their biases) in one launch.
            gpu.rmsnorm_matmul(
                &mut [
                    MatmulOut {
                        out: &mut q.as_view_mut(), // [n, n_heads * head_dim]
                        w: &layer.wq,
                        bias: layer.bq.as_ref().map(|b| b.as_view()),
                    },
                    MatmulOut {
                        out: &mut k.as_view_mut(), // [n, n_kv_heads * head_dim]
                        w: &layer.wk,
                        bias: layer.bk.as_ref().map(|b| b.as_view()),
                    },
                    MatmulOut {
                        out: &mut v.as_view_mut(), // [n, n_kv_heads * head_dim]
                        w: &layer.wv,
                        bias: layer.bv.as_ref().map(|b| b.as_view()),
                    },
                ],
                &x.as_view(),
                &layer.attn_norm.as_view(),
                eps,
                n,
            )?;
            // RoPE, and the rotated K and V into the cache (the naive path: into this pass's
            // own one-layer "cache", which every layer rewrites).
            let (layer_in_cache, capacity) = match &cache {
                None => (0, rows),
                Some(cache) => (l, cache.capacity()),
            };
            {
                let (mut k_cache, mut v_cache) = match cache.as_mut() {
                    None => {
                        let Some((kc, vc)) = naive_kv.as_mut() else {
                            return Err(Error::Cuda(
                                "internal: the fused naive pass has no K/V buffers".into(),
                            ));
                        };
                        (kc.as_view_mut(), vc.as_view_mut())
                    }
                    Some(cache) => cache.buffers_mut(),
                };
                gpu.rope_kv_append(
                    &mut q.as_view_mut(),
                    &k.as_view(),
                    &v.as_view(),
                    &mut k_cache,
                    &mut v_cache,
                    &w.rope,
                    &pos,
                    start_pos,
                    n,
                    heads,
                    layer_in_cache,
                    capacity,
                )?;
            }
            // Split-K attention over every row the cache holds (the chunks past this
            // position return at once: the grid is the same at every step).
            let (keys, values) = match &cache {
                None => match naive_kv.as_ref() {
                    Some((kc, vc)) => (kc.slice(..n * kv_dim), vc.slice(..n * kv_dim)),
                    None => {
                        return Err(Error::Cuda(
                            "internal: the fused naive pass has no K/V buffers".into(),
                        ))
                    }
                },
                Some(cache) => cache.read(l, capacity),
            };
            gpu.attention_v3(
                &mut att.as_view_mut(),
                &q.as_view(),
                &keys,
                &values,
                &pos,
                start_pos,
                n,
                heads,
                scratch,
                None,
            )?;
            // x += att · Wo
            gpu.matmul_residual(&mut x.as_view_mut(), &att.as_view(), &layer.wo, n)?;

            // ---- MLP block: 2 launches ----
            gpu.rmsnorm_matmul(
                &mut [
                    MatmulOut {
                        out: &mut gate.as_view_mut(), // [n, hidden]
                        w: &layer.w_gate,
                        bias: None,
                    },
                    MatmulOut {
                        out: &mut up.as_view_mut(), // [n, hidden]
                        w: &layer.w_up,
                        bias: None,
                    },
                ],
                &x.as_view(),
                &layer.mlp_norm.as_view(),
                eps,
                n,
            )?;
            // x += (silu(gate) * up) · W_down
            gpu.swiglu_matmul_residual(
                &mut x.as_view_mut(),
                &gate.as_view(),
                &up.as_view(),
                &layer.w_down,
                n,
            )?;
        }

        // Final RMSNorm and LM head, for the last token only: one launch.   logits: [vocab]
        let last = x.slice((n - 1) * dim..n * dim);
        gpu.rmsnorm_matmul(
            &mut [MatmulOut {
                out: &mut logits.as_view_mut(),
                w: &w.lm_head,
                bias: None,
            }],
            &last,
            &w.final_norm.as_view(),
            eps,
            1,
        )
    }
    // ANCHOR_END: forward_fused
}
