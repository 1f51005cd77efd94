//! A quantized cache's view of one layer, as attention reads it: codes and scales,
//! dequantized one head's `head_dim` run at a time into the caller's scratch buffer
//! (book: kv-quantization.md).

use crate::cache::quant::side::SideRows;
use crate::cache::rows::{Evicted, KvHeads};

// ANCHOR: quant_rows
/// One layer of a quantized cache, for attention: each `head_dim` run is dequantized
/// into the caller's buffer when attention asks for it, with the codec's one formula.
pub struct QuantRows<'a> {
    pub keys: SideRows<'a>,
    pub values: SideRows<'a>,
}

impl KvHeads for QuantRows<'_> {
    #[inline]
    fn key_head<'s>(
        &'s self,
        j: usize,
        kv_head: usize,
        head_dim: usize,
        scratch: &'s mut [f32],
    ) -> &'s [f32] {
        self.keys
            .dequantize(j, kv_head * head_dim, head_dim, scratch);
        &scratch[..head_dim]
    }
    #[inline]
    fn value_head<'s>(
        &'s self,
        j: usize,
        kv_head: usize,
        head_dim: usize,
        scratch: &'s mut [f32],
    ) -> &'s [f32] {
        self.values
            .dequantize(j, kv_head * head_dim, head_dim, scratch);
        &scratch[..head_dim]
    }
}
// ANCHOR_END: quant_rows

// ANCHOR: paged_quant_rows
/// One layer of a paged pool of quantized blocks: position `j` is slot
/// `table[j / block_size] * block_size + j % block_size` of the pool's codes, the address
/// computation of [`crate::cache::rows::Paged`] in front of the codec of [`QuantRows`].
pub struct PagedQuantRows<'a> {
    /// The whole pool's slots, `[n_blocks * block_size, ...]`.
    pub slots: QuantRows<'a>,
    /// The sequence's block table.
    pub table: &'a [usize],
    pub block_size: usize,
    /// Positions a sliding window dropped from the table.
    pub evicted: Evicted,
}

impl PagedQuantRows<'_> {
    #[inline]
    fn slot(&self, j: usize) -> usize {
        let p = self.evicted.position(j);
        self.table[p / self.block_size] * self.block_size + p % self.block_size
    }
}

impl KvHeads for PagedQuantRows<'_> {
    #[inline]
    fn key_head<'s>(
        &'s self,
        j: usize,
        kv_head: usize,
        head_dim: usize,
        scratch: &'s mut [f32],
    ) -> &'s [f32] {
        self.slots
            .key_head(self.slot(j), kv_head, head_dim, scratch)
    }
    #[inline]
    fn value_head<'s>(
        &'s self,
        j: usize,
        kv_head: usize,
        head_dim: usize,
        scratch: &'s mut [f32],
    ) -> &'s [f32] {
        self.slots
            .value_head(self.slot(j), kv_head, head_dim, scratch)
    }
}
// ANCHOR_END: paged_quant_rows
