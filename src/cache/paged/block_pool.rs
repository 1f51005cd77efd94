//! The block pool under the paged cache: fixed-size blocks, a free list, reference counts.
//!
//! PagedAttention (Kwon et al. 2023, §4.2) borrows the operating system's answer to
//! fragmentation: cut memory into equal *blocks* (pages) and give a sequence blocks
//! one at a time, as it crosses into each. All blocks have the same size, so any free
//! block fits any request: no external fragmentation, and the only waste is the unused
//! tail of each sequence's last block (internal fragmentation, < one block).
//!
//! The pool is sized once from a memory budget, as vLLM sizes its KV cache from
//! `gpu_memory_utilization` at start-up: `n_blocks = budget / block_bytes`.
//!
//! A block may appear in several block tables at once (a forked sequence, a shared
//! prefix): its reference count says how many. The pool does not know *who* holds a
//! block; [`super::PagedCache`] keeps the block tables and checks that counts match.

use crate::cache::buffer::zeroed_buffer;
use crate::config::Config;
use crate::error::{Error, Result};

/// Index of a block in the pool.
pub type BlockId = usize;

// ANCHOR: block_pool
/// `n_blocks` blocks of `block_size` positions, each holding K and V for every layer.
pub struct BlockPool {
    /// `[n_layers, n_blocks, block_size, n_kv_heads, head_dim]`: one tensor per layer as
    /// in vLLM, and block `b` of layer `l` is one contiguous `[block_size, kv_dim]` slice.
    k: Vec<f32>,
    /// The same shape for V.
    v: Vec<f32>,
    n_layers: usize,
    n_blocks: usize,
    block_size: usize,
    kv_dim: usize,
    /// How many block tables hold each block. 0: on the free list, or parked in the
    /// prefix cache for reuse.
    ref_counts: Vec<u32>,
    /// Blocks nobody holds and nobody will look up: taken from the end.
    free: Vec<BlockId>,
    /// False for a pool that only counts blocks (capacity planning): no K or V at all.
    has_storage: bool,
}
// ANCHOR_END: block_pool

impl BlockPool {
    /// Allocates `n_blocks` blocks up front (the budget), all free.
    pub fn new(config: &Config, block_size: usize, n_blocks: usize) -> Result<BlockPool> {
        BlockPool::build(config, block_size, n_blocks, true)
    }

    /// The allocator without the memory: same free list, same counts, no K or V.
    /// `kvlab capacity` plans a GPU-sized budget with it; writing into it is an error.
    pub fn counting_only(config: &Config, block_size: usize, n_blocks: usize) -> Result<BlockPool> {
        BlockPool::build(config, block_size, n_blocks, false)
    }

    fn build(
        config: &Config,
        block_size: usize,
        n_blocks: usize,
        has_storage: bool,
    ) -> Result<BlockPool> {
        if block_size == 0 {
            return Err(Error::InvalidArgument(
                "the block size must be at least 1 position".into(),
            ));
        }
        let kv_dim = config.n_kv_heads() * config.head_dim();
        let n_layers = config.num_hidden_layers;
        let dims = if has_storage {
            [n_layers, n_blocks, block_size, kv_dim]
        } else {
            [0; 4]
        };
        let zeroed = || zeroed_buffer("the paged KV cache's block pool", &dims);
        // One count and one free-list entry per block: sized by the budget, so fallible.
        let mut ref_counts = crate::limits::try_vec(n_blocks, "the paged KV cache's block table")?;
        ref_counts.resize(n_blocks, 0);
        let mut free = crate::limits::try_vec(n_blocks, "the paged KV cache's free list")?;
        // Reversed, so that `pop` hands out block 0 first: easier to read in traces.
        free.extend((0..n_blocks).rev());
        Ok(BlockPool {
            k: zeroed()?,
            v: zeroed()?,
            n_layers,
            n_blocks,
            block_size,
            kv_dim,
            ref_counts,
            free,
            has_storage,
        })
    }

    /// Bytes of one block: K and V of `block_size` positions in every layer, f32.
    pub fn block_bytes(config: &Config, block_size: usize) -> usize {
        block_size * crate::cache::bytes_per_token(config)
    }

