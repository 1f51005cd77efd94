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
use crate::cache::element::KvElement;
use crate::cache::quant::rows::PagedQuantRows;
use crate::cache::quant::{QuantRows, Side};
use crate::cache::rows::{Evicted, Paged};
use crate::cache::view::KvView;
use crate::config::Config;
use crate::error::{Error, Result};

/// Index of a block in the pool.
pub type BlockId = usize;

/// A hole in a block table: the block that stood here went back to the pool because a
/// sliding window slid past all of it (vLLM's sliding-window manager puts its
/// `null_block` there). Attention never reads a hole: [`Evicted`] skips its positions.
pub const HOLE: BlockId = BlockId::MAX;

// ANCHOR: block_pool
/// `n_blocks` blocks of `block_size` positions, each holding K and V for every layer.
pub struct BlockPool {
    /// The blocks' keys and values, in the pool's element (f32, or int8/int4 codes).
    memory: Memory,
    element: KvElement,
    /// Layers one block holds: a layer group's (`groups.rs`); the pool's `layer`
    /// arguments are slots `0..n_layers` of a block, which [`super::PagedCache`] maps
    /// from the model's layers.
    n_layers: usize,
    n_blocks: usize,
    block_size: usize,
    kv_dim: usize,
    /// How many block tables hold each block. 0: on the free list, or parked in the
    /// prefix cache for reuse.
    ref_counts: Vec<u32>,
    /// Blocks nobody holds and nobody will look up: taken from the end.
    free: Vec<BlockId>,
}

/// Where the blocks' keys and values are. A block is the same `block_size` consecutive
/// *slots* whatever the element: slot `block * block_size + row`.
enum Memory {
    /// A pool that only counts blocks (capacity planning): no K or V at all.
    CountingOnly,
    /// `k`, `v`: `[n_layers, n_blocks, block_size, n_kv_heads, head_dim]`, one tensor per
    /// layer slot as in vLLM; block `b` of layer `l` is one contiguous `[block_size, kv_dim]` slice.
    F32 { k: Vec<f32>, v: Vec<f32> },
    /// Codes and scales of every slot (`quant/side.rs`): a block's rows are quantized as
    /// they are written, each on its own, with the contiguous quantized cache's formula.
    PerToken { keys: Side, values: Side },
}
// ANCHOR_END: block_pool

