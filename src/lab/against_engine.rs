//! `kvlab compare --impl textbook|learner`: the same prompt through the engine too, to
//! say whether another implementation of the pass gives the engine's tokens, and how
//! close its logits come (book: forward-pass.md, "Your code in the engine").

use serde::Serialize;

use crate::error::Result;
use crate::generate::{generate_with, Decoder, GenerateOptions};
use crate::learner::KernelCheck;

/// One implementation of the forward pass against the engine, on one prompt.
#[derive(Debug, Clone, Serialize)]
pub struct AgainstEngine {
    /// `textbook` or `learner`.
    pub implementation: String,
    /// The files its kernels come from (for the learner: their exercise files).
    pub files: Vec<String>,
    /// The engine's tokens for the same prompt and options (cached path, f32 rows).
    pub engine_ids: Vec<u32>,
    /// This implementation's cached path generated exactly `engine_ids`.
    pub identical_tokens: bool,
    /// The first generated position where the two differ (0 = the first token).
    pub first_difference: Option<usize>,
    /// The first token's logits (`[vocab]`): the largest |engine − this implementation|,
    /// `null` when this implementation's are not finite.
    pub first_logits_max_abs_diff: Option<f32>,
    /// Every one of the first token's logits has the engine's bits.
    pub first_logits_bitwise: bool,
    /// `--impl learner`: each of the learner's functions against kvlab's
    /// ([`crate::learner::check_kernels`]); empty for the textbook.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<KernelCheck>,
}

/// Runs `prompt` through a fresh decoder of `engine` and one of `other` (the first
/// token's logits), and one generation of `engine`, to compare with `other_ids` (the
/// tokens `other`'s cached path generated with the same `opts`).
pub fn against_engine<'a>(
    mut engine: impl FnMut() -> Result<Box<dyn Decoder + 'a>>,
    mut other: impl FnMut() -> Result<Box<dyn Decoder + 'a>>,
    prompt: &[u32],
    opts: &GenerateOptions,
    other_ids: &[u32],
    implementation: &str,
    files: &[&str],
) -> Result<AgainstEngine> {
    let engine_logits = engine()?.prefill(prompt)?;
    let other_logits = other()?.prefill(prompt)?;
    let engine_ids = generate_with(engine()?.as_mut(), prompt, opts, |_| {})?.generated_ids;
    let first_difference = engine_ids
        .iter()
        .zip(other_ids)
        .position(|(a, b)| a != b)
        .or((engine_ids.len() != other_ids.len()).then(|| engine_ids.len().min(other_ids.len())));
    let finite = other_logits.iter().all(|x| x.is_finite());
    let max_abs_diff = engine_logits
        .iter()
        .zip(&other_logits)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    Ok(AgainstEngine {
        implementation: implementation.into(),
        files: files.iter().map(|f| f.to_string()).collect(),
        identical_tokens: first_difference.is_none(),
        first_difference,
        first_logits_max_abs_diff: finite.then_some(max_abs_diff),
        first_logits_bitwise: engine_logits.len() == other_logits.len()
            && engine_logits
                .iter()
                .zip(&other_logits)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
        engine_ids,
        kernels: Vec::new(),
    })
}
