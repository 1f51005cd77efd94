//! The forward pass's operations on the GPU: one safe function per kernel, each named after
//! its CPU twin in src/ops.rs, src/attention.rs or src/cache/.
//!
//! A kernel launch is `unsafe`: the GPU trusts the pointers and sizes it is given, and an
//! index past the end of a buffer is silent memory corruption, not a panic. So every
//! function here first checks each buffer's length against what the kernel will touch
//! (and every size against `i32`, the kernels' index type), returning an error on a
//! mismatch; the `// SAFETY:` comment on each launch names the checks it relies on.
//!
//! Launches are asynchronous: each call queues its kernel on the GPU's one stream and returns
//! at once, and kernels run in the order queued. Only a copy back to the host waits.

use super::gpu::{CudaContextExt, Gpu};
use super::weights::{GpuMatrix, RopeTables, WeightData};
use crate::attention::Heads;
use crate::config::Activation;
use crate::error::{Error, Result};
use cudarc::driver::{CudaView, CudaViewMut, LaunchArgs, LaunchConfig, PushKernelArg};
use serde::Serialize;

/// Which matmul kernel (`kernels/matmul.cu`) the forward pass uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MatmulVersion {
    /// One thread per output element.
    V1,
    /// 16 x 16 tiles through shared memory.
    V2,
    /// Split-K for decode: 32 threads per output, each a slice of k, then their sums in order.
    V3,
}

/// Which attention kernel (`kernels/attention.cu`) the forward pass uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionVersion {
    /// One thread per (query row, head): the CPU code, ported line by line.
    V1,
    /// One block per (query row, head), online softmax.
    V2,
    /// Split-K (Flash-Decoding): one block per (query row, head, chunk of 256 keys), then a
    /// merge. Reads the position from device memory (kernels/attention_splitk.cu).
    V3,
}

impl AttentionVersion {
    pub fn name(self) -> &'static str {
        match self {
            AttentionVersion::V1 => "v1",
            AttentionVersion::V2 => "v2",
            AttentionVersion::V3 => "v3",
        }
    }
}

impl MatmulVersion {
    pub fn name(self) -> &'static str {
        match self {
            MatmulVersion::V1 => "v1",
            MatmulVersion::V2 => "v2",
            MatmulVersion::V3 => "v3",
        }
    }
}

/// The largest head the attention kernels take (`MAX_HEAD_DIM` in attention.cu).
pub const MAX_HEAD_DIM: usize = 256;

/// An error unless `len >= needed`: the bounds check in front of every launch.
pub(super) fn check(what: &str, len: usize, needed: usize) -> Result<()> {
    if len < needed {
        return Err(Error::Cuda(format!(
            "internal: {what} holds {len} values, but the kernel would touch {needed}"
        )));
    }
    Ok(())
}

/// An error unless every size is at least 1, naming the first that is 0.
///
/// A zero size would reach the kernels as an empty grid (a CUDA launch error) or, worse, as
/// a divisor on the host or the GPU (`idx % width`, `n_heads / n_kv_heads`, `1 / sqrt(dim)`).
/// Checked before anything else, on the host, so it needs no GPU: tests/cuda_kernels.rs
/// calls it on a machine without one.
pub fn check_nonzero(what: &str, sizes: &[(&str, usize)]) -> Result<()> {
    if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
        return Err(Error::Cuda(format!(
            "{what}: {name} is 0, but every size a kernel is launched with must be at least 1"
        )));
    }
    Ok(())
}

/// The head shapes the attention kernels take: at least one head of at least one
/// dimension, KV heads dividing the query heads, and heads no larger than the kernels'
/// per-lane arrays. Needs no GPU.
pub fn check_heads(what: &str, heads: Heads) -> Result<()> {
    let Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    } = heads;
    check_nonzero(
        what,
        &[
            ("n_heads", n_heads),
            ("n_kv_heads", n_kv_heads),
            ("head_dim", head_dim),
        ],
    )?;
    if n_heads % n_kv_heads != 0 || head_dim > MAX_HEAD_DIM {
        return Err(Error::Cuda(format!(
            "{what} needs n_heads divisible by n_kv_heads and head_dim <= {MAX_HEAD_DIM}: got {n_heads}, {n_kv_heads}, {head_dim}"
        )));
    }
    Ok(())
}

