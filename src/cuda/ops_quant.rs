//! Decode attention over an int8 KV cache on the GPU (kernels/attention_int8.cu): the cache's
//! codes and scales are read as they are and dequantized in registers (book:
//! kv-quantization.md). CPU twin: `attention::attention_over` with
//! `cache::quant::QuantRows` (`--kv int8`), checked in tests/cuda_quant.rs.

use super::gpu::Gpu;
use super::ops::{check, check_heads, check_nonzero, int, window_arg};
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
        window: Option<usize>,
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
        let w_i = window_arg(window)?;
        b.arg(&n_i)
            .arg(&sp_i)
            .arg(&nh_i)
            .arg(&nkv_i)
            .arg(&hd_i)
            .arg(&w_i);
        // SAFETY: attention_int8(out, q, k_codes, k_scales, v_codes, v_scales, n, start_pos,
        // n_heads, n_kv_heads, head_dim, window) matches the kernel; it touches q and out below
        // n*n_heads*head_dim, codes below (start_pos+n)*n_kv_heads*head_dim, scales below
        // (start_pos+n)*n_kv_heads (all checked), reads KV head h / kv_mul < n_kv_heads
        // (divisibility checked), and its per-lane arrays hold MAX_HEAD_DIM >= head_dim (checked).
        unsafe { self.launch(&mut b, cfg, "attention_int8") }
    }
    // ANCHOR_END: attention_int8

    // ANCHOR: kv_append_int8_op
    /// Quantizes the keys and values of `n` new positions (`k`, `v`: `[n, n_kv_heads *
    /// head_dim]`) into layer `layer` of an int8 cache at rows `start_pos..start_pos + n`:
    /// codes `[n_layers, capacity, n_kv_heads, head_dim]`, scales `[n_layers, capacity,
    /// n_kv_heads]`. Bit for bit the CPU's `quantize_i8`, head by head (tests/cuda_quant.rs).
    #[allow(clippy::too_many_arguments)]
    pub fn kv_append_int8(
        &self,
        (k_codes, k_scales): (&mut CudaViewMut<i8>, &mut CudaViewMut<f32>),
        (v_codes, v_scales): (&mut CudaViewMut<i8>, &mut CudaViewMut<f32>),
        k: &CudaView<f32>,
        v: &CudaView<f32>,
        n: usize,
        (layer, capacity, start_pos): (usize, usize, usize),
        heads: Heads,
    ) -> Result<()> {
        let (n_kv_heads, head_dim) = (heads.n_kv_heads, heads.head_dim);
        check_nonzero(
            "kv_append_int8",
            &[("n", n), ("n_kv_heads", n_kv_heads), ("head_dim", head_dim)],
        )?;
        if n > 65535 || n_kv_heads > 65535 {
            return Err(Error::Cuda(format!(
                "kv_append_int8 takes at most 65535 positions and KV heads per launch, got {n} and {n_kv_heads}"
            )));
        }
        let too_big = || Error::Cuda("kv_append_int8: the cache's size overflows".into());
        let end = start_pos.checked_add(n).ok_or_else(too_big)?;
        if end > capacity {
            return Err(Error::Cuda(format!(
                "internal: kv_append_int8 past the cache's capacity ({start_pos} + {n} > {capacity})"
            )));
        }
        let kv_dim = n_kv_heads.checked_mul(head_dim).ok_or_else(too_big)?;
        let rows = layer
            .checked_add(1)
            .and_then(|l| l.checked_mul(capacity))
            .ok_or_else(too_big)?;
        let code_len = rows.checked_mul(kv_dim).ok_or_else(too_big)?;
        let scale_len = rows.checked_mul(n_kv_heads).ok_or_else(too_big)?;
        check("kv_append_int8 k", k.len(), n * kv_dim)?;
        check("kv_append_int8 v", v.len(), n * kv_dim)?;
        check("kv_append_int8 k_codes", k_codes.len(), code_len)?;
        check("kv_append_int8 v_codes", v_codes.len(), code_len)?;
        check("kv_append_int8 k_scales", k_scales.len(), scale_len)?;
        check("kv_append_int8 v_scales", v_scales.len(), scale_len)?;
        int("kv_append_int8 cache size", code_len)?;
        let (l_i, cap_i, sp_i, nkv_i, hd_i) = (
            int("layer", layer)?,
            int("capacity", capacity)?,
            int("start_pos", start_pos)?,
            int("n_kv_heads", n_kv_heads)?,
            int("head_dim", head_dim)?,
        );
        let cfg = LaunchConfig {
            grid_dim: (n_kv_heads as u32, n as u32, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.f.kv_append_int8);
        b.arg(k_codes).arg(k_scales).arg(v_codes).arg(v_scales);
        b.arg(k).arg(v);
        b.arg(&l_i).arg(&cap_i).arg(&sp_i).arg(&nkv_i).arg(&hd_i);
        // SAFETY: kv_append_int8(k_codes, k_scales, v_codes, v_scales, k, v, layer, capacity,
        // start_pos, n_kv_heads, head_dim) matches the kernel. Block (g, i) reads k and v at
        // i*kv_dim + g*head_dim + d < n*kv_dim (checked) and writes codes at row*kv_dim + ...
        // < (layer+1)*capacity*kv_dim and scales below (layer+1)*capacity*n_kv_heads (rows
        // start_pos + i < capacity, checked; lengths checked above).
        unsafe { self.launch(&mut b, cfg, "kv_append_int8") }
    }
    // ANCHOR_END: kv_append_int8_op
}
