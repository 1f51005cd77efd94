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
use crate::config::Config;
use crate::device::{WeightDtype, WeightLayout};
use crate::error::{Error, Result};
use crate::model::{s, Model};
use crate::simd::WeightElem;
use crate::weights::panels_if;
use std::sync::Arc;

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

// ANCHOR: batch_model
/// What the engine asks of a model: its shape and one batched pass. Every weight format
/// is a `Model<E>` (f32, bf16 or int8 elements, in rows or panels), so the engine, its
/// thread and the server hold an `Arc<dyn BatchModel>` chosen once at start-up
/// (`--dtype`, `--layout`) instead of carrying `E` through every type. One virtual call
/// per iteration, against milliseconds of matrix work.
pub trait BatchModel: Send + Sync {
    fn config(&self) -> &Config;
    /// [`Model::forward_batch`].
    fn forward_batch(
        &self,
        batch: &[&[u32]],
        kv: &mut dyn BatchKv,
        want_logits: &[bool],
    ) -> Result<Vec<Option<Vec<f32>>>>;
    /// The weights' format and layout, for reports ("bf16 in panels").
    fn weights(&self) -> String;
    /// Bytes one pass streams from memory (the weights: `lab::roof::streamed_weight_bytes`).
    fn streamed_bytes(&self) -> f64;
}

impl<E: WeightElem> BatchModel for Model<E> {
    fn config(&self) -> &Config {
        &self.config
    }
    fn forward_batch(
        &self,
        batch: &[&[u32]],
        kv: &mut dyn BatchKv,
        want_logits: &[bool],
    ) -> Result<Vec<Option<Vec<f32>>>> {
        Model::forward_batch(self, batch, kv, want_logits)
    }
    fn weights(&self) -> String {
        match E::BLOCK_ROWS {
            1 => format!("{} in {}", E::NAME, E::LAYOUT.name()),
            _ => format!("{} blocks", E::NAME), // int8 blocks have one layout of their own
        }
    }
    fn streamed_bytes(&self) -> f64 {
        crate::lab::roof::streamed_weight_bytes(self)
    }
}

/// `model` with its weights in `dtype` and (f32, bf16) `layout`, converted once, for the
/// engine: the same choice as `Backend::cpu` makes for `kvlab generate`, so a request
/// served has the bits of the same request generated. f32 rows share `model` itself.
pub fn batch_model(
    model: Arc<Model>,
    dtype: WeightDtype,
    layout: WeightLayout,
) -> Result<Arc<dyn BatchModel>> {
    Ok(match dtype {
        WeightDtype::F32 => match panels_if(&model, layout, false)? {
            Some(panels) => Arc::new(panels),
            None => model,
        },
        WeightDtype::Bf16 => {
            let half = model.to_bf16();
            match panels_if(&half, layout, false)? {
                Some(panels) => Arc::new(panels),
                None => Arc::new(half),
            }
        }
        WeightDtype::Int8 => Arc::new(model.to_int8()?),
    })
}
// ANCHOR_END: batch_model