/// `v` as the kernels' `int`, or an error if it does not fit.
pub(super) fn int(what: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| {
        Error::Cuda(format!(
            "{what} = {v} is too large for the kernels' 32-bit sizes"
        ))
    })
}

/// The attention kernels' `window` argument: 0 for a layer that attends to the whole prefix,
/// else how many positions a local layer's query sees (its own and the `window - 1` before
/// it: Gemma 3's sliding layers, `Config::layer_window`).
pub(super) fn window_arg(window: Option<usize>) -> Result<i32> {
    match window {
        None => Ok(0),
        Some(0) => Err(Error::InvalidArgument(
            "a window of 0 positions lets a query see no key: a local layer's window is at least 1"
                .into(),
        )),
        Some(w) => int("window", w),
    }
}

/// A 1-D launch of `count` threads in blocks of `threads`.
pub(super) fn one_thread_each(count: usize, threads: u32) -> Result<LaunchConfig> {
    let blocks = count.div_ceil(threads as usize).max(1);
    let blocks = u32::try_from(blocks)
        .map_err(|_| Error::Cuda(format!("{count} threads is too many for one launch")))?;
    Ok(LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    })
}

impl Gpu {
    /// Queues `args` with `cfg`, and counts the launch.
    ///
    /// # Safety
    /// The caller guarantees that the arguments match the kernel's parameters in number,
    /// order and type, and that every index the kernel computes from them is in bounds.
    pub(super) unsafe fn launch(
        &self,
        args: &mut LaunchArgs,
        cfg: LaunchConfig,
        kernel: &str,
    ) -> Result<()> {
        self.count_launch();
        // SAFETY: forwarded from this function's own contract (see above).
        unsafe { args.launch(cfg) }
            .map(|_| ())
            .cuda(&format!("launching {kernel}"))
    }

