//! Serving many requests at once, measured: behind `kvlab bench-batch`; chapter
//! "Scheduling prefill and decode" (book: scheduling.md).
//!
//! Two experiments on the engine of `src/engine/`:
//!
//! 1. **Throughput vs concurrency.** `c` greedy requests, all submitted at once, through
//!    the continuous engine, and the same `c` one at a time (`Policy::Sequential`):
//!    output tokens per second of each, and the median time of an iteration whose `c`
//!    rows are all decodes. The roofline chapter predicts the shape: a decode step
//!    streams every weight once whatever its row count, so `c` decodes batched cost little
//!    more than one until the arithmetic catches up, and tokens/s grows nearly `c`-fold.
//!    The tokens are checked identical between the two runs. With `--against` a second
//!    weight format (`f32:rows`, say) runs the same continuous load right after, at each
//!    level: what the format buys a serving engine, side by side in one run.
//! 2. **The decode stall.** `running` requests decoding when a long prompt arrives: with
//!    whole-prompt prefill (`Policy::Continuous`) the iteration that prefills it is as
//!    long as the whole prefill, and every running request waits that long for its next
//!    token; with chunked prefill (`Policy::ContinuousChunked`, Sarathi) the prompt runs
//!    in budget-sized chunks and the gaps stay short. The timeline of every iteration
//!    and the inter-token latencies (ITL) of the running requests are reported.
//! 3. With `--speculative ngram`: a load that copies its prompt, through the engine
//!    without and with prompt-lookup drafts (`engine_speculation.rs`).

use super::bench::memory_bandwidth;
use super::engine_load::{collect, config_for, greedy, run_all, submit_error, LoadRun};
use super::engine_speculation::{self, CopyLoad, SpeculationRun};
use super::timing::{machine_name, median, synthetic_prompt};
use crate::batch::BatchModel;
use crate::cache::KvPolicy;
use crate::engine::{Engine, EngineConfig, Policy, Request, Speculation, StepReport};
use crate::error::{Error, Result};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// What `kvlab bench-batch` measures, and how much.
#[derive(Debug, Clone, Serialize)]
pub struct BatchingOptions {
    /// Numbers of concurrent requests.
    pub concurrency: Vec<usize>,
    pub prompt_len: usize,
    pub max_tokens: usize,
    /// Requests decoding when the long prompt arrives.
    pub running: usize,
    pub long_prompt: usize,
    /// Token budget of an iteration in the stall experiment (the chunk size, less the decodes).
    pub stall_budget: usize,
    /// What the engine's pool stores (`--kv`: full, int8, int4-per-token).
    pub kv: KvPolicy,
    /// Positions per block of the engine's pool (`--block-size`).
    pub block_size: usize,
    /// `--speculative ngram`: also run an input-grounded load at `spec_concurrency`
    /// without and with drafts (`engine_speculation.rs`).
    pub speculation: Option<Speculation>,
    pub spec_concurrency: usize,
}

/// One concurrency level.
#[derive(Debug, Clone, Serialize)]
pub struct ConcurrencyPoint {
    pub concurrency: usize,
    /// Output tokens/s, one request at a time.
    pub sequential_tok_s: f64,
    /// Output tokens/s, all at once through the continuous engine.
    pub continuous_tok_s: f64,
    /// `continuous_tok_s / sequential_tok_s`.
    pub speedup: f64,
    /// Median time of an iteration whose rows are `concurrency` decodes.
    pub decode_iteration_ms: f64,
    /// Both runs produced the same tokens for every request.
    pub tokens_identical: bool,
    /// With `--against`: the same continuous load on those weights, just after.
    pub against: Option<AgainstPoint>,
}

/// The continuous run of one concurrency level on the `--against` weights.
#[derive(Debug, Clone, Serialize)]
pub struct AgainstPoint {
    pub continuous_tok_s: f64,
    pub decode_iteration_ms: f64,
    /// The main weights' `continuous_tok_s` over these.
    pub gain: f64,
}

/// One iteration of the stall experiment.
#[derive(Debug, Clone, Serialize)]
pub struct IterationPoint {
    pub iteration: usize,
    /// When it ended, since the first iteration started.
    pub end_ms: f64,
    pub ms: f64,
    pub decode_rows: usize,
    pub prefill_rows: usize,
}

/// The stall experiment under one policy.
#[derive(Debug, Clone, Serialize)]
pub struct StallRun {
    pub policy: Policy,
    pub iterations: Vec<IterationPoint>,
    /// Gaps between consecutive tokens of the running requests, in ms.
    pub itl_ms: Vec<f64>,
    pub p50_itl_ms: f64,
    pub p99_itl_ms: f64,
    pub max_itl_ms: f64,
    /// Time to the long prompt's first token, from its arrival.
    pub long_ttft_ms: f64,
}

