//! One sequence of a [`PagedCache`], as the model sees it: the [`KvStore`] verbs on a
//! block table (PagedAttention, Kwon et al. 2023, §4.3). Each verb is one of
//! `PagedCache`'s write-path methods (`prepare_seq`, `write_seq`, ... in `paged/mod.rs`).
//! Book: paged-attention.md.

use super::{LayerGroups, PagedCache, Retention, SeqId, Sequence, HOLE};
use crate::cache::element::KvElement;
use crate::cache::view::KvView;
use crate::cache::KvStore;
use crate::config::Config;
use crate::error::Result;
use crate::mask::Window;
use std::borrow::BorrowMut;

// ANCHOR: paged_seq
/// One sequence of a [`PagedCache`] behind the [`KvStore`] verbs. `C` is
/// `&mut PagedCache` when many sequences share the pool (`cache.seq(id)`), or an owned
/// `PagedCache` holding one sequence ([`PagedSeq::single`], what `--cache paged` uses).
pub struct PagedSeq<C> {
    pub(super) cache: C,
    pub(super) id: SeqId,
}
// ANCHOR_END: paged_seq

impl PagedSeq<PagedCache> {
    /// A pool of `n_blocks` f32 blocks with one sequence in it.
    pub fn single(
        config: &Config,
        block_size: usize,
        n_blocks: usize,
        prefix_caching: bool,
    ) -> Result<PagedSeq<PagedCache>> {
        PagedSeq::single_of(config, KvElement::F32, block_size, n_blocks, prefix_caching)
    }

    /// A pool of `n_blocks` blocks of `element` with one sequence in it.
    pub fn single_of(
        config: &Config,
        element: KvElement,
        block_size: usize,
        n_blocks: usize,
        prefix_caching: bool,
    ) -> Result<PagedSeq<PagedCache>> {
        PagedSeq::single_keeping(
            config,
            element,
            Retention::Full,
            block_size,
            n_blocks,
            prefix_caching,
        )
    }

    /// A pool of blocks of `element` for one sequence of up to `capacity_blocks` blocks
    /// per table that keeps what `retention` says: a window's sequence never holds more
    /// than [`Retention::max_blocks`], so its pool has no more (`--cache paged --kv
    /// window`). A model with local layers has a table per layer group, and the pool as
    /// many blocks per table (`groups.rs`).
    pub fn single_keeping(
        config: &Config,
        element: KvElement,
        retention: Retention,
        block_size: usize,
        capacity_blocks: usize,
        prefix_caching: bool,
    ) -> Result<PagedSeq<PagedCache>> {
        let per_table = retention
            .max_blocks(block_size)
            .map_or(capacity_blocks, |most| most.min(capacity_blocks));
        let n_blocks = per_table.saturating_mul(LayerGroups::of(config).len());
        let mut cache =
            PagedCache::with_element(config, element, block_size, n_blocks, prefix_caching)?
                .with_retention(retention)?;
        let id = cache.add_sequence();
        Ok(PagedSeq { cache, id })
    }
}

impl PagedSeq<PagedCache> {
    /// One sequence's block table over a pool of `n_blocks` with no memory behind it: the
    /// blocks are taken, counted and given back exactly as above, but their K and V live
    /// elsewhere. The GPU's paged cache (src/cuda/paged_cache.rs) keeps them in GPU memory
    /// and asks this pool which block each position goes in. One table for every layer
    /// ([`LayerGroups::one`]), since the GPU pool gives every layer the same block ids: a
    /// model with local layers keeps all their rows there and reads its windows through
    /// the attention kernel's mask (the plain twin of the CPU's table per layer group).
    pub fn single_counting(
        config: &Config,
        element: KvElement,
        block_size: usize,
        n_blocks: usize,
    ) -> Result<PagedSeq<PagedCache>> {
        let one = LayerGroups::one(config.num_hidden_layers, Retention::Full);
        let mut cache =
            PagedCache::with_layer_groups(config, element, one, block_size, n_blocks, false)?;
        let id = cache.add_sequence();
        Ok(PagedSeq { cache, id })
    }
}

impl<C: BorrowMut<PagedCache>> PagedSeq<C> {
    pub fn id(&self) -> SeqId {
        self.id
    }
    pub fn cache(&self) -> &PagedCache {
        self.cache.borrow()
    }
    /// The pool, given back (to free the sequence and check that nothing leaked).
    pub fn into_cache(self) -> C {
        self.cache
    }
    fn seq(&self) -> &Sequence {
        &self.cache.borrow().seqs[&self.id]
    }
}

impl<C: BorrowMut<PagedCache>> KvStore for PagedSeq<C> {
    fn len(&self) -> usize {
        self.seq().len
    }
    fn rows_held(&self) -> usize {
        self.cache().rows_held(self.id)
    }
    fn max_pass_tokens(&self) -> usize {
        self.cache().pass_limit(self.id)
    }
    fn window(&self) -> Option<Window> {
        self.cache().retention().mask()
    }
    fn prepare(&mut self, tokens: &[u32]) -> Result<()> {
        self.cache.borrow_mut().prepare_seq(self.id, tokens)
    }
    fn write(&mut self, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        self.cache.borrow_mut().write_seq(self.id, layer, k, v)
    }
    fn read(&self, layer: usize, end: usize) -> KvView<'_> {
        self.cache.borrow().read_seq(self.id, layer, end)
    }
    fn advance(&mut self, n: usize) {
        self.cache.borrow_mut().advance_seq(self.id, n)
    }
    fn truncate(&mut self, len: usize) {
        self.cache.borrow_mut().truncate_seq(self.id, len)
    }
    /// The blocks in this sequence's tables, holes aside (a block shared with others
    /// counts fully).
    fn bytes_reserved(&self) -> usize {
        let tables = &self.seq().tables;
        let held: usize = tables
            .iter()
            .map(|t| t.blocks.iter().filter(|&&b| b != HOLE).count())
            .sum();
        held * self.cache().block_bytes
    }
    /// The rows attention reads, every layer's: those held, or under a window per query
    /// (`--kv sliding`, or a local layer's trained window) the positions the next token
    /// sees (as a local layer's ring, `hybrid.rs`).
    fn bytes_used(&self) -> usize {
        let cache = self.cache();
        let layer_rows = match cache.retention() {
            Retention::Window { .. } => self.rows_held() * cache.groups.n_layers(),
            _ => cache.groups.rows_read(self.len()),
        };
        layer_rows * cache.row_bytes
    }
    /// Copy-on-write copies in the whole pool.
    fn bytes_copied(&self) -> usize {
        self.cache().bytes_copied
    }
}
