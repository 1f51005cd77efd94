//! The forward pass's operations on the GPU: one safe function per kernel, each named after
//! its CPU twin in src/ops.rs, src/attention.rs or src/kv_cache.rs.
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
}

/// Which attention kernel (`kernels/attention.cu`) the forward pass uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionVersion {
    /// One thread per (query row, head): the CPU code, ported line by line.
    V1,
    /// One block per (query row, head), online softmax.
    V2,
}

/// The largest head the attention kernels take (`MAX_HEAD_DIM` in attention.cu).
pub const MAX_HEAD_DIM: usize = 256;

/// An error unless `len >= needed`: the bounds check in front of every launch.
fn check(what: &str, len: usize, needed: usize) -> Result<()> {
    if len < needed {
        return Err(Error::Cuda(format!(
            "internal: {what} holds {len} values, but the kernel would touch {needed}"
        )));
    }
    Ok(())
}

/// The head shapes the attention kernels take: KV heads dividing the query heads, and
/// heads no larger than the kernels' per-lane arrays.
fn check_heads(what: &str, heads: Heads) -> Result<()> {
    let Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    } = heads;
    if n_kv_heads == 0 || n_heads % n_kv_heads != 0 || head_dim > MAX_HEAD_DIM {
        return Err(Error::Cuda(format!(
            "{what} needs n_heads divisible by n_kv_heads and head_dim <= {MAX_HEAD_DIM}: got {n_heads}, {n_kv_heads}, {head_dim}"
        )));
    }
    Ok(())
}

/// `v` as the kernels' `int`, or an error if it does not fit.
fn int(what: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| {
        Error::Cuda(format!(
            "{what} = {v} is too large for the kernels' 32-bit sizes"
        ))
    })
}

