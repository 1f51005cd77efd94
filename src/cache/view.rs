//! What a cache hands attention for one layer: [`KvView`], one variant per way of
//! storing rows (`rows.rs`, and the quantized codes of `quant/rows.rs`).
//!
//! An enum rather than `&dyn KvHeads`: attention matches it once per layer and runs a
//! copy of itself compiled for that layout (`KvView::attend`, src/attention.rs), so no
//! row pays for a virtual call.

use crate::cache::quant::rows::{PagedQuantRows, QuantRows};
use crate::cache::rows::{Contiguous, Indexed, KvHeads, Paged, Ring};

/// One layer's keys and values, rows `0..end` in position order, as a cache hands
/// them to attention (row `j` is position `j` unless the cache evicts).
pub enum KvView<'a> {
    Contiguous(Contiguous<'a>),
    Paged(Paged<'a>),
    Ring(Ring<'a>),
    Indexed(Indexed<'a>),
    /// int8 / int4 codes and their scales, dequantized one head's run at a time.
    Quantized(QuantRows<'a>),
    /// The same codes in the blocks of a paged pool, read through a block table.
    PagedQuantized(PagedQuantRows<'a>),
}

impl KvView<'_> {
    /// The view as one trait object, for a reader that does not need attention's
    /// per-layout speed (`lab/attention_map.rs` reading keys and values back).
    pub fn as_heads(&self) -> &dyn KvHeads {
        match self {
            KvView::Contiguous(rows) => rows,
            KvView::Paged(rows) => rows,
            KvView::Ring(rows) => rows,
            KvView::Indexed(rows) => rows,
            KvView::Quantized(rows) => rows,
            KvView::PagedQuantized(rows) => rows,
        }
    }
}
