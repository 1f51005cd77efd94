//! The fused kernels (kernels/fused.cu) behind safe functions: RMSNorm as a matmul's
//! prologue (Q, K and V in one launch), the residual add as its epilogue, SwiGLU as the down
//! projection's prologue, and RoPE with the KV-cache append. Chapter "The CUDA backend".
//!
//! Each function checks every buffer against what its kernel touches, as `ops.rs` does, then
//! launches once where the unfused path launches two or three times. Their twins are the
//! unfused kernels, which give the same bits (tests/cuda_kernels.rs), and through them the
//! CPU's `ops::rmsnorm`, `ops::matmul`, `ops::swiglu`, `ops::add_inplace`, `ops::apply_rope`.
//!
//! The kernels take device pointers as raw `u64`s here rather than as views, because an
//! absent output or bias is passed as *some* valid pointer that the kernel is told (width 0,
//! bias bit clear) never to touch. The views' borrows are held until the launch is queued.

use super::gpu::Gpu;
use super::ops::{check, check_heads, check_nonzero, int, one_thread_each};
use super::weights::{GpuMatrix, RopeTables, WeightData};
use crate::attention::Heads;
use crate::device::GpuDtype;
use crate::error::{Error, Result};
use cudarc::driver::{CudaView, CudaViewMut, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};

/// Threads per block of every fused matmul (`THREADS` in fused.cu): one output column each.
const THREADS: usize = 256;

/// The widest input row the fused matmuls stage in shared memory: 40 KiB of f32. A block
/// gets 48 KiB of shared memory without opting in, and the kernels' own static shared
/// variables (RMSNorm's 8 warp sums and its result) need some of it.
pub const MAX_FUSED_D_IN: usize = 10 * 1024;

/// One output of [`Gpu::rmsnorm_matmul`]: `out = rmsnorm(x) · w (+ bias)`.
pub struct MatmulOut<'a, 'b> {
    /// `[n, w.cols]`
    pub out: &'a mut CudaViewMut<'b, f32>,
    /// `[d_in, w.cols]`
    pub w: &'a GpuMatrix,
    /// `[w.cols]`
    pub bias: Option<CudaView<'a, f32>>,
}

fn fused_grid(d_out: usize, n: usize, d_in: usize, what: &str) -> Result<LaunchConfig> {
    if d_in > MAX_FUSED_D_IN {
        return Err(Error::Cuda(format!(
            "{what}: rows of {d_in} values do not fit the fused kernels' shared memory \
             (at most {MAX_FUSED_D_IN}); run with the unfused kernels"
        )));
    }
    let columns = u32::try_from(d_out.div_ceil(THREADS))
        .map_err(|_| Error::Cuda(format!("{what}: {d_out} output columns is too many")))?;
    if n > 65535 {
        return Err(Error::Cuda(format!(
            "{what} takes at most 65535 rows per launch, got {n}"
        )));
    }
    Ok(LaunchConfig {
        grid_dim: (columns, n as u32, 1),
        block_dim: (THREADS as u32, 1, 1),
        shared_mem_bytes: (d_in * 4) as u32, // d_in <= MAX_FUSED_D_IN: fits u32
    })
}

/// The one weight format of `ws`, or an error if they mix f32 and bf16.
fn one_dtype(ws: &[&GpuMatrix], what: &str) -> Result<GpuDtype> {
    let dtype = ws[0].dtype();
    if ws.iter().any(|w| w.dtype() != dtype) {
        return Err(Error::Cuda(format!(
            "internal: {what} needs its matrices in one format"
        )));
    }
    Ok(dtype)
}

/// A matrix's device address, for a raw kernel argument.
fn weight_ptr(gpu: &Gpu, w: &GpuMatrix) -> u64 {
    match &w.data {
        WeightData::F32(d) => d.device_ptr(&gpu.stream).0,
        WeightData::Bf16(d) => d.device_ptr(&gpu.stream).0,
    }
}

