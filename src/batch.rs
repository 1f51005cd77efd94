//! One forward pass over several sequences at once (book: scheduling.md).
//!
//! A serving engine runs, in one iteration, the new tokens of many requests: one row
//! for each request that is decoding, a chunk of prompt for each that is prefilling
//! (Orca, Yu et al. 2022; Sarathi, Agrawal et al. 2023). Their rows are stacked into one
//! `[total_rows, dim]` matrix, so every weight matrix is streamed from memory **once**
//! for the whole batch instead of once per request: decode is memory-bound (book:
//! roofline.md), so eight decode rows cost little more than one.
//!
//! Only attention cares which sequence a row belongs to: each sequence attends over
//! its own keys and values, at its own positions. [`BatchKv`] is what the layer loop
//! (`Model::forward_layers`, src/model.rs) asks of "the caches of a batch"; a single
//! [`KvSource`] is a batch of one, and [`PagedBatch`] is many sequences of one paged
//! pool, each with its block table.
//!
//! The kernels are row-independent (src/ops.rs), so a row's bits do not depend on the
//! rows beside it: a request's logits are the same whatever it is batched with.

use crate::attention::{Contiguous, KvView};
use crate::cache::{KvStore, PagedCache, SeqId};
use crate::error::{Error, Result};
use crate::model::{s, KvSource, Model};
use crate::simd::WeightElem;

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
    /// A paged pool never evicts: every position is a row.
    fn rows_held(&self, i: usize) -> usize {
        self.cache.seq_len(self.seqs[i]).unwrap_or(0)
    }
}
// ANCHOR_END: paged_batch

/// Where one sequence's rows sit in the stacked batch.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    /// Index of its first row in `[total_rows, ..]`.
    pub first_row: usize,
    pub n_rows: usize,
    /// Position of its first row in its own sequence (its RoPE angle).
    pub start_pos: usize,
    /// Rows its attention reads before its own: `start_pos`, unless its cache evicts.
    pub rows_before: usize,
    /// Whether its cache wants the attention its rows received (H2O).
    pub observe: bool,
}

impl Span {
    /// The spans of `batch`, one after another; an empty sequence is an error.
    pub fn of_batch(batch: &[&[u32]], kv: &dyn BatchKv) -> Result<Vec<Span>> {
        if batch.len() != kv.n_seqs() {
            return Err(Error::Internal(format!(
                "a batch of {} token lists for {} caches",
                batch.len(),
                kv.n_seqs()
            )));
        }
        let mut first_row = 0;
        let mut spans = Vec::with_capacity(batch.len());
        for (i, tokens) in batch.iter().enumerate() {
            if tokens.is_empty() {
                return Err(Error::EmptyPrompt);
            }
            spans.push(Span {
                first_row,
                n_rows: tokens.len(),
                start_pos: kv.start_pos(i)?,
                rows_before: 0, // set once the caches are prepared
                observe: false,
            });
            first_row += tokens.len();
        }
        if spans.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        Ok(spans)
    }

    /// The range of its rows in a `[total_rows, width]` buffer.
    pub fn rows(&self, width: usize) -> std::ops::Range<usize> {
        self.first_row * width..(self.first_row + self.n_rows) * width
    }
}

impl<E: WeightElem> Model<E> {
    // ANCHOR: forward_batch
    /// One pass over the new tokens of several sequences (`batch[i]` for sequence `i` of
    /// `kv`): decode rows and prefill chunks side by side. Returns, for each sequence
    /// with `want_logits[i]`, the logits of its last row, `[vocab]`; the LM head runs
    /// once over those rows only (a prefill chunk that does not end its prompt needs none).
    pub fn forward_batch(
        &self,
        batch: &[&[u32]],
        kv: &mut dyn BatchKv,
        want_logits: &[bool],
    ) -> Result<Vec<Option<Vec<f32>>>> {
        if want_logits.len() != batch.len() {
            return Err(Error::Internal(format!(
                "{} logits flags for a batch of {}",
                want_logits.len(),
                batch.len()
            )));
        }
        let hidden = self.forward_layers(batch, kv, self.layers.len())?; // [rows, dim]
        let dim = self.config.hidden_size;
        // The last row of each sequence that wants logits, stacked: [m, dim].
        let mut last_rows = Vec::new();
        let mut row = 0;
        for (tokens, &want) in batch.iter().zip(want_logits) {
            row += tokens.len();
            if want {
                last_rows.extend_from_slice(&s(&hidden)[(row - 1) * dim..row * dim]);
            }
        }
        let vocab = E::dims(&self.lm_head).1;
        let logits = if last_rows.is_empty() {
            Vec::new()
        } else {
            self.logits_rows(&last_rows) // [m, vocab]
        };
        let mut rows = logits.chunks_exact(vocab);
        Ok(want_logits
            .iter()
            .map(|&want| want.then(|| rows.next().expect("one row per flag").to_vec()))
            .collect())
    }
    // ANCHOR_END: forward_batch
}
