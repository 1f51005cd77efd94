//! Driving the engine through a whole load, for the experiments that measure it
//! (`batching.rs`, `engine_speculation.rs`): requests in, every iteration run, tokens,
//! reports, time and counters out.

use crate::batch::BatchModel;
use crate::cache::{KvElement, KvPolicy};
use crate::config::Config;
use crate::engine::{
    Engine, EngineConfig, EngineMetrics, Event, Policy, Request, SamplingParams, StepReport,
};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// A greedy request of `prompt`, `max_tokens` new tokens at most, no stop token.
pub fn greedy(prompt: Vec<u32>, max_tokens: usize) -> Request {
    Request {
        prompt,
        max_tokens,
        sampling: SamplingParams::default(),
        stop_ids: Vec::new(),
    }
}

/// What one load did in the engine.
pub struct LoadRun {
    /// Each request's tokens, in submission order.
    pub tokens: Vec<Vec<u32>>,
    /// Every iteration's report.
    pub reports: Vec<StepReport>,
    /// Wall time from the first iteration to the last.
    pub seconds: f64,
    /// The engine's counters at the end.
    pub metrics: EngineMetrics,
}

/// Runs `requests` through an engine of `config` until all are done.
pub fn run_all(
    model: &Arc<dyn BatchModel>,
    config: EngineConfig,
    requests: &[Request],
) -> Result<LoadRun> {
    let mut engine = Engine::new(model.clone(), config)?;
    let mut index = HashMap::new();
    for (i, r) in requests.iter().enumerate() {
        let id = engine.add(r.clone()).map_err(submit_error)?;
        index.insert(id, i);
    }
    let mut tokens = vec![Vec::new(); requests.len()];
    let mut reports = Vec::new();
    let start = Instant::now();
    while engine.has_work() {
        let report = engine.step()?;
        collect(&report, &index, &mut tokens)?;
        reports.push(report);
    }
    Ok(LoadRun {
        tokens,
        reports,
        seconds: start.elapsed().as_secs_f64(),
        metrics: engine.metrics(),
    })
}

/// Appends `report`'s tokens to `tokens[index[request id]]`; a failed request is an error.
pub fn collect(
    report: &StepReport,
    index: &HashMap<u64, usize>,
    tokens: &mut [Vec<u32>],
) -> Result<()> {
    for (id, event) in &report.events {
        match event {
            Event::Token { id: t } => tokens[index[id]].push(*t),
            Event::Failed { message } => return Err(Error::Internal(message.clone())),
            Event::Finished { .. } => {}
        }
    }
    Ok(())
}

/// The engine's refusal of a request, as an error of the experiment.
pub fn submit_error(e: crate::engine::SubmitError) -> Error {
    match e {
        crate::engine::SubmitError::Invalid(e) => e,
        other => Error::Internal(other.to_string()),
    }
}

/// An engine under `policy` with a pool of `kv` blocks of `block_size` for `requests`
/// requests of `positions` positions each, with room to spare (a block's partial tail
/// per request, and a few blocks more).
pub fn config_for(
    model: &Config,
    kv: KvPolicy,
    block_size: usize,
    policy: Policy,
    requests: usize,
    positions: usize,
) -> Result<EngineConfig> {
    let element = KvElement::for_pool(model, kv, "paged")?;
    let token_bytes = element.bytes_per_token(model);
    let per_request = positions + block_size + 32;
    Ok(EngineConfig {
        policy,
        max_batch_tokens: 2048,
        max_batch_seqs: requests.max(1),
        kv_budget_bytes: (requests * per_request + 4 * block_size + 64) * token_bytes,
        block_size,
        kv,
        ..EngineConfig::default()
    })
}
