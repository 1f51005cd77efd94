//! The attention side of the GPU forward pass: writing new keys and values into the cache,
//! and attention over it (contiguous, and through a block table: PagedAttention). One safe
//! function per kernel (kernels/kv_append.cu, kernels/attention.cu), each checking every
//! buffer against what its kernel touches before the `unsafe` launch, as in `ops.rs`.
//! CPU twins: `PreallocatedCache::write` and `attention::attention_over`.

use super::gpu::CudaContextExt;
use super::gpu::Gpu;
use super::ops::{
    check, check_heads, check_nonzero, int, one_thread_each, window_arg, AttentionVersion,
};
use crate::attention::Heads;
use crate::cache::paged::BlockId;
use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, LaunchConfig, PushKernelArg};

impl Gpu {
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
        check_nonzero(
            "kv_append",
            &[("kv_dim", kv_dim), ("new positions", k.len())],
        )?;
        let n = k.len() / kv_dim;
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
    /// values of positions `0..start_pos + n` (a query at `pos` over the last `window` of them
    /// when `window` is set: a local layer).
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
        window: Option<usize>,
    ) -> Result<()> {
        let Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        } = heads;
        check_heads("attention", heads)?;
        check_nonzero("attention", &[("n", n)])?;
        let q_len = n * n_heads * head_dim;
        let kv_len = (start_pos + n) * n_kv_heads * head_dim;
        check("attention q", q.len(), q_len)?;
        check("attention out", out.len(), q_len)?;
        check("attention keys", keys.len(), kv_len)?;
        check("attention values", values.len(), kv_len)?;
        int("attention q size", q_len)?;
        int("attention kv size", kv_len)?;
        let (n_i, sp_i, nh_i, nkv_i, hd_i, w_i) = (
            int("n", n)?,
            int("start_pos", start_pos)?,
            int("n_heads", n_heads)?,
            int("n_kv_heads", n_kv_heads)?,
            int("head_dim", head_dim)?,
            window_arg(window)?,
        );
        let (f, cfg) =
            match version {
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
                AttentionVersion::V3 => return Err(Error::Cuda(
                    "internal: attention v3 reads its position from the GPU and needs scratch: \
                     call Gpu::attention_v3"
                        .into(),
                )),
            };
        let mut b = self.stream.launch_builder(f);
        b.arg(out).arg(q).arg(keys).arg(values);
        b.arg(&n_i)
            .arg(&sp_i)
            .arg(&nh_i)
            .arg(&nkv_i)
            .arg(&hd_i)
            .arg(&w_i);
        // SAFETY: attention_v{1,2}(out, q, keys, values, n, start_pos, n_heads, n_kv_heads,
        // head_dim, window) matches the kernel; it touches q and out below n*n_heads*head_dim,
        // keys and values below (start_pos+n)*n_kv_heads*head_dim (all checked; a window only
        // raises the first key it reads), reads KV head
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
    /// host, then copied to the GPU. CPU twin: `attention::attention_over` with `cache::rows::Paged`.
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
        window: Option<usize>,
    ) -> Result<()> {
        let n_blocks = pool_blocks(k_pool, v_pool, block_size, heads)?;
        let ids: Vec<BlockId> = block_table.iter().map(|&b| b as BlockId).collect();
        let mut table = GpuBlockTable::new(self, ids.len(), n_blocks)?;
        table.update(self, &ids)?;
        let pools = (k_pool, v_pool);
        let at = (n, start_pos, window);
        self.attention_paged_on(out, q, pools, &table, block_size, at, heads)
    }

    /// [`Gpu::attention_paged`] with the block table already on the GPU (generation keeps
    /// one per sequence, [`GpuBlockTable`], and copies it only when a block joins it).
    /// `(n, start_pos, window)`: the queries, the first one's position, a local layer's window.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_paged_on(
        &self,
        out: &mut CudaViewMut<f32>,
        q: &CudaView<f32>,
        (k_pool, v_pool): (&CudaView<f32>, &CudaView<f32>),
        table: &GpuBlockTable,
        block_size: usize,
        (n, start_pos, window): (usize, usize, Option<usize>),
        heads: Heads,
    ) -> Result<()> {
        let Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        } = heads;
        check_heads("paged attention", heads)?;
        check_nonzero("paged attention", &[("n", n)])?;
        let n_blocks = pool_blocks(k_pool, v_pool, block_size, heads)?;
        if table.n_blocks != n_blocks {
            return Err(Error::Cuda(format!(
                "paged attention: the block table was checked against a pool of {} blocks, this pool has {n_blocks}",
                table.n_blocks
            )));
        }
        let positions = start_pos.saturating_add(n);
        if table.len.saturating_mul(block_size) < positions {
            return Err(Error::Cuda(format!(
                "paged attention: a table of {} blocks of {block_size} holds {} positions, {positions} are read",
                table.len,
                table.len * block_size,
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
        let (bs_i, n_i, sp_i, nh_i, nkv_i, hd_i, w_i) = (
            int("block_size", block_size)?,
            int("n", n)?,
            int("start_pos", start_pos)?,
            int("n_heads", n_heads)?,
            int("n_kv_heads", n_kv_heads)?,
            int("head_dim", head_dim)?,
            window_arg(window)?,
        );
        let cfg = LaunchConfig {
            grid_dim: (n_heads as u32, n as u32, 1),
            block_dim: (128, 1, 1), // WARPS * 32 in attention.cu
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.f.attention_paged);
        b.arg(out).arg(q).arg(k_pool).arg(v_pool).arg(&table.ids);
        b.arg(&bs_i)
            .arg(&n_i)
            .arg(&sp_i)
            .arg(&nh_i)
            .arg(&nkv_i)
            .arg(&hd_i)
            .arg(&w_i);
        // SAFETY: attention_paged(out, q, k_pool, v_pool, block_table, block_size, n, start_pos,
        // n_heads, n_kv_heads, head_dim, window) matches the kernel. It reads table entries below
        // (start_pos+n)/block_size+1 <= table.len (checked; a window only raises the first), each a block id below n_blocks
        // (GpuBlockTable::update checks every id it copies, against this pool's count:
        // checked above), so every pool row it reads is inside k_pool/v_pool (whole blocks,
        // checked); q and out below n*n_heads*head_dim (checked); KV head h / kv_mul <
        // n_kv_heads (divisibility checked); head_dim <= MAX_HEAD_DIM (checked).
        unsafe { self.launch(&mut b, cfg, "attention_paged") }
    }
    // ANCHOR_END: attention_paged
}

/// Blocks in a pool of `block_size` positions per block (`[n_blocks, block_size, n_kv_heads,
/// head_dim]`), or an error when the pools are not whole, equal blocks.
fn pool_blocks(
    k_pool: &CudaView<f32>,
    v_pool: &CudaView<f32>,
    block_size: usize,
    heads: Heads,
) -> Result<usize> {
    let block_floats = block_size * heads.n_kv_heads * heads.head_dim;
    if block_floats == 0 || k_pool.len() % block_floats != 0 || k_pool.len() != v_pool.len() {
        return Err(Error::Cuda(format!(
            "paged attention: pools of {} and {} floats are not whole blocks of {block_size} positions x {} floats",
            k_pool.len(),
            v_pool.len(),
            heads.n_kv_heads * heads.head_dim
        )));
    }
    Ok(k_pool.len() / block_floats)
}

// ANCHOR: gpu_block_table
/// One sequence's block table in GPU memory, room for `capacity` entries. Every id it
/// holds was checked below `n_blocks` when it was copied, which is what lets
/// [`Gpu::attention_paged_on`] launch without reading the table back.
pub struct GpuBlockTable {
    /// `[capacity]` block ids; the first `len` are the table.
    ids: CudaSlice<i32>,
    len: usize,
    /// The pool the ids index.
    n_blocks: usize,
}

impl GpuBlockTable {
    /// An empty table of up to `capacity` blocks of a pool of `n_blocks`.
    pub fn new(gpu: &Gpu, capacity: usize, n_blocks: usize) -> Result<GpuBlockTable> {
        Ok(GpuBlockTable {
            ids: gpu.zeros(capacity.max(1))?,
            len: 0,
            n_blocks,
        })
    }

    /// Copies `table` (what the pool's block manager decided, `cache::paged`) to the GPU.
    pub fn update(&mut self, gpu: &Gpu, table: &[BlockId]) -> Result<()> {
        if table.len() > self.ids.len() {
            return Err(Error::Cuda(format!(
                "internal: a block table of {} entries in room for {}",
                table.len(),
                self.ids.len()
            )));
        }
        if let Some(bad) = table.iter().find(|&&b| b >= self.n_blocks) {
            return Err(Error::Cuda(format!(
                "paged attention: block {bad} in the table, but the pool has {} blocks",
                self.n_blocks
            )));
        }
        let ids: Vec<i32> = table
            .iter()
            .map(|&b| int("block id", b))
            .collect::<Result<_>>()?;
        if !ids.is_empty() {
            gpu.stream
                .memcpy_htod(&ids, &mut self.ids.slice_mut(..ids.len()))
                .cuda("copying a block table")?;
        }
        self.len = ids.len();
        Ok(())
    }

    /// Entries in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
// ANCHOR_END: gpu_block_table