/// A 1-D launch of `count` threads in blocks of `threads`.
fn one_thread_each(count: usize, threads: u32) -> Result<LaunchConfig> {
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
    unsafe fn launch(&self, args: &mut LaunchArgs, cfg: LaunchConfig, kernel: &str) -> Result<()> {
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
        // Ids are checked here, on the host: the kernel would read any row it is told to.
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
        let (n_i, dim_i) = (int("n", n)?, int("dim", dim)?);
        int("n * dim", n * dim)?;
        let mut b = match &table.data {
            WeightData::F32(_) => self.stream.launch_builder(&self.f.embedding_f32),
            WeightData::Bf16(_) => self.stream.launch_builder(&self.f.embedding_bf16),
        };
        b.arg(out);
        match &table.data {
            WeightData::F32(t) => b.arg(t),
            WeightData::Bf16(t) => b.arg(t),
        };
        let ids = ids.as_view();
        b.arg(&ids).arg(&n_i).arg(&dim_i);
        // SAFETY: embedding_{f32,bf16}(out, table, tokens, n, dim) matches the kernel; it
        // touches out[..n*dim] (checked), tokens[..n] (`ids` is exactly n long) and
        // table[id*dim..][..dim] for ids checked < vocab, with table exactly vocab x dim.
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
        check("matmul x", x.len(), n * d_in)?;
        check("matmul out", out.len(), n * d_out)?;
        let (n_i, d_in_i, d_out_i) = (int("n", n)?, int("d_in", d_in)?, int("d_out", d_out)?);
        let f = match (version, &w.data) {
            (MatmulVersion::V1, WeightData::F32(_)) => &self.f.matmul_v1_f32,
            (MatmulVersion::V1, WeightData::Bf16(_)) => &self.f.matmul_v1_bf16,
            (MatmulVersion::V2, WeightData::F32(_)) => &self.f.matmul_v2_f32,
            (MatmulVersion::V2, WeightData::Bf16(_)) => &self.f.matmul_v2_bf16,
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
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(out).arg(x);
        match &w.data {
            WeightData::F32(data) => b.arg(data),
            WeightData::Bf16(data) => b.arg(data),
        };
        b.arg(&n_i).arg(&d_in_i).arg(&d_out_i);
        // SAFETY: matmul_v{1,2}_{f32,bf16}(out, x, w, n, d_in, d_out) matches the kernel picked
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

    // ANCHOR: kv_append
    /// Writes the keys and values of `n` new positions (`k`, `v`: `[n, kv_dim]`, so
    /// `n = k.len() / kv_dim`) into layer `layer` of the caches (`[n_layers, capacity, kv_dim]`)
    /// at rows `start_pos..start_pos + n`. CPU twin: `PreallocatedCache::write`.
    #[allow(clippy::too_many_arguments)]
    pub fn kv_append(
        &self,
        k_cache: &mut CudaViewMut<f32>,
        v_cache: &mut CudaViewMut<f32>,
        k: &CudaView<f32>,
        v: &CudaView<f32>,
        kv_dim: usize,
        layer: usize,
        capacity: usize,
        start_pos: usize,
    ) -> Result<()> {
        let n = k.len() / kv_dim.max(1);
        if kv_dim == 0 || k.len() != n * kv_dim || v.len() != k.len() {
            return Err(Error::Cuda(format!(
                "internal: kv_append wants k and v of equal length, whole rows of {kv_dim}; got {} and {}",
                k.len(),
                v.len()
            )));
        }
        if start_pos + n > capacity {
            return Err(Error::Cuda(format!(
                "internal: kv_append past the cache's capacity ({start_pos} + {n} > {capacity})"
            )));
        }
        let needed = (layer + 1) * capacity * kv_dim;
        check("kv_append k_cache", k_cache.len(), needed)?;
        check("kv_append v_cache", v_cache.len(), needed)?;
        int("cache size", needed)?;
        let (l_i, cap_i, sp_i, n_i, kvd_i) = (
            int("layer", layer)?,
            int("capacity", capacity)?,
            int("start_pos", start_pos)?,
            int("n", n)?,
            int("kv_dim", kv_dim)?,
        );
        let mut b = self.stream.launch_builder(&self.f.kv_append);
        b.arg(k_cache).arg(v_cache).arg(k).arg(v);
        b.arg(&l_i).arg(&cap_i).arg(&sp_i).arg(&n_i).arg(&kvd_i);
        // SAFETY: kv_append(k_cache, v_cache, k, v, layer, capacity, start_pos, n, kv_dim) matches
        // the kernel; it reads k, v[..n*kv_dim] (their exact lengths, checked) and writes cache
        // elements below (layer*capacity + start_pos + n) * kv_dim <= (layer+1)*capacity*kv_dim
        // (both checked).
        unsafe { self.launch(&mut b, one_thread_each(n * kv_dim, 256)?, "kv_append") }
    }
    // ANCHOR_END: kv_append

    // ANCHOR: attention
    /// Causal attention of `n` queries at positions `start_pos..start_pos + n` over keys and
    /// values of positions `0..start_pos + n`.
    /// `q`, `out`: `[n, n_heads, head_dim]`; `keys`, `values`: `[start_pos + n, n_kv_heads, head_dim]`
    /// (or more rows: a whole cache layer; rows past `start_pos + n` are never read).
    /// CPU twin: `attention::causal_attention`.
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        out: &mut CudaViewMut<f32>,
        q: &CudaView<f32>,
        keys: &CudaView<f32>,
        values: &CudaView<f32>,
        n: usize,
        start_pos: usize,
        heads: Heads,
        version: AttentionVersion,
    ) -> Result<()> {
        let Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        } = heads;
        check_heads("attention", heads)?;
        let q_len = n * n_heads * head_dim;
        let kv_len = (start_pos + n) * n_kv_heads * head_dim;
        check("attention q", q.len(), q_len)?;
        check("attention out", out.len(), q_len)?;
        check("attention keys", keys.len(), kv_len)?;
        check("attention values", values.len(), kv_len)?;
        int("attention q size", q_len)?;
        int("attention kv size", kv_len)?;
        let (n_i, sp_i, nh_i, nkv_i, hd_i) = (
            int("n", n)?,
            int("start_pos", start_pos)?,
            int("n_heads", n_heads)?,
            int("n_kv_heads", n_kv_heads)?,
            int("head_dim", head_dim)?,
        );
        let (f, cfg) = match version {
            AttentionVersion::V1 => (&self.f.attention_v1, one_thread_each(n * n_heads, 128)?),
            AttentionVersion::V2 => {
                if n > 65535 {
                    return Err(Error::Cuda(format!(
                        "attention v2 takes at most 65535 queries per launch, got {n}"
                    )));
                }
                let cfg = LaunchConfig {
                    grid_dim: (n_heads as u32, n as u32, 1),
                    block_dim: (128, 1, 1), // WARPS * 32 in attention.cu
                    shared_mem_bytes: 0,
                };
                (&self.f.attention_v2, cfg)
            }
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(out).arg(q).arg(keys).arg(values);
        b.arg(&n_i).arg(&sp_i).arg(&nh_i).arg(&nkv_i).arg(&hd_i);
        // SAFETY: attention_v{1,2}(out, q, keys, values, n, start_pos, n_heads, n_kv_heads,
        // head_dim) matches the kernel; it touches q and out below n*n_heads*head_dim, keys and
        // values below (start_pos+n)*n_kv_heads*head_dim (all checked), reads KV head
        // h / (n_heads / n_kv_heads) < n_kv_heads (divisibility checked), and v2's per-lane
        // arrays hold MAX_HEAD_DIM >= head_dim (checked).
        unsafe { self.launch(&mut b, cfg, "attention") }
    }
    // ANCHOR_END: attention

    // ANCHOR: attention_paged
    /// Attention reading one layer's keys and values through a block table
    /// (PagedAttention, Kwon et al. 2023): position `j` is row `j % block_size` of block
    /// `block_table[j / block_size]` of `k_pool`/`v_pool` (`[n_blocks, block_size,
    /// n_kv_heads, head_dim]`). The kernel is v2's body with another address, so it gives the
    /// bits v2 gives on the same rows stored contiguously. The table is checked here, on the
    /// host, then copied to the GPU. CPU twin: `attention::attention_over` with `attention::Paged`.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_paged(
        &self,
        out: &mut CudaViewMut<f32>,
        q: &CudaView<f32>,
        k_pool: &CudaView<f32>,
        v_pool: &CudaView<f32>,
        block_table: &[u32],
        block_size: usize,
        n: usize,
        start_pos: usize,
        heads: Heads,
    ) -> Result<()> {
        let Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        } = heads;
        check_heads("paged attention", heads)?;
        let block_floats = block_size * n_kv_heads * head_dim;
        if block_size == 0 || k_pool.len() % block_floats != 0 || k_pool.len() != v_pool.len() {
            return Err(Error::Cuda(format!(
                "paged attention: pools of {} and {} floats are not whole blocks of {block_size} positions x {} floats",
                k_pool.len(),
                v_pool.len(),
                n_kv_heads * head_dim
            )));
        }
        let n_blocks = k_pool.len() / block_floats;
        if block_table.len() * block_size < start_pos + n {
            return Err(Error::Cuda(format!(
                "paged attention: a table of {} blocks of {block_size} holds {} positions, {} are read",
                block_table.len(),
                block_table.len() * block_size,
                start_pos + n
            )));
        }
        if let Some(bad) = block_table.iter().find(|&&b| b as usize >= n_blocks) {
            return Err(Error::Cuda(format!(
                "paged attention: block {bad} in the table, but the pool has {n_blocks} blocks"
            )));
        }
        if n > 65535 {
            return Err(Error::Cuda(format!(
                "paged attention takes at most 65535 queries per launch, got {n}"
            )));
        }
        let q_len = n * n_heads * head_dim;
        check("paged attention q", q.len(), q_len)?;
        check("paged attention out", out.len(), q_len)?;
        int("paged attention pool size", k_pool.len())?;
        int("paged attention q size", q_len)?;
        let table: Vec<i32> = block_table
            .iter()
            .map(|&b| int("block id", b as usize))
            .collect::<Result<_>>()?;
        let table = self.upload(&table)?;
        let (bs_i, n_i, sp_i, nh_i, nkv_i, hd_i) = (
            int("block_size", block_size)?,
            int("n", n)?,
            int("start_pos", start_pos)?,
            int("n_heads", n_heads)?,
            int("n_kv_heads", n_kv_heads)?,
            int("head_dim", head_dim)?,
        );
        let cfg = LaunchConfig {
            grid_dim: (n_heads as u32, n as u32, 1),
            block_dim: (128, 1, 1), // WARPS * 32 in attention.cu
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.f.attention_paged);
        b.arg(out).arg(q).arg(k_pool).arg(v_pool).arg(&table);
        b.arg(&bs_i)
            .arg(&n_i)
            .arg(&sp_i)
            .arg(&nh_i)
            .arg(&nkv_i)
            .arg(&hd_i);
        // SAFETY: attention_paged(out, q, k_pool, v_pool, block_table, block_size, n, start_pos,
        // n_heads, n_kv_heads, head_dim) matches the kernel. It reads table entries below
        // (start_pos+n)/block_size+1 <= block_table.len() (checked), each a block id below
        // n_blocks (checked), so every pool row it reads is inside k_pool/v_pool (whole blocks,
        // checked); q and out below n*n_heads*head_dim (checked); KV head h / kv_mul <
        // n_kv_heads (divisibility checked); head_dim <= MAX_HEAD_DIM (checked).
        unsafe { self.launch(&mut b, cfg, "attention_paged") }
    }
    // ANCHOR_END: attention_paged

    /// `x += y` over the first `count` elements: the residual connection. CPU twin: `ops::add_inplace`.
    pub fn add_inplace(
        &self,
        x: &mut CudaViewMut<f32>,
        y: &CudaView<f32>,
        count: usize,
    ) -> Result<()> {
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
        check("swiglu gate", gate.len(), count)?;
        check("swiglu up", up.len(), count)?;
        let count_i = int("count", count)?;
        let mut b = self.stream.launch_builder(&self.f.swiglu);
        b.arg(gate).arg(up).arg(&count_i);
        // SAFETY: swiglu(gate, up, count) matches the kernel; it touches gate, up[..count] (checked).
        unsafe { self.launch(&mut b, one_thread_each(count, 256)?, "swiglu") }
    }

    /// The index of the largest of `x`'s values, lowest index on ties, written to `out[0]`.
    /// CPU twin: `ops::argmax`.
    pub fn argmax(&self, out: &mut CudaViewMut<u32>, x: &CudaView<f32>) -> Result<()> {
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
