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
use crate::weights::CpuWeights;
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
        let tails: Vec<usize> = want_logits.iter().map(|&want| usize::from(want)).collect();
        let logits = self.forward_batch_tails(batch, kv, &tails)?;
        Ok((logits.into_iter().zip(want_logits))
            .map(|(rows, &want)| want.then_some(rows))
            .collect())
    }

    /// [`Model::forward_batch`], with the logits of the last `tails[i]` rows of
    /// sequence `i`, `[tails[i], vocab]` row-major (empty for 0): a speculative
    /// verification needs one row of logits per draft, a decode only its last.
    pub fn forward_batch_tails(
        &self,
        batch: &[&[u32]],
        kv: &mut dyn BatchKv,
        tails: &[usize],
    ) -> Result<Vec<Vec<f32>>> {
        if tails.len() != batch.len() {
            return Err(Error::Internal(format!(
                "{} logit row counts for a batch of {}",
                tails.len(),
                batch.len()
            )));
        }
        // (An empty sequence is the pass's own error, `EmptyPrompt`.)
        if let Some((t, n)) = (batch.iter().zip(tails)).find(|(t, &n)| !t.is_empty() && n > t.len())
        {
            return Err(Error::Internal(format!(
                "the logits of {n} rows asked of a sequence of {} rows",
                t.len()
            )));
        }
        let hidden = self.forward_layers(batch, kv, self.layers.len())?; // [rows, dim]
        let dim = self.config.hidden_size;
        // The wanted rows of each sequence, stacked: [sum(tails), dim].
        let mut wanted = Vec::new();
        let mut row = 0;
        for (tokens, &n) in batch.iter().zip(tails) {
            row += tokens.len();
            wanted.extend_from_slice(&s(&hidden)[(row - n) * dim..row * dim]);
        }
        let vocab = E::dims(&self.lm_head).1;
        let logits = if wanted.is_empty() {
            Vec::new()
        } else {
            self.logits_rows(&wanted) // [sum(tails), vocab]
        };
        let mut at = 0;
        Ok(tails
            .iter()
            .map(|&n| {
                at += n * vocab;
                logits[at - n * vocab..at].to_vec()
            })
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
    /// [`Model::forward_batch_tails`].
    fn forward_batch_tails(
        &self,
        batch: &[&[u32]],
        kv: &mut dyn BatchKv,
        tails: &[usize],
    ) -> Result<Vec<Vec<f32>>>;
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
    fn forward_batch_tails(
        &self,
        batch: &[&[u32]],
        kv: &mut dyn BatchKv,
        tails: &[usize],
    ) -> Result<Vec<Vec<f32>>> {
        Model::forward_batch_tails(self, batch, kv, tails)
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
    Ok(match CpuWeights::convert(&model, dtype, layout, false)? {
        CpuWeights::F32Rows(_) => model.clone(),
        CpuWeights::F32Panels(panels) => Arc::new(panels),
        CpuWeights::Bf16Rows(half) => Arc::new(half),
        CpuWeights::Bf16Panels(panels) => Arc::new(panels),
        CpuWeights::Int8(blocks) => Arc::new(blocks),
        CpuWeights::W8a8(blocks) => Arc::new(blocks),
        CpuWeights::Bf16a(blocks) => Arc::new(blocks),
    })
}
// ANCHOR_END: batch_model
