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
//! (`Model::forward_layers`, src/model.rs) asks of "the caches of a batch"
//! (`src/cache/source.rs`); a single [`KvSource`](crate::model::KvSource) is a batch of
//! one, and [`PagedBatch`](crate::cache::source::PagedBatch) is many sequences of one paged pool, each with its block table.
//!
//! The kernels are row-independent (src/ops.rs), so a row's bits do not depend on the
//! rows beside it: a request's logits are the same whatever it is batched with.

use crate::cache::source::BatchKv;
use crate::error::{Error, Result};
use crate::model::{s, Model};
use crate::simd::WeightElem;

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