impl Gpu {
    // ANCHOR: rmsnorm_matmul
    /// `outs[t].out = rmsnorm(x) · outs[t].w (+ outs[t].bias)` for 1 to 3 outputs that share
    /// the normalized input (Q, K, V; or gate, up), in one launch. `x`: `[n, d_in]`,
    /// `norm_w`: `[d_in]`. Unfused twin: [`Gpu::rmsnorm`], then [`Gpu::matmul`] and
    /// [`Gpu::add_bias`] per output.
    pub fn rmsnorm_matmul(
        &self,
        outs: &mut [MatmulOut<'_, '_>],
        x: &CudaView<f32>,
        norm_w: &CudaView<f32>,
        eps: f32,
        n: usize,
    ) -> Result<()> {
        let d_in = norm_w.len();
        if outs.is_empty() || outs.len() > 3 {
            return Err(Error::Cuda(format!(
                "internal: rmsnorm_matmul takes 1 to 3 outputs, got {}",
                outs.len()
            )));
        }
        check_nonzero("rmsnorm_matmul", &[("n", n), ("d_in", d_in)])?;
        check("rmsnorm_matmul x", x.len(), n * d_in)?;
        int("n * d_in", n * d_in)?;
        let weights: Vec<&GpuMatrix> = outs.iter().map(|o| o.w).collect();
        let dtype = one_dtype(&weights, "rmsnorm_matmul")?;
        let (mut widths, mut bias_mask) = ([0usize; 3], 0i32);
        for (t, o) in outs.iter().enumerate() {
            let d_out = o.w.cols;
            check_nonzero("rmsnorm_matmul", &[("d_out", d_out)])?;
            if o.w.rows != d_in {
                return Err(Error::Cuda(format!(
                    "internal: rmsnorm_matmul: a [{}, {d_out}] matrix after a norm of {d_in}",
                    o.w.rows
                )));
            }
            check("rmsnorm_matmul out", o.out.len(), n * d_out)?;
            int("n * d_out", n * d_out)?;
            if let Some(b) = &o.bias {
                check("rmsnorm_matmul bias", b.len(), d_out)?;
                bias_mask |= 1 << t;
            }
            widths[t] = d_out;
        }
        let total: usize = widths.iter().sum();
        let cfg = fused_grid(total, n, d_in, "rmsnorm_matmul")?;

        // Absent outputs and biases point at x: the kernel never touches them (width 0, bit clear).
        let (x_ptr, _x) = x.device_ptr(&self.stream);
        let (norm_ptr, _nw) = norm_w.device_ptr(&self.stream);
        let (mut out_ptrs, mut w_ptrs, mut bias_ptrs) = ([x_ptr; 3], [x_ptr; 3], [x_ptr; 3]);
        let mut guards = Vec::new();
        for (t, o) in outs.iter_mut().enumerate() {
            let (p, g) = o.out.device_ptr_mut(&self.stream);
            out_ptrs[t] = p;
            guards.push(g);
            w_ptrs[t] = weight_ptr(self, o.w);
            if let Some(b) = &o.bias {
                let (p, g) = b.device_ptr(&self.stream);
                bias_ptrs[t] = p;
                guards.push(g);
            }
        }
        let (n_i, d_in_i) = (int("n", n)?, int("d_in", d_in)?);
        let (da, db, dc) = (
            int("d_out", widths[0])?,
            int("d_out", widths[1])?,
            int("d_out", widths[2])?,
        );
        let f = match dtype {
            GpuDtype::F32 => &self.f.fused_rmsnorm_matmul_f32,
            GpuDtype::Bf16 => &self.f.fused_rmsnorm_matmul_bf16,
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(&out_ptrs[0]).arg(&out_ptrs[1]).arg(&out_ptrs[2]);
        b.arg(&x_ptr).arg(&norm_ptr).arg(&eps);
        b.arg(&w_ptrs[0]).arg(&w_ptrs[1]).arg(&w_ptrs[2]);
        b.arg(&bias_ptrs[0]).arg(&bias_ptrs[1]).arg(&bias_ptrs[2]);
        b.arg(&bias_mask).arg(&n_i).arg(&d_in_i);
        b.arg(&da).arg(&db).arg(&dc);
        // SAFETY: fused_rmsnorm_matmul_{f32,bf16}(out_a..c, x, norm_w, eps, w_a..c, bias_a..c,
        // bias_mask, n, d_in, d_a, d_b, d_c) matches the kernel for this weight format (all
        // three checked to share it). Block (·, r) reads x[r*d_in..][..d_in] with r < n
        // (checked: x holds n*d_in), norm_w[..d_in] (d_in is its length); output t with width
        // d_t > 0 is written below n*d_t (checked) from a [d_in, d_t] matrix (checked) and
        // bias_t[..d_t] only when its bit is set (checked length). Widths of absent outputs
        // are 0, so their placeholder pointers are never dereferenced. Shared memory:
        // d_in floats, the bytes requested (<= 40 KiB, checked).
        let launched = unsafe { self.launch(&mut b, cfg, "fused_rmsnorm_matmul") };
        drop(guards);
        launched
    }
    // ANCHOR_END: rmsnorm_matmul

    /// `x += input · w` (`input`: `[n, d_in]`, `x`: `[n, d_out]`): the O projection with the
    /// residual add as its epilogue. Unfused twin: [`Gpu::matmul`], then [`Gpu::add_inplace`].
    pub fn matmul_residual(
        &self,
        x: &mut CudaViewMut<f32>,
        input: &CudaView<f32>,
        w: &GpuMatrix,
        n: usize,
    ) -> Result<()> {
        self.launch_matmul_residual(x, input, None, w, n)
    }

    // ANCHOR: swiglu_matmul_residual
    /// `x += (silu(gate) * up) · w` (`gate`, `up`: `[n, hidden]`, `x`: `[n, d_out]`): the
    /// down projection with SwiGLU as its prologue and the residual add as its epilogue.
    /// Unfused twin: [`Gpu::swiglu`], [`Gpu::matmul`], [`Gpu::add_inplace`].
    pub fn swiglu_matmul_residual(
        &self,
        x: &mut CudaViewMut<f32>,
        gate: &CudaView<f32>,
        up: &CudaView<f32>,
        w: &GpuMatrix,
        n: usize,
    ) -> Result<()> {
        self.launch_matmul_residual(x, gate, Some(up), w, n)
    }
    // ANCHOR_END: swiglu_matmul_residual

    fn launch_matmul_residual(
        &self,
        x: &mut CudaViewMut<f32>,
        a: &CudaView<f32>,
        up: Option<&CudaView<f32>>,
        w: &GpuMatrix,
        n: usize,
    ) -> Result<()> {
        let (d_in, d_out) = (w.rows, w.cols);
        let what = if up.is_some() {
            "swiglu_matmul_residual"
        } else {
            "matmul_residual"
        };
        check_nonzero(what, &[("n", n), ("d_in", d_in), ("d_out", d_out)])?;
        check(what, a.len(), n * d_in)?;
        if let Some(up) = up {
            check(what, up.len(), n * d_in)?;
        }
        check(what, x.len(), n * d_out)?;
        int("n * d_in", n * d_in)?;
        int("n * d_out", n * d_out)?;
        let cfg = fused_grid(d_out, n, d_in, what)?;
        let (n_i, d_in_i, d_out_i) = (int("n", n)?, int("d_in", d_in)?, int("d_out", d_out)?);
        let f = match (up.is_some(), w.dtype()) {
            (false, GpuDtype::F32) => &self.f.fused_matmul_residual_f32,
            (false, GpuDtype::Bf16) => &self.f.fused_matmul_residual_bf16,
            (true, GpuDtype::F32) => &self.f.fused_swiglu_matmul_residual_f32,
            (true, GpuDtype::Bf16) => &self.f.fused_swiglu_matmul_residual_bf16,
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(x).arg(a);
        if let Some(up) = up {
            b.arg(up);
        }
        match &w.data {
            WeightData::F32(d) => b.arg(d),
            WeightData::Bf16(d) => b.arg(d),
        };
        b.arg(&n_i).arg(&d_in_i).arg(&d_out_i);
        // SAFETY: fused_[swiglu_]matmul_residual_{f32,bf16}(x, a[, up], w, n, d_in, d_out)
        // matches the kernel picked for this prologue and weight format; it reads a (and up)
        // below n*d_in and updates x below n*d_out (all checked), and w[..d_in*d_out] (a
        // GpuMatrix holds exactly rows*cols). Shared memory: d_in floats (<= 40 KiB, checked).
        unsafe { self.launch(&mut b, cfg, what) }
    }

    // ANCHOR: rope_kv_append
    /// Rotates the queries `q` (`[n, n_heads, head_dim]`, in place) and the keys `k`
    /// (`[n, n_kv_heads, head_dim]`) of positions `start_pos..start_pos + n`, and writes the
    /// rotated keys and the values `v` into rows `start_pos..` of layer `layer` of the caches
    /// (`[layers, capacity, n_kv_heads * head_dim]`). `pos` is the device copy of `start_pos`
    /// the kernel reads (a graph replays it with a new value each step); `start_pos` is the
    /// host's, for the bounds checks. Unfused twin: [`Gpu::rope`], then [`Gpu::kv_append`].
    #[allow(clippy::too_many_arguments)]
    pub fn rope_kv_append(
        &self,
        q: &mut CudaViewMut<f32>,
        k: &CudaView<f32>,
        v: &CudaView<f32>,
        k_cache: &mut CudaViewMut<f32>,
        v_cache: &mut CudaViewMut<f32>,
        tables: &RopeTables,
        pos: &CudaView<i32>,
        start_pos: usize,
        n: usize,
        heads: Heads,
        layer: usize,
        capacity: usize,
    ) -> Result<()> {
        let Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        } = heads;
        check_heads("rope_kv_append", heads)?;
        check_nonzero("rope_kv_append", &[("n", n), ("capacity", capacity)])?;
        let kv_dim = n_kv_heads * head_dim;
        check("rope_kv_append q", q.len(), n * n_heads * head_dim)?;
        check("rope_kv_append k", k.len(), n * kv_dim)?;
        check("rope_kv_append v", v.len(), n * kv_dim)?;
        check("rope_kv_append pos", pos.len(), 1)?;
        let cache_len = (layer + 1) * capacity * kv_dim;
        check("rope_kv_append k_cache", k_cache.len(), cache_len)?;
        check("rope_kv_append v_cache", v_cache.len(), cache_len)?;
        if tables.half * 2 != head_dim
            || start_pos + n > tables.positions
            || start_pos + n > capacity
        {
            return Err(Error::Cuda(format!(
                "internal: rope_kv_append of positions {start_pos}..{} into a cache of {capacity}, \
                 with RoPE tables of {} positions of head_dim {} (for head_dim {head_dim})",
                start_pos + n,
                tables.positions,
                tables.half * 2
            )));
        }
        let threads = n * (n_heads + n_kv_heads) * (head_dim / 2);
        int("rope_kv_append threads", threads)?;
        int("cache size", cache_len)?;
        int("rope table size", tables.positions * tables.half)?;
        let args = [
            int("n", n)?,
            int("n_heads", n_heads)?,
            int("n_kv_heads", n_kv_heads)?,
            int("head_dim", head_dim)?,
            int("layer", layer)?,
            int("capacity", capacity)?,
            int("table rows", tables.positions)?,
        ];
        let mut b = self.stream.launch_builder(&self.f.rope_kv_append);
        b.arg(q).arg(k).arg(v).arg(k_cache).arg(v_cache);
        b.arg(&tables.cos).arg(&tables.sin).arg(pos);
        for a in &args {
            b.arg(a);
        }
        // SAFETY: rope_kv_append(q, k, v, k_cache, v_cache, cos, sin, pos, n, n_heads,
        // n_kv_heads, head_dim, layer, capacity, table_rows) matches the kernel. It touches q
        // below n*n_heads*head_dim, k and v below n*kv_dim, pos[0] (all checked). The rows it
        // writes and the table rows it reads are pos[0] + i, which the kernel itself keeps
        // below both `capacity` and `table_rows` — so cache writes stay below
        // (layer+1)*capacity*kv_dim (checked) and table reads inside the tables — whatever
        // the device holds in pos[0]; the host also checked the start_pos it wrote there.
        unsafe { self.launch(&mut b, one_thread_each(threads, 256)?, "rope_kv_append") }
    }
    // ANCHOR_END: rope_kv_append
}
