//! Speculative decoding over a grid of drafters and draft lengths on one prompt: the
//! data of the chapter's figure (acceptance, tokens per target pass, measured and
//! predicted speedup against `k`). Behind `kvlab spec-sweep`; chapter "Speculative
//! decoding", section "Sweeping drafters and k".
//!
//! Every cell is one [`run_experiment`]: plain cached decoding, then speculative
//! decoding with a freshly built drafter (a model drafter's own cache starts empty in
//! every cell, so no cell inherits another's work), on the same prompt and options. Plain
//! decoding is re-timed in every cell, next to its speculative twin, so a slow moment of
//! a shared machine hits both sides of a ratio alike.

use super::speculative::{run_experiment, SpecExperiment};
use super::timing::machine_name;
use crate::backend::CacheLayout;
use crate::cache::CacheKind;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::speculative::{DrafterSpec, SpecOptions};
use serde::Serialize;

/// One (drafter, k) cell.
#[derive(Debug, Clone, Serialize)]
pub struct SweepCell {
    pub drafter: String,
    pub k: usize,
    /// Accepted drafts / proposed drafts (α).
    pub acceptance_rate: f64,
    pub mean_accepted_len: f64,
    pub tokens_per_forward: f64,
    pub target_forwards: usize,
    /// Plain total time / speculative total time, prefill included.
    pub speedup_total: f64,
    /// Decode throughput after the first token / after the first round.
    pub speedup_decode: f64,
    /// Leviathan et al.'s prediction (verify pass = one step) from α, k and `c`.
    pub predicted_speedup: f64,
    /// The same with the measured verify cost.
    pub predicted_speedup_measured_verify: f64,
    /// `c`: drafting cost per drafted token, in plain decode steps.
    pub draft_cost_ratio: f64,
    /// One verify pass, in plain decode steps.
    pub verify_cost_ratio: f64,
    pub tokens_identical: bool,
}

impl SweepCell {
    fn of(e: &SpecExperiment, k: usize) -> SweepCell {
        let s = &e.speculative;
        SweepCell {
            drafter: s.drafter.clone(),
            k,
            acceptance_rate: s.acceptance_rate,
            mean_accepted_len: s.mean_accepted_len,
            tokens_per_forward: s.tokens_per_forward,
            target_forwards: s.target_forwards,
            speedup_total: e.speedup_total,
            speedup_decode: e.speedup_decode,
            predicted_speedup: e.predicted_speedup,
            predicted_speedup_measured_verify: e.predicted_speedup_measured_verify,
            draft_cost_ratio: e.draft_cost_ratio,
            verify_cost_ratio: e.verify_cost_ratio,
            tokens_identical: e.tokens_identical,
        }
    }
}

/// `kvlab spec-sweep`'s report.
#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    pub model: String,
    pub machine: String,
    pub cache: CacheKind,
    pub prompt_tokens: usize,
    pub max_new_tokens: usize,
    /// Temperature 0: every cell must emit plain decoding's tokens.
    pub greedy: bool,
    /// Tokens plain decoding generated (the same in every cell).
    pub new_tokens: usize,
    /// Plain cached decoding's time per decode step, median over the cells.
    pub plain_tpot_ms: f64,
    pub cells: Vec<SweepCell>,
}

impl SweepReport {
    /// Greedy speculative decoding must emit plain decoding's tokens in every cell (with
    /// sampling only the distribution is the same: nothing to check here).
    pub fn check(&self) -> Result<()> {
        if !self.greedy {
            return Ok(());
        }
        match self.cells.iter().find(|c| !c.tokens_identical) {
            None => Ok(()),
            Some(c) => Err(Error::Mismatch(format!(
                "greedy speculative decoding with {} at k = {} emitted other tokens than plain decoding",
                c.drafter, c.k
            ))),
        }
    }
}

// ANCHOR: sweep
/// Runs every `drafters` x `draft_lens` cell on `prompt` with `base`'s options (its
/// `draft_len` replaced by each of `draft_lens`).
pub fn run(
    model: &Model,
    name: &str,
    prompt: &[u32],
    drafters: &[DrafterSpec],
    draft_lens: &[usize],
    base: &SpecOptions,
    layout: CacheLayout,
) -> Result<SweepReport> {
    if drafters.is_empty() || draft_lens.is_empty() {
        return Err(Error::InvalidArgument(
            "give at least one drafter (--drafters) and one draft length (--draft-lens)".into(),
        ));
    }
    let mut cells = Vec::with_capacity(drafters.len() * draft_lens.len());
    let (mut new_tokens, mut tpots) = (0, Vec::new());
    for spec in drafters {
        for &k in draft_lens {
            let opts = SpecOptions {
                draft_len: k,
                ..base.clone()
            };
            opts.validate(model)?; // before the (slow) drafter is built
            let mut drafter = spec.build(model)?;
            let e = run_experiment(model, drafter.as_mut(), prompt, &opts, layout)?;
            new_tokens = e.new_tokens;
            tpots.push(e.plain_tpot_ms);
            cells.push(SweepCell::of(&e, k));
        }
    }
    Ok(SweepReport {
        model: name.into(),
        machine: machine_name(),
        cache: layout.kind,
        prompt_tokens: prompt.len(),
        max_new_tokens: base.max_new_tokens,
        greedy: base.sampler.temperature == 0.0,
        new_tokens,
        plain_tpot_ms: super::timing::median(tpots),
        cells,
    })
}
// ANCHOR_END: sweep