/// `kvlab bench-batch`'s report.
#[derive(Debug, Clone, Serialize)]
pub struct BatchingReport {
    pub model: String,
    pub machine: String,
    pub options: BatchingOptions,
    /// The engine's weights (`--dtype`, `--layout`): "bf16 in panels".
    pub weights: String,
    /// The second format's, with `--against`.
    pub against_weights: Option<String>,
    /// Bytes every forward pass streams (the weights).
    pub weight_bytes: f64,
    /// Measured memory read bandwidth, bytes/s.
    pub bandwidth_bytes_s: f64,
    /// The bandwidth roof of one decode step: `weight_bytes / bandwidth`.
    pub roof_step_ms: f64,
    pub points: Vec<ConcurrencyPoint>,
    pub stall: Vec<StallRun>,
    /// With `--speculative`: the copy load without and with drafts.
    pub speculation: Option<SpeculationRun>,
}

// ANCHOR: throughput
/// Output tokens/s of `c` concurrent greedy requests, batched and one at a time (and
/// batched on the `against` weights).
fn concurrency_point(
    model: &Arc<dyn BatchModel>,
    against: Option<&Arc<dyn BatchModel>>,
    o: &BatchingOptions,
    c: usize,
) -> Result<ConcurrencyPoint> {
    let vocab = model.config().vocab_size;
    let requests: Vec<Request> = (0..c)
        .map(|i| greedy(synthetic_prompt(o.prompt_len, vocab, i + 1), o.max_tokens))
        .collect();
    let positions = o.prompt_len + o.max_tokens;
    let config = |policy| config_for(model.config(), o.kv, o.block_size, policy, c, positions);
    let sequential = run_all(model, config(Policy::Sequential)?, &requests)?;
    let continuous = config(Policy::ContinuousChunked)?;
    let LoadRun {
        tokens: cont_tokens,
        reports,
        seconds: cont_s,
        ..
    } = run_all(model, continuous.clone(), &requests)?;
    let generated: usize = cont_tokens.iter().map(Vec::len).sum();
    let against = match against {
        Some(other) => {
            let LoadRun {
                tokens,
                reports,
                seconds,
                ..
            } = run_all(other, continuous, &requests)?;
            let tok_s = tokens.iter().map(Vec::len).sum::<usize>() as f64 / seconds;
            Some(AgainstPoint {
                continuous_tok_s: tok_s,
                decode_iteration_ms: median(decode_only_ms(&reports, c)),
                gain: generated as f64 / cont_s / tok_s,
            })
        }
        None => None,
    };
    Ok(ConcurrencyPoint {
        concurrency: c,
        sequential_tok_s: generated as f64 / sequential.seconds,
        continuous_tok_s: generated as f64 / cont_s,
        speedup: sequential.seconds / cont_s,
        decode_iteration_ms: median(decode_only_ms(&reports, c)),
        tokens_identical: sequential.tokens == cont_tokens,
        against,
    })
}

/// The times of the iterations whose rows are `c` decodes, in ms.
fn decode_only_ms(reports: &[StepReport], c: usize) -> Vec<f64> {
    (reports.iter())
        .filter(|r| r.rows.len() == c && r.rows.iter().all(|row| row.rows == 1))
        .map(|r| r.seconds * 1e3)
        .collect()
}
// ANCHOR_END: throughput

