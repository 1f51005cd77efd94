//! Plain cached decoding vs speculative decoding on the same prompt: are the tokens the
//! same, how much faster is it, and how much faster *should* it be. Chapter
//! "Speculative decoding", section "Measured".
//!
//! The prediction is Leviathan et al. 2023's (Theorem 3.8 and §3.4): with per-token
//! acceptance `α`, draft length `k` and a draft step costing `c` target steps, a round
//! emits `(1 - α^(k+1)) / (1 - α)` tokens on average and costs `c·k + 1` target steps, so
//!
//! ```text
//! speedup = (1 - α^(k+1)) / ((1 - α)(c·k + 1))
//! ```
//!
//! The formula assumes that verifying `k + 1` tokens costs one decode step (decode is
//! memory-bound: the weights are streamed once whatever the number of rows). That is
//! measured too (`verify_cost_ratio`), and a second prediction uses the measured cost.

use crate::backend::{cpu_decoder, CacheLayout};
use crate::cache::CacheKind;
use crate::error::Result;
use crate::generate::{check_request, generate_with, GenerateOptions, PathKind};
use crate::model::Model;
use crate::speculative::{generate_speculative, Drafter, SpecGeneration, SpecOptions};
use serde::Serialize;

/// One plain-vs-speculative comparison.
#[derive(Debug, Clone, Serialize)]
pub struct SpecExperiment {
    pub cache: CacheKind,
    pub prompt_tokens: usize,
    /// Tokens the plain run generated.
    pub new_tokens: usize,
    pub plain_total_ms: f64,
    pub plain_ttft_ms: f64,
    /// Plain cached decoding's time per decode step: the unit `c` is measured in.
    pub plain_tpot_ms: f64,
    pub plain_decode_tok_s: f64,
    pub speculative: SpecGeneration,
    /// The two runs emitted the same ids (always, when greedy; by chance when sampling).
    pub tokens_identical: bool,
    /// `plain_total_ms / speculative.total_ms` (prefill included on both sides).
    pub speedup_total: f64,
    /// Decode throughput after the first token (plain) / after the first round (speculative).
    pub speedup_decode: f64,
    /// `c`: drafting time per drafted token, in plain decode steps (rounds after the first).
    pub draft_cost_ratio: f64,
    /// One verify pass (1 + k rows), in plain decode steps: 1 if decoding were purely
    /// memory-bound.
    pub verify_cost_ratio: f64,
    /// Leviathan et al.'s prediction from `acceptance_rate`, `k` and `c`.
    pub predicted_speedup: f64,
    /// The same with the measured verify cost in place of 1.
    pub predicted_speedup_measured_verify: f64,
}

// ANCHOR: predicted
/// Leviathan et al. 2023's expected speedup: `(1 - α^(k+1)) / ((1 - α)(c·k + 1))`.
/// `verify_cost` generalises the `1` (one target step per round) to what was measured.
pub fn predicted_speedup(alpha: f64, k: usize, c: f64, verify_cost: f64) -> f64 {
    let tokens_per_round = if alpha >= 1.0 {
        (k + 1) as f64 // the limit of the geometric sum as α → 1
    } else {
        (1.0 - alpha.powi(k as i32 + 1)) / (1.0 - alpha)
    };
    tokens_per_round / (c * k as f64 + verify_cost)
}
// ANCHOR_END: predicted

/// Runs plain cached decoding, then speculative decoding with `drafter`, on the same
/// prompt and options, each on a fresh cache of layout `layout`.
pub fn run_experiment(
    model: &Model,
    drafter: &mut dyn Drafter,
    prompt: &[u32],
    opts: &SpecOptions,
    layout: CacheLayout,
) -> Result<SpecExperiment> {
    opts.validate(model)?;
    check_request(&model.config, prompt, opts.max_new_tokens)?;
    let plain_opts = GenerateOptions {
        max_new_tokens: opts.max_new_tokens,
        path: PathKind::Cached,
        sampler: opts.sampler,
        eos_ids: opts.eos_ids.clone(),
    };
    let (n, max_new, bs) = (prompt.len(), opts.max_new_tokens, layout.block_size);
    let mut decoder = cpu_decoder(model, PathKind::Cached, layout, n, max_new)?;
    let plain = generate_with(decoder.as_mut(), prompt, &plain_opts, |_| {})?;
    drop(decoder);

    let mut store = crate::cache::new_store(&model.config, layout.kind, n + max_new, bs)?;
    let spec = generate_speculative(model, store.as_mut(), drafter, prompt, opts, |_, _| {})?;

    let per = |ms: f64, count: usize| if count > 0 { ms / count as f64 } else { 0.0 };
    let step_ms = plain.tpot_ms;
    let draft_cost_ratio = per(spec.decode_draft_ms, spec.decode_proposed) / step_ms;
    let verify_cost_ratio = per(spec.decode_verify_ms, spec.decode_rounds) / step_ms;
    let (alpha, k) = (spec.acceptance_rate, opts.draft_len);
    Ok(SpecExperiment {
        cache: layout.kind,
        prompt_tokens: n,
        new_tokens: plain.generated_ids.len(),
        plain_total_ms: plain.total_ms,
        plain_ttft_ms: plain.ttft_ms,
        plain_tpot_ms: plain.tpot_ms,
        plain_decode_tok_s: plain.decode_tok_s,
        tokens_identical: plain.generated_ids == spec.generated_ids,
        speedup_total: plain.total_ms / spec.total_ms,
        speedup_decode: if plain.decode_tok_s > 0.0 {
            spec.decode_tok_s / plain.decode_tok_s
        } else {
            0.0
        },
        draft_cost_ratio,
        verify_cost_ratio,
        predicted_speedup: predicted_speedup(alpha, k, draft_cost_ratio, 1.0),
        predicted_speedup_measured_verify: predicted_speedup(
            alpha,
            k,
            draft_cost_ratio,
            verify_cost_ratio,
        ),
        speculative: spec,
    })
}
