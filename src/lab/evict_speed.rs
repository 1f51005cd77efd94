//! `kvlab evict-speed`: a decode step's cost as the text grows, full cache vs sliding
//! window (book: eviction.md).
//!
//! The full cache's step reads every position seen, so it slows down as the text grows;
//! a window's step reads at most `window` rows whatever the position, so its cost is
//! flat. For each context, each cache is filled with `context` tokens of the text (the
//! window in passes of `window - sinks`, the most it takes at once), then `reps` decode
//! steps are timed after one warm-up; the median is reported (`lab/timing.rs`).

use crate::cache::{KvStore, PreallocatedCache, WindowCache};
use crate::error::{Error, Result};
use crate::lab::timing::{machine_name, median_ms};
use crate::model::{KvSource, Model};
use crate::simd::WeightElem;
use serde::Serialize;

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

/// Fills `cache` with the first `context` tokens of `text` (cycled), `pass` at a time,
/// then times `reps` single-token steps.
fn step_cost<E: WeightElem>(
    model: &Model<E>,
    cache: &mut dyn KvStore,
    text: &[u32],
    context: usize,
    reps: usize,
) -> Result<(f64, usize)> {
    let mut tokens = text.iter().copied().cycle();
    while cache.len() < context {
        let n = cache.max_pass_tokens().min(context - cache.len());
        let chunk: Vec<u32> = tokens.by_ref().take(n).collect();
        model.forward(&chunk, KvSource::Cache(cache))?;
    }
    let ms = median_ms(reps, || {
        let token = tokens.next().unwrap_or(0);
        model
            .forward(&[token], KvSource::Cache(&mut *cache))
            .map(|_| ())
    })?;
    // After a step, the rows held are those its attention read.
    Ok((ms, cache.rows_held()))
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
        let (ms, rows) = step_cost(model, &mut full, text, context, reps)?;
        points.push(StepCost {
            cache: "full".into(),
            context,
            rows_attended: rows,
            step_ms: ms,
            tokens_per_s: 1e3 / ms,
            kv_cache_bytes: full.bytes_reserved(),
        });
        let mut ring = WindowCache::new(&model.config, window, sinks)?;
        let (ms, rows) = step_cost(model, &mut ring, text, context, reps)?;
        points.push(StepCost {
            cache: format!("window-w{window}-s{sinks}"),
            context,
            rows_attended: rows,
            step_ms: ms,
            tokens_per_s: 1e3 / ms,
            kv_cache_bytes: ring.bytes_reserved(),
        });
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
