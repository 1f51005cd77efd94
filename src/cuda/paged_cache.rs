//! The paged KV cache in GPU memory (`--device cuda --cache paged`): the CPU's block
//! manager decides, the GPU stores.
//!
//! Which block each position goes in is decided by the very code the CPU's paged cache
//! runs (src/cache/paged/: take a block at each boundary crossed, give blocks back on a
//! rollback), here over a pool that only counts ([`PagedSeq::single_counting`]). The
//! blocks' keys and values live in GPU memory, `[n_layers, n_blocks, block_size, kv_dim]`
//! like the CPU's pool, and attention reads them through the sequence's block table
//! (kernels/attention.cu, `attention_paged`: v2's body with another address). So a paged
//! pass gives the bits of an attention-v2 pass over a contiguous cache, and its blocks are
//! the ones the CPU's pool would have chosen: `tests/cuda_paths.rs` checks both.

use super::gpu::Gpu;
use super::ops_attention::GpuBlockTable;
use crate::attention::Heads;
use crate::cache::element::KvElement;
use crate::cache::paged::{blocks_for_positions, PagedCache, PagedSeq};
use crate::cache::KvStore;
use crate::config::Config;
use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};

// ANCHOR: gpu_paged_cache
/// One sequence's paged KV cache: block tables from the CPU's pool logic, blocks on the GPU.
pub struct GpuPagedCache {
    /// The block manager: which blocks the sequence holds, in order (no K or V inside).
    blocks: PagedSeq<PagedCache>,
    /// `[n_layers, n_blocks, block_size, kv_dim]`
    k_pool: CudaSlice<f32>,
    /// `[n_layers, n_blocks, block_size, kv_dim]`
    v_pool: CudaSlice<f32>,
    /// The sequence's block table, copied to the GPU whenever a pass changes it.
    table: GpuBlockTable,
    n_blocks: usize,
    block_size: usize,
    /// `n_kv_heads * head_dim`: one position of one layer.
    kv_dim: usize,
}
// ANCHOR_END: gpu_paged_cache

impl GpuPagedCache {
    /// A pool of blocks of `block_size` positions, enough for `capacity` positions.
    pub fn new(
        gpu: &Gpu,
        config: &Config,
        block_size: usize,
        capacity: usize,
    ) -> Result<GpuPagedCache> {
        if block_size == 0 {
            return Err(Error::InvalidArgument(
                "the block size must be at least 1 position: pass --block-size 16".into(),
            ));
        }
        let n_blocks = blocks_for_positions(capacity, block_size).max(1);
        let blocks = PagedSeq::single_counting(config, KvElement::F32, block_size, n_blocks)?;
        let kv_dim = config.n_kv_heads() * config.head_dim();
        let floats = [config.num_hidden_layers, n_blocks, block_size, kv_dim]
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| Error::OutOfMemory {
                what: "the GPU's paged KV cache".into(),
                bytes: u128::MAX,
            })?;
        Ok(GpuPagedCache {
            blocks,
            k_pool: gpu.zeros(floats)?,
            v_pool: gpu.zeros(floats)?,
            table: GpuBlockTable::new(gpu, n_blocks, n_blocks)?,
            n_blocks,
            block_size,
            kv_dim,
        })
    }

    /// Positions filled.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Positions the pool holds: its blocks times their size.
    pub fn capacity(&self) -> usize {
        self.n_blocks * self.block_size
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The sequence's blocks, in position order (as the CPU's `PagedCache::block_table`).
    pub fn block_table(&self) -> &[usize] {
        let cache = self.blocks.cache();
        cache.block_table(self.blocks.id()).unwrap_or(&[])
    }

    /// Takes the blocks `tokens` need from the pool, all or nothing (the pool's one-line
    /// error when it cannot), and copies the new table to the GPU.
    pub fn prepare(&mut self, gpu: &Gpu, tokens: &[u32]) -> Result<()> {
        self.blocks.prepare(tokens)?;
        let table = self.block_table().to_vec();
        self.table.update(gpu, &table)
    }

    /// Writes layer `layer`'s K and V of the `n` prepared positions (`[n, kv_dim]` each):
    /// one copy per block the new positions touch (a decode step touches one).
    pub fn write(
        &mut self,
        gpu: &Gpu,
        layer: usize,
        k: &CudaView<f32>,
        v: &CudaView<f32>,
        n: usize,
    ) -> Result<()> {
        let (bs, kv_dim, len) = (self.block_size, self.kv_dim, self.len());
        let table = self
            .blocks
            .cache()
            .block_table(self.blocks.id())
            .unwrap_or(&[]);
        if len + n > table.len() * bs {
            return Err(Error::Internal(format!(
                "writing {n} positions after {len} into {} blocks: call prepare first",
                table.len()
            )));
        }
        // A layer of the pool is a cache of n_blocks * block_size rows in block order, so
        // kv_append writes a block's run at row `block * block_size + row`.
        let layer_rows = self.n_blocks * bs;
        let mut done = 0;
        while done < n {
            let pos = len + done;
            let (block, row) = (table[pos / bs], pos % bs);
            let run = (bs - row).min(n - done);
            let rows = done * kv_dim..(done + run) * kv_dim;
            let (Some(k_run), Some(v_run)) = (k.try_slice(rows.clone()), v.try_slice(rows)) else {
                return Err(Error::Internal(format!(
                    "{n} positions of K and V need {} values each, got {} and {}",
                    n * kv_dim,
                    k.len(),
                    v.len()
                )));
            };
            gpu.kv_append(
                &mut self.k_pool.as_view_mut(),
                &mut self.v_pool.as_view_mut(),
                &k_run,
                &v_run,
                kv_dim,
                layer,
                layer_rows,
                block * bs + row,
            )?;
            done += run;
        }
        Ok(())
    }

    /// Attention of `n` queries at `start_pos..start_pos + n` over layer `layer`'s blocks,
    /// each over the last `window` positions when the layer is local.
    pub fn attend(
        &self,
        gpu: &Gpu,
        layer: usize,
        out: &mut CudaViewMut<f32>,
        q: &CudaView<f32>,
        at: (usize, usize, Option<usize>),
        heads: Heads,
    ) -> Result<()> {
        let layer_floats = self.n_blocks * self.block_size * self.kv_dim;
        let range = layer * layer_floats..(layer + 1) * layer_floats;
        let (Some(k), Some(v)) = (
            self.k_pool.try_slice(range.clone()),
            self.v_pool.try_slice(range),
        ) else {
            return Err(Error::Internal(format!(
                "the paged cache has no layer {layer}"
            )));
        };
        let bs = self.block_size;
        gpu.attention_paged_on(out, q, (&k, &v), &self.table, bs, at, heads)
    }

    /// Marks the `n` prepared positions as written, in every layer.
    pub fn advance(&mut self, n: usize) {
        self.blocks.advance(n);
    }

    /// Keeps the first `len` positions; the blocks past them go back to the pool.
    pub fn truncate(&mut self, len: usize) {
        self.blocks.truncate(len);
    }

    /// Bytes of the whole pool in GPU memory, allocated up front.
    pub fn bytes_pool(&self) -> usize {
        2 * self.k_pool.len() * std::mem::size_of::<f32>()
    }

    /// Bytes of the blocks in the sequence's table (as the CPU's paged cache counts them).
    pub fn bytes_reserved(&self) -> usize {
        self.blocks.bytes_reserved()
    }

    /// Bytes of the positions written.
    pub fn bytes_used(&self) -> usize {
        self.blocks.bytes_used()
    }
}
