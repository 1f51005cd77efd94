//! What the layer loop (`Model::forward_layers`, src/model.rs) needs from storage:
//! where attention reads a pass's keys and values from ([`KvSource`]: this pass only, or
//! a cache), and the same verbs for the many sequences of a batch ([`BatchKv`]; a single
//! `KvSource` is a batch of one, [`PagedBatch`] is many sequences of one paged pool).
//!
//! The loop calls, for each sequence `i`, the verbs of [`KvStore`] in their order:
//! `start_pos` → `prepare` → per layer (`write` → `read`) → `advance`.

use crate::cache::rows::Contiguous;
use crate::cache::view::KvView;
use crate::cache::{KvStore, PagedCache, SeqId};
use crate::error::{Error, Result};
use crate::mask::Window;

// ANCHOR: kv_source
/// Where attention reads keys and values from: the one difference between the two paths.
pub enum KvSource<'a> {
    /// Naive: no state between steps. The pass covers the whole sequence, so the
    /// K and V it just computed *are* all the keys and values there are.
    ThisPass,
    /// Cached: append this pass's K and V to the cache, then attend over all of it.
    /// Any layout will do (`&mut PreallocatedCache` converts to this): see `src/cache/`.
    Cache(&'a mut dyn KvStore),
}
// ANCHOR_END: kv_source

// ANCHOR: batch_kv
/// Where each sequence of a batch keeps its keys and values. Sequence `i`'s verbs are
/// [`KvStore`]'s, called in the same order by the layer loop.
pub trait BatchKv {
    /// Sequences in the batch.
    fn n_seqs(&self) -> usize;
    /// Position of sequence `i`'s first new token (its cache's length; 0 on the naive path).
    fn start_pos(&self, i: usize) -> Result<usize>;
    /// Makes room for sequence `i`'s new `tokens` before any layer writes.
    fn prepare(&mut self, i: usize, tokens: &[u32]) -> Result<()>;
    /// Writes layer `layer`'s K and V of sequence `i`'s new rows, `[rows, kv_dim]`.
    fn write(&mut self, i: usize, layer: usize, k: &[f32], v: &[f32]) -> Result<()>;
    /// Sequence `i`'s keys and values for positions `0..end` in layer `layer`. `k`, `v`
    /// are this pass's rows of the sequence (the naive path has nothing else).
    fn read<'s>(
        &'s self,
        i: usize,
        layer: usize,
        end: usize,
        k: &'s [f32],
        v: &'s [f32],
    ) -> KvView<'s>;
    /// Marks sequence `i`'s `n` new positions filled.
    fn advance(&mut self, i: usize, n: usize);
    /// Rows sequence `i`'s attention reads before its new ones, once prepared: its start
    /// position, unless its cache evicts ([`KvStore::rows_held`]).
    fn rows_held(&self, i: usize) -> usize;
    /// Whether sequence `i`'s cache wants the attention each row received (H2O).
    fn observes_attention(&self, _i: usize) -> bool {
        false
    }
    /// Hands sequence `i`'s cache the attention each of its rows received in `layer`.
    fn observe(&mut self, _i: usize, _layer: usize, _received: &[f32]) {}
    /// The sliding window sequence `i`'s cache reads through ([`KvStore::window`]).
    fn window(&self, _i: usize) -> Option<Window> {
        None
    }
}
// ANCHOR_END: batch_kv

/// The single-sequence paths: a batch of one.
impl BatchKv for KvSource<'_> {
    fn n_seqs(&self) -> usize {
        1
    }
    fn start_pos(&self, _: usize) -> Result<usize> {
        Ok(match self {
            KvSource::ThisPass => 0,
            KvSource::Cache(cache) => cache.len(),
        })
    }
    fn prepare(&mut self, _: usize, tokens: &[u32]) -> Result<()> {
        match self {
            KvSource::ThisPass => Ok(()),
            KvSource::Cache(cache) => cache.prepare(tokens),
        }
    }
    fn write(&mut self, _: usize, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        match self {
            KvSource::ThisPass => Ok(()),
            KvSource::Cache(cache) => cache.write(layer, k, v),
        }
    }
    fn read<'s>(
        &'s self,
        _: usize,
        layer: usize,
        end: usize,
        k: &'s [f32],
        v: &'s [f32],
    ) -> KvView<'s> {
        match self {
            // Naive: the pass covers the whole sequence, its K and V are all there is.
            KvSource::ThisPass => KvView::Contiguous(Contiguous::new(k, v, k.len() / end)),
            KvSource::Cache(cache) => cache.read(layer, end),
        }
    }
    fn advance(&mut self, _: usize, n: usize) {
        if let KvSource::Cache(cache) = self {
            cache.advance(n);
        }
    }
    fn rows_held(&self, _: usize) -> usize {
        match self {
            KvSource::ThisPass => 0,
            KvSource::Cache(cache) => cache.rows_held(),
        }
    }
    fn observes_attention(&self, _: usize) -> bool {
        match self {
            KvSource::ThisPass => false,
            KvSource::Cache(cache) => cache.observes_attention(),
        }
    }
    fn window(&self, _: usize) -> Option<Window> {
        match self {
            KvSource::ThisPass => None,
            KvSource::Cache(cache) => cache.window(),
        }
    }
    fn observe(&mut self, _: usize, layer: usize, received: &[f32]) {
        if let KvSource::Cache(cache) = self {
            cache.observe(layer, received);
        }
    }
}

// ANCHOR: paged_batch
/// Many sequences of one paged pool: sequence `i` of the batch is `seqs[i]`, with its
/// own block table (PagedAttention, Kwon et al. 2023).
pub struct PagedBatch<'a> {
    pub cache: &'a mut PagedCache,
    pub seqs: Vec<SeqId>,
}

impl BatchKv for PagedBatch<'_> {
    fn n_seqs(&self) -> usize {
        self.seqs.len()
    }
    fn start_pos(&self, i: usize) -> Result<usize> {
        self.cache.seq_len(self.seqs[i]).ok_or_else(|| {
            Error::Internal(format!("sequence {} is not in the pool", self.seqs[i].0))
        })
    }
    fn prepare(&mut self, i: usize, tokens: &[u32]) -> Result<()> {
        self.cache.seq(self.seqs[i])?.prepare(tokens)
    }
    fn write(&mut self, i: usize, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        self.cache.seq(self.seqs[i])?.write(layer, k, v)
    }
    fn read<'s>(&'s self, i: usize, layer: usize, end: usize, _: &[f32], _: &[f32]) -> KvView<'s> {
        self.cache.read_seq(self.seqs[i], layer, end)
    }
    fn advance(&mut self, i: usize, n: usize) {
        if let Ok(mut seq) = self.cache.seq(self.seqs[i]) {
            seq.advance(n);
        }
    }
    /// Every position is a row: a window per query leaves holes in the block table,
    /// which its mask never reads, and renumbers nothing.
    fn rows_held(&self, i: usize) -> usize {
        self.cache.seq_len(self.seqs[i]).unwrap_or(0)
    }
    fn window(&self, _: usize) -> Option<Window> {
        self.cache.retention().mask()
    }
}
// ANCHOR_END: paged_batch