// ANCHOR: stall
/// `o.running` requests decoding; after a few iterations a prompt of `o.long_prompt`
/// tokens arrives. Every iteration's time and rows, and the running requests' ITL.
fn stall_run(model: &Arc<dyn BatchModel>, o: &BatchingOptions, policy: Policy) -> Result<StallRun> {
    let vocab = model.config().vocab_size;
    let positions = o.long_prompt + o.max_tokens;
    let config = EngineConfig {
        max_batch_tokens: o.stall_budget,
        ..config_for(
            model.config(),
            o.kv,
            o.block_size,
            policy,
            o.running + 1,
            positions,
        )?
    };
    let mut engine = Engine::new(model.clone(), config)?;
    let mut index = HashMap::new();
    for i in 0..o.running {
        let prompt = synthetic_prompt(o.prompt_len, vocab, i + 1);
        index.insert(
            engine
                .add(greedy(prompt, o.max_tokens))
                .map_err(submit_error)?,
            i,
        );
    }
    let mut tokens = vec![Vec::new(); o.running + 1];
    let mut token_times: Vec<Vec<f64>> = vec![Vec::new(); o.running];
    let mut iterations = Vec::new();
    let (start, mut long_arrival, mut long_ttft_ms) = (Instant::now(), None, f64::NAN);
    // The long prompt arrives once the running requests are all decoding (or, if they
    // are done by then, at once).
    let arrive_at = 4;
    while engine.has_work() || long_arrival.is_none() {
        if long_arrival.is_none() && (iterations.len() == arrive_at || !engine.has_work()) {
            let prompt = synthetic_prompt(o.long_prompt, vocab, 0);
            let id = engine.add(greedy(prompt, 1)).map_err(submit_error)?;
            index.insert(id, o.running);
            long_arrival = Some(Instant::now());
        }
        let report = engine.step()?;
        let end_ms = start.elapsed().as_secs_f64() * 1e3;
        collect(&report, &index, &mut tokens)?;
        for (id, _) in &report.tokens {
            match index[id] {
                i if i < o.running => token_times[i].push(end_ms),
                _ => {
                    long_ttft_ms =
                        long_arrival.map_or(f64::NAN, |t| t.elapsed().as_secs_f64() * 1e3)
                }
            }
        }
        let decode_rows = report.rows.iter().filter(|r| r.rows == 1).count();
        iterations.push(IterationPoint {
            iteration: iterations.len(),
            end_ms,
            ms: report.seconds * 1e3,
            decode_rows,
            prefill_rows: report.n_rows() - decode_rows,
        });
    }
    // Gaps between decode tokens only (from the second token on: the first is the TTFT).
    let itl_ms: Vec<f64> = token_times
        .iter()
        .flat_map(|t| t.windows(2).skip(1).map(|w| w[1] - w[0]))
        .collect();
    let mut sorted = itl_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        sorted
            .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    Ok(StallRun {
        policy,
        p50_itl_ms: pct(0.5),
        p99_itl_ms: pct(0.99),
        max_itl_ms: pct(1.0),
        iterations,
        itl_ms,
        long_ttft_ms,
    })
}
// ANCHOR_END: stall

/// Both experiments.
pub fn run(
    model: Arc<dyn BatchModel>,
    against: Option<Arc<dyn BatchModel>>,
    name: &str,
    options: BatchingOptions,
) -> Result<BatchingReport> {
    let o = &options;
    let limit = model.config().max_position_embeddings;
    if o.concurrency.is_empty() || o.concurrency.contains(&0) {
        return Err(Error::InvalidArgument(
            "--concurrency: give one or more counts of at least 1 (e.g. 1,2,4,8)".into(),
        ));
    }
    if o.prompt_len == 0
        || o.max_tokens == 0
        || o.running == 0
        || o.spec_concurrency == 0
        || o.stall_budget <= o.running
    {
        return Err(Error::InvalidArgument(
            "--prompt-len, --max-tokens, --running and --spec-concurrency must be at least 1, and --stall-budget larger than --running".into(),
        ));
    }
    if o.concurrency.iter().any(|&c| c > 256) || o.running > 256 || o.spec_concurrency > 256 {
        return Err(Error::InvalidArgument(
            "--concurrency, --running and --spec-concurrency: at most 256 requests".into(),
        ));
    }
    for len in [o.prompt_len, o.long_prompt] {
        if len.checked_add(o.max_tokens).is_none_or(|n| n > limit) {
            return Err(Error::InvalidArgument(format!(
                "a prompt of {len} tokens + --max-tokens {} exceeds the model's {limit} positions: shorten them",
                o.max_tokens
            )));
        }
    }
    let weight_bytes = model.streamed_bytes();
    let bandwidth = memory_bandwidth();
    let points = o
        .concurrency
        .iter()
        .map(|&c| concurrency_point(&model, against.as_ref(), o, c))
        .collect::<Result<Vec<_>>>()?;
    let stall = [Policy::Continuous, Policy::ContinuousChunked]
        .into_iter()
        .map(|policy| stall_run(&model, o, policy))
        .collect::<Result<Vec<_>>>()?;
    let speculation = match o.speculation {
        Some(spec) => {
            let load = CopyLoad {
                concurrency: o.spec_concurrency,
                prompt_len: o.prompt_len,
                max_tokens: o.max_tokens,
                kv: o.kv,
                block_size: o.block_size,
            };
            Some(engine_speculation::run(&model, &load, spec)?)
        }
        None => None,
    };
    Ok(BatchingReport {
        model: name.to_string(),
        machine: machine_name(),
        options,
        weights: model.weights(),
        against_weights: against.as_ref().map(|a| a.weights()),
        weight_bytes,
        bandwidth_bytes_s: bandwidth,
        roof_step_ms: weight_bytes / bandwidth * 1e3,
        points,
        stall,
        speculation,
    })
}
