//! Decode attention over an int8 KV cache on the GPU (kernels/attention_int8.cu): the cache's
//! codes and scales are read as they are and dequantized in registers (book:
//! kv-quantization.md). CPU twin: `attention::attention_over` with
//! `cache::quant::QuantRows` (`--kv int8`), checked in tests/cuda_quant.rs.

use super::gpu::Gpu;
use super::ops::{check, check_heads, check_nonzero, int};
use crate::attention::Heads;
use crate::error::{Error, Result};
use cudarc::driver::{CudaView, CudaViewMut, LaunchConfig, PushKernelArg};

impl Gpu {
    // ANCHOR: attention_int8
    /// Causal attention of `n` queries at positions `start_pos..start_pos + n` over an int8
    /// cache of positions `0..start_pos + n`: `k_codes`, `v_codes` `[start_pos + n, n_kv_heads,
    /// head_dim]` int8, `k_scales`, `v_scales` `[start_pos + n, n_kv_heads]` f32 (one symmetric
    /// scale per token per KV head: value = code x scale). `q`, `out`: `[n, n_heads, head_dim]`.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_int8(
        &self,
        out: &mut CudaViewMut<f32>,
        q: &CudaView<f32>,
        k_codes: &CudaView<i8>,
        k_scales: &CudaView<f32>,
        v_codes: &CudaView<i8>,
        v_scales: &CudaView<f32>,
        n: usize,
        start_pos: usize,
        heads: Heads,
    ) -> Result<()> {
        let Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        } = heads;
        check_heads("int8 attention", heads)?;
        check_nonzero("int8 attention", &[("n", n)])?;
        if n > 65535 {
            return Err(Error::Cuda(format!(
                "int8 attention takes at most 65535 queries per launch, got {n}"
            )));
        }
        // n <= 65535 and the heads are checked small; the cache's positions come from the
        // caller, so its sizes are computed with checked arithmetic.
        let q_len = n * n_heads * head_dim;
        let too_big = || {
            Error::Cuda(format!(
                "int8 attention: a cache of {start_pos} + {n} positions does not fit in memory"
            ))
        };
        let positions = start_pos.checked_add(n).ok_or_else(too_big)?;
        let scale_len = positions.checked_mul(n_kv_heads).ok_or_else(too_big)?;
        let code_len = scale_len.checked_mul(head_dim).ok_or_else(too_big)?;
        check("int8 attention q", q.len(), q_len)?;
        check("int8 attention out", out.len(), q_len)?;
        check("int8 attention k_codes", k_codes.len(), code_len)?;
        check("int8 attention v_codes", v_codes.len(), code_len)?;
        check("int8 attention k_scales", k_scales.len(), scale_len)?;
        check("int8 attention v_scales", v_scales.len(), scale_len)?;
        int("int8 attention q size", q_len)?;
        int("int8 attention cache size", code_len)?;
        let (n_i, sp_i, nh_i, nkv_i, hd_i) = (
            int("n", n)?,
            int("start_pos", start_pos)?,
            int("n_heads", n_heads)?,
            int("n_kv_heads", n_kv_heads)?,
            int("head_dim", head_dim)?,
        );
        let cfg = LaunchConfig {
            grid_dim: (n_heads as u32, n as u32, 1),
            block_dim: (128, 1, 1), // WARPS * 32 in attention_int8.cu
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.f.attention_int8);
        b.arg(out)
            .arg(q)
            .arg(k_codes)
            .arg(k_scales)
            .arg(v_codes)
            .arg(v_scales);
        b.arg(&n_i).arg(&sp_i).arg(&nh_i).arg(&nkv_i).arg(&hd_i);
        // SAFETY: attention_int8(out, q, k_codes, k_scales, v_codes, v_scales, n, start_pos,
        // n_heads, n_kv_heads, head_dim) matches the kernel; it touches q and out below
        // n*n_heads*head_dim, codes below (start_pos+n)*n_kv_heads*head_dim, scales below
        // (start_pos+n)*n_kv_heads (all checked), reads KV head h / kv_mul < n_kv_heads
        // (divisibility checked), and its per-lane arrays hold MAX_HEAD_DIM >= head_dim (checked).
        unsafe { self.launch(&mut b, cfg, "attention_int8") }
    }
    // ANCHOR_END: attention_int8
}