// ANCHOR: layers_per_block
/// Layers one block holds: every layer, for a model whose layers all keep every
/// position; for a model with local layers, the greatest common divisor of the layer
/// counts of its kinds (global, and local by window size), so that each kind splits into
/// whole groups of that many layers and every block has the same bytes (`groups.rs`).
pub fn layers_per_block(config: &Config) -> usize {
    let mut kinds: std::collections::BTreeMap<Option<usize>, usize> = Default::default();
    for l in 0..config.num_hidden_layers {
        *kinds.entry(config.layer_window(l)).or_default() += 1;
    }
    kinds.values().fold(0, |a, &b| gcd(a, b)).max(1)
}
// ANCHOR_END: layers_per_block

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl BlockPool {
    /// Allocates `n_blocks` f32 blocks up front (the budget), all free.
    pub fn new(config: &Config, block_size: usize, n_blocks: usize) -> Result<BlockPool> {
        BlockPool::build(config, KvElement::F32, None, block_size, n_blocks, true)
    }

    /// Allocates `n_blocks` blocks of `element` up front, all free.
    pub fn with_element(
        config: &Config,
        element: KvElement,
        block_size: usize,
        n_blocks: usize,
    ) -> Result<BlockPool> {
        BlockPool::build(config, element, None, block_size, n_blocks, true)
    }

    /// The allocator without the memory: same free list, same counts, no K or V.
    /// `kvlab capacity` plans a GPU-sized budget with it; writing into it is an error.
    pub fn counting_only(
        config: &Config,
        element: KvElement,
        block_size: usize,
        n_blocks: usize,
    ) -> Result<BlockPool> {
        BlockPool::build(config, element, None, block_size, n_blocks, false)
    }

    /// A pool whose blocks hold `layers` layers each (one layer group's), with K and V
    /// behind them (`storage`) or counting only.
    pub fn of_layers(
        config: &Config,
        element: KvElement,
        layers: usize,
        block_size: usize,
        n_blocks: usize,
        storage: bool,
    ) -> Result<BlockPool> {
        BlockPool::build(config, element, Some(layers), block_size, n_blocks, storage)
    }

    fn build(
        config: &Config,
        element: KvElement,
        layers: Option<usize>,
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
        // A block holds one layer group's layers (`groups.rs`): every layer, unless the
        // model has local layers.
        let n_layers = layers.unwrap_or_else(|| layers_per_block(config));
        let what = "the paged KV cache's block pool";
        let memory = match (has_storage, element) {
            (false, _) => Memory::CountingOnly,
            (true, KvElement::F32) => {
                let dims = [n_layers, n_blocks, block_size, kv_dim];
                Memory::F32 {
                    k: zeroed_buffer(what, &dims)?,
                    v: zeroed_buffer(what, &dims)?,
                }
            }
            (true, KvElement::PerToken { keys, values }) => {
                let slots = n_blocks
                    .checked_mul(block_size)
                    .ok_or_else(|| Error::OutOfMemory {
                        what: what.into(),
                        bytes: n_blocks as u128 * block_size as u128,
                    })?;
                Memory::PerToken {
                    keys: Side::new(keys, n_layers, slots, kv_dim)?,
                    values: Side::new(values, n_layers, slots, kv_dim)?,
                }
            }
        };
        // One count and one free-list entry per block: sized by the budget, so fallible.
        let mut ref_counts = crate::limits::try_vec(n_blocks, "the paged KV cache's block table")?;
        ref_counts.resize(n_blocks, 0);
        let mut free = crate::limits::try_vec(n_blocks, "the paged KV cache's free list")?;
        // Reversed, so that `pop` hands out block 0 first: easier to read in traces.
        free.extend((0..n_blocks).rev());
        Ok(BlockPool {
            memory,
            element,
            n_layers,
            n_blocks,
            block_size,
            kv_dim,
            ref_counts,
            free,
        })
    }

    /// Bytes of one block: K and V of `block_size` positions in every layer of one layer
    /// group (every layer, for a model without local layers), as `element`.
    pub fn block_bytes(config: &Config, element: KvElement, block_size: usize) -> usize {
        BlockPool::block_bytes_of(config, element, layers_per_block(config), block_size)
    }

    /// The bytes of a block of `block_size` positions of `layers` layers.
    pub fn block_bytes_of(
        config: &Config,
        element: KvElement,
        layers: usize,
        block_size: usize,
    ) -> usize {
        let kv_dim = config.n_kv_heads() * config.head_dim();
        block_size * element.bytes_per_token_of(layers, kv_dim)
    }

    /// What each stored key and value is.
    pub fn element(&self) -> KvElement {
        self.element
    }

    /// Layers one block holds (a layer group's).
    pub fn n_layers(&self) -> usize {
        self.n_layers
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
        let per_token = self.element.bytes_per_token_of(self.n_layers, self.kv_dim);
        self.n_blocks * self.block_size * per_token
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

    /// Where row `row` of `block` starts in layer `layer`'s f32 tensor.
    fn offset(&self, layer: usize, block: BlockId, row: usize) -> usize {
        ((layer * self.n_blocks + block) * self.block_size + row) * self.kv_dim
    }

    // ANCHOR: pool_view
    /// Layer `layer`'s keys and values of the blocks in `table`, in table order, as
    /// attention reads them: f32 block slices, or the quantized slots behind the table.
    /// `evicted` says which positions a window dropped; their holes read as empty blocks.
    pub fn layer_view<'a>(
        &'a self,
        layer: usize,
        table: &'a [BlockId],
        evicted: Evicted,
    ) -> KvView<'a> {
        let (bs, kv_dim) = (self.block_size, self.kv_dim);
        match &self.memory {
            Memory::F32 { k, v } => {
                let block = |data: &'a [f32], b: BlockId| -> &'a [f32] {
                    if b == HOLE {
                        return &[];
                    }
                    let start = self.offset(layer, b, 0);
                    &data[start..start + bs * kv_dim]
                };
                KvView::Paged(Paged {
                    k_blocks: table.iter().map(|&b| block(k, b)).collect(),
                    v_blocks: table.iter().map(|&b| block(v, b)).collect(),
                    block_size: bs,
                    kv_dim,
                    evicted,
                })
            }
            Memory::PerToken { keys, values } => {
                let slots = self.n_blocks * bs;
                KvView::PagedQuantized(PagedQuantRows {
                    slots: QuantRows {
                        keys: keys.rows(layer, slots),
                        values: values.rows(layer, slots),
                    },
                    table,
                    block_size: bs,
                    evicted,
                })
            }
            // Nothing was ever written: a view of no rows (attention reads none).
            Memory::CountingOnly => KvView::Paged(Paged {
                k_blocks: Vec::new(),
                v_blocks: Vec::new(),
                block_size: bs,
                kv_dim,
                evicted,
            }),
        }
    }
    // ANCHOR_END: pool_view

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
        if self.ref_counts[block] != 1 || layer >= self.n_layers {
            return Err(Error::Internal(format!(
                "write to block {block} (held by {} tables) in layer {layer}",
                self.ref_counts[block]
            )));
        }
        let (start, bs) = (self.offset(layer, block, row), self.block_size);
        match &mut self.memory {
            Memory::CountingOnly => {
                return Err(Error::Internal(
                    "this block pool only counts blocks (capacity planning): it has no memory to write to".into(),
                ))
            }
            Memory::F32 { k: keys, v: values } => {
                keys[start..start + k.len()].copy_from_slice(k);
                values[start..start + v.len()].copy_from_slice(v);
            }
            Memory::PerToken { keys, values } => {
                let slot = block * bs + row;
                keys.write(layer, slot, k);
                values.write(layer, slot, v);
            }
        }
        Ok(())
    }

    /// The stored bytes of `block` in every layer (f32 bits, or codes and scales): what
    /// the allocator's checks compare to see that a shared block was never written.
    pub fn block_image(&self, block: BlockId) -> Vec<u8> {
        let (bs, kv_dim) = (self.block_size, self.kv_dim);
        let mut out = Vec::new();
        match &self.memory {
            Memory::CountingOnly => {}
            Memory::F32 { k, v } => {
                for layer in 0..self.n_layers {
                    let start = self.offset(layer, block, 0);
                    for data in [k, v] {
                        let rows = &data[start..start + bs * kv_dim];
                        out.extend(rows.iter().flat_map(|x| x.to_le_bytes()));
                    }
                }
            }
            Memory::PerToken { keys, values } => {
                keys.image(block * bs, bs, &mut out);
                values.image(block * bs, bs, &mut out);
            }
        }
        out
    }

    // ANCHOR: row_image
    /// Bytes of one position of one layer as this pool stores it, K then V: `2 x kv_dim x 4`
    /// for f32, codes and scales for a quantized element.
    pub fn row_bytes(&self) -> usize {
        match &self.memory {
            Memory::CountingOnly | Memory::F32 { .. } => 2 * self.kv_dim * size_of::<f32>(),
            Memory::PerToken { keys, values } => keys.slot_len() + values.slot_len(),
        }
    }

    /// Appends position `row` of `block` in layer `layer` as stored (K, then V): what a
    /// KV transfer carries, whatever the element (`engine/transfer.rs`).
    pub fn row_image(&self, layer: usize, block: BlockId, row: usize, out: &mut Vec<u8>) {
        match &self.memory {
            Memory::CountingOnly => {}
            Memory::F32 { k, v } => {
                let start = self.offset(layer, block, row);
                for data in [k, v] {
                    let rows = &data[start..start + self.kv_dim];
                    out.extend(rows.iter().flat_map(|x| x.to_le_bytes()));
                }
            }
            Memory::PerToken { keys, values } => {
                let slot = block * self.block_size + row;
                keys.slot_bytes(layer, slot, out);
                values.slot_bytes(layer, slot, out);
            }
        }
    }

    /// Stores a [`BlockPool::row_image`] of a pool of the same element at position `row`
    /// of `block` in layer `layer`: the stored bits as they were (an int8 row is not
    /// quantized again, so a transferred row is bit for bit the sender's).
    pub fn write_row_image(
        &mut self,
        layer: usize,
        block: BlockId,
        row: usize,
        bytes: &[u8],
    ) -> Result<()> {
        if self.ref_counts[block] != 1 || layer >= self.n_layers || bytes.len() != self.row_bytes()
        {
            return Err(Error::Internal(format!(
                "a row image of {} bytes into block {block} (held by {} tables), layer {layer}: want {} bytes, one table",
                bytes.len(),
                self.ref_counts[block],
                self.row_bytes()
            )));
        }
        let start = self.offset(layer, block, row);
        match &mut self.memory {
            Memory::CountingOnly => {
                return Err(Error::Internal(
                    "this block pool only counts blocks (capacity planning): it has no memory to write to".into(),
                ))
            }
            Memory::F32 { k, v } => {
                let floats = bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                let kv_dim = self.kv_dim;
                for (i, x) in floats.enumerate() {
                    let (data, at) = if i < kv_dim { (&mut *k, i) } else { (&mut *v, i - kv_dim) };
                    data[start + at] = x;
                }
            }
            Memory::PerToken { keys, values } => {
                let slot = block * self.block_size + row;
                let (kb, vb) = bytes.split_at(keys.slot_len());
                keys.set_slot_bytes(layer, slot, kb);
                values.set_slot_bytes(layer, slot, vb);
            }
        }
        Ok(())
    }
    // ANCHOR_END: row_image

    /// Copies the first `rows` positions of `src` into `dst`, in every layer: copy-on-write.
    /// Returns the bytes copied.
    pub fn copy_rows(&mut self, src: BlockId, dst: BlockId, rows: usize) -> usize {
        let (n_layers, n_blocks, bs, kv_dim) =
            (self.n_layers, self.n_blocks, self.block_size, self.kv_dim);
        let (from, to) = (src * bs, dst * bs);
        match &mut self.memory {
            Memory::CountingOnly => 0,
            Memory::F32 { k, v } => {
                for layer in 0..n_layers {
                    // Slot `s` of layer `l` starts at `(l * n_blocks * bs + s) * kv_dim`.
                    let base = layer * n_blocks * bs;
                    let (from, to) = ((base + from) * kv_dim, (base + to) * kv_dim);
                    let n = rows * kv_dim;
                    k.copy_within(from..from + n, to);
                    v.copy_within(from..from + n, to);
                }
                2 * n_layers * rows * kv_dim * size_of::<f32>()
            }
            Memory::PerToken { keys, values } => {
                keys.copy_rows(from, to, rows) + values.copy_rows(from, to, rows)
            }
        }
    }
}
