//! Where attention finds row `j`'s key and value, layout by layout (book:
//! paged-attention.md, eviction.md, kv-quantization.md).
//!
//! Attention (`src/attention.rs`) reads K and V through two small traits: [`KvRows`]
//! (one f32 row per position) and [`KvHeads`] (one head's `head_dim` run, which a
//! quantized cache dequantizes on demand). Each layout below is only an address
//! computation; the arithmetic attention does over the rows is the same for all of
//! them, which is why every layout gives bitwise-identical logits (`tests/caches.rs`).
//! Nothing here depends on attention or on any cache: caches build these views, and
//! attention reads them.

// ANCHOR: kv_rows
/// Where attention finds position `j`'s key and value: one `[n_kv_heads * head_dim]` row each.
pub trait KvRows: Sync {
    fn key(&self, j: usize) -> &[f32];
    fn value(&self, j: usize) -> &[f32];
}

/// Keys and values stored one position after another: `[len, kv_dim]` each.
pub struct Contiguous<'a> {
    keys: &'a [f32],
    values: &'a [f32],
    kv_dim: usize,
}

impl<'a> Contiguous<'a> {
    pub fn new(keys: &'a [f32], values: &'a [f32], kv_dim: usize) -> Self {
        Contiguous {
            keys,
            values,
            kv_dim,
        }
    }
}

impl KvRows for Contiguous<'_> {
    fn key(&self, j: usize) -> &[f32] {
        &self.keys[j * self.kv_dim..][..self.kv_dim]
    }
    fn value(&self, j: usize) -> &[f32] {
        &self.values[j * self.kv_dim..][..self.kv_dim]
    }
}
// ANCHOR_END: kv_rows

// ANCHOR: kv_heads
/// One KV head's `head_dim` run of position `j`, as attention reads it. A layout of
/// f32 rows ([`KvRows`]) hands out a slice of itself and ignores `scratch`; a quantized
/// cache (`src/cache/quant/`) dequantizes the run into `scratch` (`[head_dim]`, the
/// caller's) and hands that out: dequantization happens inside the dot products, one
/// run at a time, never as an f32 copy of the whole cache (book: kv-quantization.md).
pub trait KvHeads: Sync {
    fn key_head<'s>(
        &'s self,
        j: usize,
        kv_head: usize,
        head_dim: usize,
        scratch: &'s mut [f32],
    ) -> &'s [f32];
    fn value_head<'s>(
        &'s self,
        j: usize,
        kv_head: usize,
        head_dim: usize,
        scratch: &'s mut [f32],
    ) -> &'s [f32];
}

impl<R: KvRows + ?Sized> KvHeads for R {
    #[inline(always)]
    fn key_head<'s>(
        &'s self,
        j: usize,
        kv_head: usize,
        head_dim: usize,
        _: &'s mut [f32],
    ) -> &'s [f32] {
        &self.key(j)[kv_head * head_dim..][..head_dim]
    }
    #[inline(always)]
    fn value_head<'s>(
        &'s self,
        j: usize,
        kv_head: usize,
        head_dim: usize,
        _: &'s mut [f32],
    ) -> &'s [f32] {
        &self.value(j)[kv_head * head_dim..][..head_dim]
    }
}
// ANCHOR_END: kv_heads

// ANCHOR: paged_rows
/// PagedAttention's view of one layer (Kwon et al. 2023, §4.1): the sequence's
/// positions live in fixed-size blocks scattered through a pool, listed in order by
/// its block table. Block `b` of the table holds positions
/// `b * block_size..(b + 1) * block_size`, as one `[block_size, kv_dim]` slice.
pub struct Paged<'a> {
    /// Layer `l`'s K slice of each block in the table, in table order: `[block_size, kv_dim]` each.
    pub k_blocks: Vec<&'a [f32]>,
    /// The same for V.
    pub v_blocks: Vec<&'a [f32]>,
    pub block_size: usize,
    pub kv_dim: usize,
    /// Positions a sliding window dropped from the table (none for a full cache).
    pub evicted: Evicted,
}

impl KvRows for Paged<'_> {
    /// Row `j` is position `p` ([`Evicted::position`]), and position `p` is row
    /// `p % block_size` of block `p / block_size`: the only difference from the
    /// contiguous layout is this address computation.
    fn key(&self, j: usize) -> &[f32] {
        let p = self.evicted.position(j);
        let (block, row) = (p / self.block_size, p % self.block_size);
        &self.k_blocks[block][row * self.kv_dim..][..self.kv_dim]
    }
    fn value(&self, j: usize) -> &[f32] {
        let p = self.evicted.position(j);
        let (block, row) = (p / self.block_size, p % self.block_size);
        &self.v_blocks[block][row * self.kv_dim..][..self.kv_dim]
    }
}
// ANCHOR_END: paged_rows

// ANCHOR: evicted_rows
/// The positions a sliding window has dropped from a block table: `count` positions
/// from `sinks` on (`src/cache/paged/retention.rs`). Attention reads rows in position
/// order, so row `r` is position `r` among the sinks and position `r + count` after
/// them: the rows of a [`Ring`], found through the block table instead of a ring.
/// A full cache drops nothing (`count = 0`): row `r` is position `r`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Evicted {
    pub sinks: usize,
    pub count: usize,
}

impl Evicted {
    #[inline(always)]
    pub fn position(self, r: usize) -> usize {
        if r < self.sinks {
            r
        } else {
            r + self.count
        }
    }
}
// ANCHOR_END: evicted_rows

// ANCHOR: ring_rows
/// A sliding window with attention sinks, kept in a ring (StreamingLLM, Xiao et al.
/// 2024; `src/cache/window.rs`). Slots `0..sinks` hold the first positions forever;
/// slots `sinks..sinks + ring_len` are a ring of the most recent ones, whose oldest
/// sits at slot `sinks + oldest`. Row `r` (in position order) is then sink `r`, or
/// the `(r - sinks)`-th oldest recent position: one addition and one remainder.
pub struct Ring<'a> {
    /// `[sinks + ring_len, kv_dim]`
    pub keys: &'a [f32],
    /// `[sinks + ring_len, kv_dim]`
    pub values: &'a [f32],
    pub kv_dim: usize,
    pub sinks: usize,
    pub ring_len: usize,
    pub oldest: usize,
}

impl Ring<'_> {
    fn slot(&self, r: usize) -> usize {
        if r < self.sinks {
            r
        } else {
            self.sinks + (self.oldest + r - self.sinks) % self.ring_len
        }
    }
}

impl KvRows for Ring<'_> {
    fn key(&self, r: usize) -> &[f32] {
        &self.keys[self.slot(r) * self.kv_dim..][..self.kv_dim]
    }
    fn value(&self, r: usize) -> &[f32] {
        &self.values[self.slot(r) * self.kv_dim..][..self.kv_dim]
    }
}
// ANCHOR_END: ring_rows

// ANCHOR: indexed_rows
/// Rows listed by slot: row `r` is slot `slots[r]` of a contiguous store. An H2O
/// cache (`src/cache/h2o.rs`) evicts any row and reuses its slot, so it lists its
/// slots in position order; the masked full cache (`src/cache/masked.rs`) lists the
/// positions it has not masked out. Attention sees only the listed rows, in order.
pub struct Indexed<'a> {
    pub store: Contiguous<'a>,
    pub slots: &'a [usize],
}

impl KvRows for Indexed<'_> {
    fn key(&self, r: usize) -> &[f32] {
        self.store.key(self.slots[r])
    }
    fn value(&self, r: usize) -> &[f32] {
        self.store.value(self.slots[r])
    }
}
// ANCHOR_END: indexed_rows
