//! `kvlab eval --dtype D`: what a weight format (and, for w8a8 and bf16a, rounding the
//! activations) costs in accuracy against the f32 model, on one text (book:
//! weight-formats.md).
//!
//! Both models read the whole text teacher-forced, in one prefill each on a full cache (its
//! logits are token-by-token decoding's, bit for bit, in every format: the naive == cached
//! contract). Per position, with `p` the f32 model's next-token distribution and `q` the
//! format's: perplexity, top-1 agreement and `KL(p || q)`, as `kvlab eval` measures a KV
//! policy (`eval.rs`).

use super::eval::{head_chunks, Totals};
use crate::cache::PreallocatedCache;
use crate::device::WeightDtype;
use crate::error::{Error, Result};
use crate::model::{KvSource, Model};
use crate::simd::WeightElem;
use crate::weights::{CpuWeights, OnWeights};
use serde::Serialize;

// ANCHOR: report
/// What `kvlab eval --dtype D` measures on one text.
#[derive(Debug, Clone, Serialize)]
pub struct WeightsEvalReport {
    /// `--dtype`'s name ("bf16", "int8", "w8a8", "bf16a").
    pub dtype: String,
    /// Tokens of text evaluated; `n_tokens - 1` of them are predicted.
    pub n_tokens: usize,
    /// The format's perplexity on the text, and the f32 model's (the reference).
    pub perplexity: f64,
    pub f32_perplexity: f64,
    /// Fraction of positions whose most likely next token is the f32 model's.
    pub top1_agreement: f64,
    /// Mean and largest KL(f32 || format) over positions, in nats.
    pub mean_kl: f64,
    pub max_kl: f64,
}
// ANCHOR_END: report

/// The last hidden state of every position of `ids` (`[n, dim]`), one prefill.
fn hidden_states<E: WeightElem>(model: &Model<E>, ids: &[u32]) -> Result<Vec<f32>> {
    let mut cache = PreallocatedCache::new(&model.config, ids.len())?;
    let hidden = model.forward_hidden(ids, &mut KvSource::Cache(&mut cache))?;
    Ok(hidden.into_raw_vec_and_offset().0)
}

/// The format's model against the f32 `reference` (whose hidden states are
/// `reference_hidden`), position by position, a chunk of LM-head rows at a time: two
/// `[64, vocab]` chunks in memory, never the whole text's logits.
struct Compare<'a> {
    reference: &'a Model,
    reference_hidden: &'a [f32],
    ids: &'a [u32],
}

impl OnWeights for Compare<'_> {
    type Out = Result<Totals>;
    fn run<E: WeightElem>(self, model: &Model<E>) -> Result<Totals> {
        let hidden = hidden_states(model, self.ids)?;
        let (vocab, rows) = (model.config.vocab_size, self.ids.len() - 1);
        let mut totals = Totals::default();
        let chunks = head_chunks(self.reference, self.reference_hidden, rows)
            .zip(head_chunks(model, &hidden, rows));
        for ((first, p_rows), (_, q_rows)) in chunks {
            for (r, (p, q)) in p_rows
                .chunks_exact(vocab)
                .zip(q_rows.chunks_exact(vocab))
                .enumerate()
            {
                totals.add(p, q, self.ids[first + r + 1])?;
            }
        }
        Ok(totals)
    }
}

// ANCHOR: eval_weights
/// `model` in `dtype` against `model` in f32, teacher-forced on `ids`.
pub fn eval_weights(model: &Model, dtype: WeightDtype, ids: &[u32]) -> Result<WeightsEvalReport> {
    let n = ids.len();
    if n < 2 || n > model.config.max_position_embeddings {
        return Err(Error::InvalidArgument(format!(
            "the text is {n} tokens: kvlab eval --dtype needs 2 to {} (the model's context); give --max-tokens or a longer text",
            model.config.max_position_embeddings
        )));
    }
    let reference_hidden = hidden_states(model, ids)?;
    let totals = CpuWeights::convert(model, dtype, Default::default(), false)?.run(Compare {
        reference: model,
        reference_hidden: &reference_hidden,
        ids,
    })?;
    let count = totals.n as f64;
    Ok(WeightsEvalReport {
        dtype: dtype.name().into(),
        n_tokens: n,
        perplexity: (totals.nll / count).exp(),
        f32_perplexity: (totals.full_nll / count).exp(),
        top1_agreement: totals.agree as f64 / count,
        mean_kl: totals.kl / count,
        max_kl: totals.max_kl,
    })
}
// ANCHOR_END: eval_weights
