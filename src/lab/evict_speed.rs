//! `kvlab evict-speed`: a decode step's cost as the text grows, full cache vs sliding
//! window (book: eviction.md).
//!
//! The full cache's step reads every position seen, so it slows down as the text grows;
//! a window's step reads at most `window` rows whatever the position, so its cost is
//! flat. For each context, both caches are filled with `context` tokens of the text (the
//! window in passes of `window - sinks`, the most it takes at once), then `reps` decode
//! steps of each are timed, taking turns, after one warm-up; medians are reported.

use crate::cache::{KvStore, PreallocatedCache, WindowCache};
use crate::error::{Error, Result};
use crate::lab::timing::{machine_name, median, ms_since};
use crate::model::{KvSource, Model};
use crate::simd::WeightElem;
use serde::Serialize;
use std::time::Instant;

/// One cache at one context.
#[derive(Debug, Clone, Serialize)]
pub struct StepCost {
    /// `full` or `window-w256-s4`.
    pub cache: String,
    /// Positions seen before the timed steps.
    pub context: usize,
    /// Rows attention read at the last timed step.
    pub rows_attended: usize,
    /// Median milliseconds of one decode step.
    pub step_ms: f64,
    pub tokens_per_s: f64,
    /// Bytes the cache reserved.
    pub kv_cache_bytes: usize,
}

/// Every cache at every context.
#[derive(Debug, Clone, Serialize)]
pub struct EvictSpeedReport {
    pub machine: String,
    pub window: usize,
    pub sinks: usize,
    pub reps: usize,
    pub points: Vec<StepCost>,
}

/// Fills `cache` with the first `context` tokens of `text` (cycled), as many per pass as
/// the cache takes.
fn fill<E: WeightElem>(
    model: &Model<E>,
    cache: &mut dyn KvStore,
    text: &[u32],
    context: usize,
) -> Result<()> {
    let mut tokens = text.iter().copied().cycle();
    while cache.len() < context {
        let n = cache.max_pass_tokens().min(context - cache.len());
        let chunk: Vec<u32> = tokens.by_ref().take(n).collect();
        model.forward(&chunk, KvSource::Cache(cache))?;
    }
    Ok(())
}

/// One timed decode step (the next token of the text) on `cache`, in milliseconds.
fn timed_step<E: WeightElem>(
    model: &Model<E>,
    cache: &mut dyn KvStore,
    text: &[u32],
) -> Result<f64> {
    let token = text[cache.len() % text.len()];
    let start = Instant::now();
    model.forward(&[token], KvSource::Cache(cache))?;
    Ok(ms_since(start))
}

// ANCHOR: evict_speed
/// A decode step at each of `contexts`, with the full cache and with a `window`-position
/// window (`sinks` of them sinks).
pub fn evict_speed<E: WeightElem>(
    model: &Model<E>,
    text: &[u32],
    window: usize,
    sinks: usize,
    contexts: &[usize],
    reps: usize,
) -> Result<EvictSpeedReport> {
    if text.is_empty() {
        return Err(Error::EmptyPrompt);
    }
    let max_context = model.config.max_position_embeddings;
    let mut points = Vec::new();
    for &context in contexts {
        // The steps themselves (a warm-up and `reps`) come after the context.
        let end = context.saturating_add(reps + 1);
        if context == 0 || end > max_context {
            return Err(Error::InvalidArgument(format!(
                "context {context} (+{} timed steps) must be between 1 and the model's {max_context} positions",
                reps + 1
            )));
        }
        let mut full = PreallocatedCache::new(&model.config, end)?;
        let mut ring = WindowCache::new(&model.config, window, sinks)?;
        fill(model, &mut full, text, context)?;
        fill(model, &mut ring, text, context)?;
        // One warm-up step each, then the two caches in turn, so that whatever else the
        // machine does slows both alike; medians (`lab/timing.rs`).
        let (mut full_ms, mut ring_ms) = (Vec::new(), Vec::new());
        for rep in 0..=reps {
            let (f, r) = (
                timed_step(model, &mut full, text)?,
                timed_step(model, &mut ring, text)?,
            );
            if rep > 0 {
                full_ms.push(f);
                ring_ms.push(r);
            }
        }
        // After a step, the rows held are those its attention read.
        for (name, ms, cache) in [
            ("full".to_string(), full_ms, &full as &dyn KvStore),
            (format!("window-w{window}-s{sinks}"), ring_ms, &ring),
        ] {
            let ms = median(ms);
            points.push(StepCost {
                cache: name,
                context,
                rows_attended: cache.rows_held(),
                step_ms: ms,
                tokens_per_s: 1e3 / ms,
                kv_cache_bytes: cache.bytes_reserved(),
            });
        }
    }
    Ok(EvictSpeedReport {
        machine: machine_name(),
        window,
        sinks,
        reps,
        points,
    })
}
// ANCHOR_END: evict_speed
