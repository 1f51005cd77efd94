//! `kvlab bench-context`: a real model's decode step (TPOT) against the context, on the
//! cache the cached path builds for it (book: sliding-window-model.md).
//!
//! A decode step streams every weight once and reads the cached rows of every layer.
//! SmolLM2 reads all `t` positions in each of its 30 layers, so its step grows linearly
//! with `t`; Gemma 3's 15 local layers read at most 512 rows whatever `t` is, and only
//! its 3 global layers grow: its step barely moves. The cache is filled with synthetic
//! K and V as `kvlab gqa` does (`lab/kv_fill.rs`; 8k tokens of real prefill per model
//! would take minutes, and a step's time depends on how many rows it reads, not on
//! what they hold); the weights are the model's own, f32, in rows.

use super::gqa::median_step_ms;
use super::kv_fill::fill;
use super::timing::machine_name;
use crate::cache::{contiguous_full, KvStore};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::rng::Rng;
use serde::Serialize;

/// One context: the step, and the cache it read.
#[derive(Debug, Clone, Serialize)]
pub struct TpotPoint {
    pub context: usize,
    /// Median time of one cached decode step with `context` positions cached.
    pub step_ms: f64,
    /// The model's own cache at `context + 1` positions: what it reserves, and the rows
    /// the step read (every position of a global layer, a local layer's window).
    pub kv_bytes_reserved: usize,
    pub kv_bytes_read: usize,
    /// Every position of every layer, for comparison.
    pub kv_bytes_full: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct TpotContextReport {
    pub model: String,
    pub machine: String,
    pub reps: usize,
    /// Layers of the model, and of them those that attend to a window.
    pub layers: usize,
    pub local_layers: usize,
    pub points: Vec<TpotPoint>,
}

// ANCHOR: tpot_context
/// The decode step of `model` at each of `contexts` (sorted, deduplicated, each below
/// the model's context), the median of `reps`.
pub fn run(
    model: &Model,
    name: &str,
    contexts: &[usize],
    reps: usize,
) -> Result<TpotContextReport> {
    let config = &model.config;
    let max = config.max_position_embeddings;
    let mut contexts = contexts.to_vec();
    contexts.sort_unstable();
    contexts.dedup();
    if contexts.is_empty() || contexts[0] == 0 || contexts[contexts.len() - 1] >= max {
        return Err(Error::InvalidArgument(format!(
            "--contexts {contexts:?}: give contexts between 1 and {} (this model's context less one)",
            max - 1
        )));
    }
    let mut points = Vec::with_capacity(contexts.len());
    let mut rng = Rng::new(1);
    for &context in &contexts {
        let mut cache = contiguous_full(config, context + 1)?;
        fill(&mut *cache, config, context, Some(&mut rng))?;
        let step_ms = median_step_ms(model, &mut *cache, context, reps.max(1))?;
        points.push(TpotPoint {
            context,
            step_ms,
            kv_bytes_reserved: cache.bytes_reserved(),
            kv_bytes_read: cache.bytes_used(),
            kv_bytes_full: crate::cache::bytes_per_token(config) * (context + 1),
        });
    }
    Ok(TpotContextReport {
        model: name.to_string(),
        machine: machine_name(),
        reps: reps.max(1),
        layers: config.num_hidden_layers,
        local_layers: config.local_layers(),
        points,
    })
}
// ANCHOR_END: tpot_context