    pub fn n_blocks(&self) -> usize {
        self.n_blocks
    }
    pub fn block_size(&self) -> usize {
        self.block_size
    }
    pub fn n_free(&self) -> usize {
        self.free.len()
    }
    /// Blocks held by at least one block table.
    pub fn n_used(&self) -> usize {
        self.ref_counts.iter().filter(|&&r| r > 0).count()
    }
    pub fn ref_count(&self, block: BlockId) -> u32 {
        self.ref_counts[block]
    }
    /// The free list, for invariant checks.
    pub fn free_list(&self) -> &[BlockId] {
        &self.free
    }
    /// Bytes of the whole pool, reserved at creation (what it would be, for a counting pool).
    pub fn bytes(&self) -> usize {
        2 * self.n_layers * self.n_blocks * self.block_size * self.kv_dim * size_of::<f32>()
    }

    // ANCHOR: allocate
    /// Takes a block off the free list; its reference count becomes 1.
    pub fn pop_free(&mut self) -> Option<BlockId> {
        let block = self.free.pop()?;
        self.ref_counts[block] = 1;
        Some(block)
    }

    /// One more block table holds `block` (a fork, a prefix hit).
    pub fn retain(&mut self, block: BlockId) {
        self.ref_counts[block] += 1;
    }

    /// One block table fewer holds `block`; returns how many still do. At 0 the caller
    /// puts it on the free list ([`Self::push_free`]) or parks it in the prefix cache.
    pub fn release(&mut self, block: BlockId) -> u32 {
        self.ref_counts[block] -= 1;
        self.ref_counts[block]
    }

    pub fn push_free(&mut self, block: BlockId) {
        debug_assert_eq!(self.ref_counts[block], 0);
        self.free.push(block);
    }
    // ANCHOR_END: allocate

    /// Where row `row` of `block` starts in layer `layer`'s tensor.
    fn offset(&self, layer: usize, block: BlockId, row: usize) -> usize {
        ((layer * self.n_blocks + block) * self.block_size + row) * self.kv_dim
    }

    /// Layer `layer`'s keys in `block`: `[block_size, kv_dim]`.
    pub fn k_block(&self, layer: usize, block: BlockId) -> &[f32] {
        let start = self.offset(layer, block, 0);
        &self.k[start..start + self.block_size * self.kv_dim]
    }

    /// Layer `layer`'s values in `block`: `[block_size, kv_dim]`.
    pub fn v_block(&self, layer: usize, block: BlockId) -> &[f32] {
        let start = self.offset(layer, block, 0);
        &self.v[start..start + self.block_size * self.kv_dim]
    }

    /// Writes `k`, `v` (`[n, kv_dim]`, `row + n <= block_size`) into rows `row..row + n` of
    /// `block` in layer `layer`. Refuses a block that another table also holds: a shared
    /// block is read-only, whoever asks (the caller copies it first).
    pub fn write(
        &mut self,
        layer: usize,
        block: BlockId,
        row: usize,
        k: &[f32],
        v: &[f32],
    ) -> Result<()> {
        if !self.has_storage {
            return Err(Error::Internal(
                "this block pool only counts blocks (capacity planning): it has no memory to write to".into(),
            ));
        }
        if self.ref_counts[block] != 1 || layer >= self.n_layers {
            return Err(Error::Internal(format!(
                "write to block {block} (held by {} tables) in layer {layer}",
                self.ref_counts[block]
            )));
        }
        let start = self.offset(layer, block, row);
        self.k[start..start + k.len()].copy_from_slice(k);
        self.v[start..start + v.len()].copy_from_slice(v);
        Ok(())
    }

    /// Copies the first `rows` positions of `src` into `dst`, in every layer: copy-on-write.
    /// Returns the bytes copied.
    pub fn copy_rows(&mut self, src: BlockId, dst: BlockId, rows: usize) -> usize {
        for layer in 0..self.n_layers * self.has_storage as usize {
            let (from, to) = (self.offset(layer, src, 0), self.offset(layer, dst, 0));
            let n = rows * self.kv_dim;
            self.k.copy_within(from..from + n, to);
            self.v.copy_within(from..from + n, to);
        }
        2 * self.n_layers * rows * self.kv_dim * size_of::<f32>()
    }
}