    // ANCHOR: embedding
    /// `out[i] = table[tokens[i]]`: `out` is `[n, dim]`, `table` `[vocab, dim]`.
    /// `tokens_dev` is device room for at least `n` ids, into which `tokens` is copied.
    /// CPU twin: the embedding loop of `Model::forward_hidden`.
    pub fn embedding(
        &self,
        out: &mut CudaViewMut<f32>,
        table: &GpuMatrix,
        tokens: &[u32],
        tokens_dev: &mut CudaViewMut<u32>,
    ) -> Result<()> {
        let (vocab, dim, n) = (table.rows, table.cols, tokens.len());
        check_nonzero("embedding", &[("tokens", n), ("dim", dim)])?;
        // Ids are checked here, on the host, so a bad one is an error naming it (the kernel
        // only turns it into a row of NaN).
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::TokenOutOfRange {
                id,
                vocab_size: vocab,
            });
        }
        check("embedding out", out.len(), n * dim)?;
        check("embedding token buffer", tokens_dev.len(), n)?;
        let mut ids = tokens_dev.slice_mut(..n);
        self.stream
            .memcpy_htod(tokens, &mut ids)
            .cuda("copying token ids")?;
        self.embedding_ids(out, table, &ids.as_view(), 1.0)
    }

    /// [`Gpu::embedding`] of ids already on the GPU (`ids`: `[n]`), checked by the caller
    /// against the vocabulary: the launch alone, which a CUDA graph can capture. Each row is
    /// multiplied by `scale`: 1 for Llama (exact), √dim for Gemma (`Config::embed_scale`).
    pub fn embedding_ids(
        &self,
        out: &mut CudaViewMut<f32>,
        table: &GpuMatrix,
        ids: &CudaView<u32>,
        scale: f32,
    ) -> Result<()> {
        let (vocab, dim, n) = (table.rows, table.cols, ids.len());
        check_nonzero("embedding", &[("tokens", n), ("dim", dim)])?;
        check("embedding out", out.len(), n * dim)?;
        let (n_i, dim_i, vocab_i) = (int("n", n)?, int("dim", dim)?, int("vocab", vocab)?);
        int("n * dim", n * dim)?;
        int("vocab * dim", vocab * dim)?;
        let mut b = match &table.data {
            WeightData::F32(_) => self.stream.launch_builder(&self.f.embedding_f32),
            WeightData::Bf16(_) => self.stream.launch_builder(&self.f.embedding_bf16),
        };
        b.arg(out);
        match &table.data {
            WeightData::F32(t) => b.arg(t),
            WeightData::Bf16(t) => b.arg(t),
        };
        b.arg(ids).arg(&n_i).arg(&dim_i).arg(&vocab_i).arg(&scale);
        // SAFETY: embedding_{f32,bf16}(out, table, tokens, n, dim, vocab, scale) matches the kernel; it
        // touches out[..n*dim] (checked), tokens[..n] (`ids` is exactly n long) and
        // table[id*dim..][..dim] only for ids < vocab (the kernel checks each id; the table is
        // exactly vocab x dim).
        unsafe { self.launch(&mut b, one_thread_each(n * dim, 256)?, "embedding") }
    }
    // ANCHOR_END: embedding

    /// `out = x / rms(x) * weight`, per row; `x`, `out`: `[n, dim]`, `weight`: `[dim]`.
    /// CPU twin: `ops::rmsnorm`.
    pub fn rmsnorm(
        &self,
        out: &mut CudaViewMut<f32>,
        x: &CudaView<f32>,
        weight: &CudaView<f32>,
        eps: f32,
        n: usize,
    ) -> Result<()> {
        let dim = weight.len();
        check_nonzero("rmsnorm", &[("n", n), ("dim", dim)])?;
        check("rmsnorm x", x.len(), n * dim)?;
        check("rmsnorm out", out.len(), n * dim)?;
        let (n_i, dim_i) = (int("n", n)?, int("dim", dim)?);
        int("n * dim", n * dim)?;
        let mut b = self.stream.launch_builder(&self.f.rmsnorm);
        b.arg(out)
            .arg(x)
            .arg(weight)
            .arg(&eps)
            .arg(&n_i)
            .arg(&dim_i);
        let cfg = LaunchConfig {
            grid_dim: (n.max(1) as u32, 1, 1), // n fits in i32, so in u32
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: rmsnorm(out, x, weight, eps, n, dim) matches the kernel; block r < n touches
        // row r of x and out (both checked to hold n*dim) and weight[..dim] (dim = its length).
        unsafe { self.launch(&mut b, cfg, "rmsnorm") }
    }

    /// [`Gpu::rmsnorm`] of `x` into itself, `x`: `[n, dim]`, `weight`: `[dim]`: Gemma 3's
    /// QK-norm, where every head of every row is one row of `head_dim`. Same kernel body, so
    /// the same bits as `rmsnorm` into another buffer. CPU twin: `ops::rmsnorm`.
    pub fn rmsnorm_inplace(
        &self,
        x: &mut CudaViewMut<f32>,
        weight: &CudaView<f32>,
        eps: f32,
        n: usize,
    ) -> Result<()> {
        let dim = weight.len();
        check_nonzero("rmsnorm_inplace", &[("n", n), ("dim", dim)])?;
        check("rmsnorm_inplace x", x.len(), n * dim)?;
        let (n_i, dim_i) = (int("n", n)?, int("dim", dim)?);
        int("n * dim", n * dim)?;
        let mut b = self.stream.launch_builder(&self.f.rmsnorm_inplace);
        b.arg(x).arg(weight).arg(&eps).arg(&n_i).arg(&dim_i);
        let cfg = LaunchConfig {
            grid_dim: (n.max(1) as u32, 1, 1), // n fits in i32, so in u32
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: rmsnorm_inplace(x, weight, eps, n, dim) matches the kernel; block r < n
        // touches row r of x (checked to hold n*dim) and weight[..dim] (dim = its length).
        unsafe { self.launch(&mut b, cfg, "rmsnorm_inplace") }
    }

    // ANCHOR: matmul
    /// `out = x · w`: `x` is `[n, d_in]`, `w` `[d_in, d_out]`, `out` `[n, d_out]`.
    /// CPU twin: `ops::matmul`.
    pub fn matmul(
        &self,
        out: &mut CudaViewMut<f32>,
        x: &CudaView<f32>,
        w: &GpuMatrix,
        n: usize,
        version: MatmulVersion,
    ) -> Result<()> {
        let (d_in, d_out) = (w.rows, w.cols);
        check_nonzero("matmul", &[("n", n), ("d_in", d_in), ("d_out", d_out)])?;
        check("matmul x", x.len(), n * d_in)?;
        check("matmul out", out.len(), n * d_out)?;
        let (n_i, d_in_i, d_out_i) = (int("n", n)?, int("d_in", d_in)?, int("d_out", d_out)?);
        let f = match (version, &w.data) {
            (MatmulVersion::V1, WeightData::F32(_)) => &self.f.matmul_v1_f32,
            (MatmulVersion::V1, WeightData::Bf16(_)) => &self.f.matmul_v1_bf16,
            (MatmulVersion::V2, WeightData::F32(_)) => &self.f.matmul_v2_f32,
            (MatmulVersion::V2, WeightData::Bf16(_)) => &self.f.matmul_v2_bf16,
            (MatmulVersion::V3, WeightData::F32(_)) => &self.f.matmul_v3_f32,
            (MatmulVersion::V3, WeightData::Bf16(_)) => &self.f.matmul_v3_bf16,
        };
        let cfg = match version {
            MatmulVersion::V1 => one_thread_each(n * d_out, 256)?,
            MatmulVersion::V2 => {
                const TILE: usize = 16; // TILE in matmul.cu
                if n.div_ceil(TILE) > 65535 {
                    return Err(Error::Cuda(format!(
                        "matmul v2 takes at most {} rows per launch, got {n}",
                        65535 * TILE
                    )));
                }
                LaunchConfig {
                    grid_dim: (d_out.div_ceil(TILE) as u32, n.div_ceil(TILE) as u32, 1),
                    block_dim: (TILE as u32, TILE as u32, 1),
                    shared_mem_bytes: 0,
                }
            }
            MatmulVersion::V3 => {
                const COLS: usize = 8; // V3_COLS in matmul.cu; 32 slices of k, 256 threads
                LaunchConfig {
                    // Rows past 65535 (grid y's limit) are walked by the blocks' row loop.
                    grid_dim: (d_out.div_ceil(COLS) as u32, n.min(65535) as u32, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                }
            }
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(out).arg(x);
        match &w.data {
            WeightData::F32(data) => b.arg(data),
            WeightData::Bf16(data) => b.arg(data),
        };
        b.arg(&n_i).arg(&d_in_i).arg(&d_out_i);
        // SAFETY: matmul_v{1,2,3}_{f32,bf16}(out, x, w, n, d_in, d_out) matches the kernel picked
        // for this weight type; it touches x[..n*d_in] and out[..n*d_out] (both checked) and
        // w[..d_in*d_out] (a GpuMatrix holds exactly rows*cols values).
        unsafe { self.launch(&mut b, cfg, "matmul") }
    }
    // ANCHOR_END: matmul

    /// Rotates the queries `[n, n_heads, head_dim]` and keys `[n, n_kv_heads, head_dim]` of
    /// positions `start_pos..start_pos + n`, in place. CPU twin: `ops::apply_rope`.
    pub fn rope(
        &self,
        q: &mut CudaViewMut<f32>,
        k: &mut CudaViewMut<f32>,
        tables: &RopeTables,
        n: usize,
        heads: Heads,
        start_pos: usize,
    ) -> Result<()> {
        let Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        } = heads;
        check_heads("rope", heads)?;
        check_nonzero("rope", &[("n", n)])?;
        check("rope q", q.len(), n * n_heads * head_dim)?;
        check("rope k", k.len(), n * n_kv_heads * head_dim)?;
        if tables.half * 2 != head_dim || start_pos + n > tables.positions {
            return Err(Error::Cuda(format!(
                "internal: RoPE tables cover {} positions of head_dim {}, asked for positions {start_pos}..{} of head_dim {head_dim}",
                tables.positions,
                tables.half * 2,
                start_pos + n
            )));
        }
        let threads = n * (n_heads + n_kv_heads) * (head_dim / 2);
        int("rope threads", threads)?;
        int("rope table size", tables.positions * tables.half)?;
        let (n_i, nh_i, nkv_i) = (
            int("n", n)?,
            int("n_heads", n_heads)?,
            int("n_kv_heads", n_kv_heads)?,
        );
        let (hd_i, sp_i) = (int("head_dim", head_dim)?, int("start_pos", start_pos)?);
        let mut b = self.stream.launch_builder(&self.f.rope);
        b.arg(q).arg(k).arg(&tables.cos).arg(&tables.sin);
        b.arg(&n_i).arg(&nh_i).arg(&nkv_i).arg(&hd_i).arg(&sp_i);
        // SAFETY: rope(q, k, cos, sin, n, n_heads, n_kv_heads, head_dim, start_pos) matches the
        // kernel; it touches q[..n*n_heads*head_dim] and k[..n*n_kv_heads*head_dim] (checked)
        // and table entries below (start_pos + n) * head_dim/2 (checked against the tables).
        unsafe { self.launch(&mut b, one_thread_each(threads, 256)?, "rope") }
    }

    /// `x += y` over the first `count` elements: the residual connection. CPU twin: `ops::add_inplace`.
    pub fn add_inplace(
        &self,
        x: &mut CudaViewMut<f32>,
        y: &CudaView<f32>,
        count: usize,
    ) -> Result<()> {
        check_nonzero("add_inplace", &[("count", count)])?;
        check("add x", x.len(), count)?;
        check("add y", y.len(), count)?;
        let count_i = int("count", count)?;
        let mut b = self.stream.launch_builder(&self.f.add_inplace);
        b.arg(x).arg(y).arg(&count_i);
        // SAFETY: add_inplace(x, y, count) matches the kernel; it touches x, y[..count] (checked).
        unsafe { self.launch(&mut b, one_thread_each(count, 256)?, "add_inplace") }
    }

    /// `x[r] += bias` for each of `rows` rows of `x` (`[rows, width]`). CPU twin: `ops::add_bias`.
    pub fn add_bias(
        &self,
        x: &mut CudaViewMut<f32>,
        bias: &CudaView<f32>,
        rows: usize,
    ) -> Result<()> {
        let width = bias.len();
        check_nonzero("add_bias", &[("rows", rows), ("width", width)])?;
        check("add_bias x", x.len(), rows * width)?;
        let (rows_i, width_i) = (int("rows", rows)?, int("width", width)?);
        int("rows * width", rows * width)?;
        let mut b = self.stream.launch_builder(&self.f.add_bias);
        b.arg(x).arg(bias).arg(&rows_i).arg(&width_i);
        // SAFETY: add_bias(x, bias, rows, width) matches the kernel; it touches x[..rows*width]
        // (checked) and bias[..width] (width = its length).
        unsafe { self.launch(&mut b, one_thread_each(rows * width, 256)?, "add_bias") }
    }

    /// `gate = silu(gate) * up` over `count` elements. CPU twin: `ops::swiglu`.
    pub fn swiglu(
        &self,
        gate: &mut CudaViewMut<f32>,
        up: &CudaView<f32>,
        count: usize,
    ) -> Result<()> {
        self.gated(Activation::Silu, gate, up, count)
    }

    /// `gate = act(gate) * up` over `count` elements: SwiGLU (Llama) or GeGLU (Gemma, GELU's
    /// tanh approximation). CPU twins: `ops::swiglu`, `ops::geglu`.
    pub fn gated(
        &self,
        activation: Activation,
        gate: &mut CudaViewMut<f32>,
        up: &CudaView<f32>,
        count: usize,
    ) -> Result<()> {
        let (f, name) = match activation {
            Activation::Silu => (&self.f.swiglu, "swiglu"),
            Activation::GeluTanh => (&self.f.geglu, "geglu"),
        };
        check_nonzero(name, &[("count", count)])?;
        check(name, gate.len(), count)?;
        check(name, up.len(), count)?;
        let count_i = int("count", count)?;
        let mut b = self.stream.launch_builder(f);
        b.arg(gate).arg(up).arg(&count_i);
        // SAFETY: swiglu and geglu(gate, up, count) match the kernels; each touches gate,
        // up[..count] (checked).
        unsafe { self.launch(&mut b, one_thread_each(count, 256)?, name) }
    }

    /// The index of the largest of `x`'s values, lowest index on ties, written to `out[0]`.
    /// CPU twin: `ops::argmax`.
    pub fn argmax(&self, out: &mut CudaViewMut<u32>, x: &CudaView<f32>) -> Result<()> {
        check_nonzero("argmax", &[("count", x.len())])?;
        check("argmax out", out.len(), 1)?;
        let count_i = int("count", x.len())?;
        let mut b = self.stream.launch_builder(&self.f.argmax);
        b.arg(out).arg(x).arg(&count_i);
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1024, 1, 1), // THREADS in argmax.cu
            shared_mem_bytes: 0,
        };
        // SAFETY: argmax(out, x, count) matches the kernel; it reads x[..count] (count = its
        // length) and writes out[0] (checked).
        unsafe { self.launch(&mut b, cfg, "argmax") }
    }
}
