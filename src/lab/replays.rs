//! `kvlab record`: small, scripted runs of the engine on the real model, recorded as
//! Chrome traces for the book's replays (book: live-view.md).
//!
//! Each scenario is a few requests arriving at chosen iterations, with a pool and a
//! budget small enough that what the chapter teaches happens on screen: blocks shared by
//! a common prefix, a long prompt stalling decodes (and chunked prefill curing it), the
//! youngest request preempted when the pool runs dry, an int8 pool running more
//! requests than an f32 one of the same bytes. The engine is the serving engine itself,
//! stepped here without a server or clocks of arrival, so the tokens and the blocks are
//! the same at every run; only the times differ.

use crate::batch::BatchModel;
use crate::cache::{KvElement, KvPolicy, RowCodes};
use crate::engine::{Engine, EngineConfig, Policy, RequestState, Snapshot, TraceWriter};
use crate::error::{Error, Result};
use crate::lab::engine_load::{greedy, submit_error};
use crate::tokenizer::Tokenizer;
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// The scenarios, by name, and what each shows.
pub const SCENARIOS: [(&str, &str); 7] = [
    (
        "prefix-sharing",
        "six questions after one system prompt: its blocks shared, then parked",
    ),
    (
        "stall-continuous",
        "a long prompt arrives while three requests decode, prefilled whole",
    ),
    (
        "stall-chunked",
        "the same, prefilled in chunks under a 64-token budget",
    ),
    (
        "preemption",
        "four requests in a pool too small for them: the youngest goes back",
    ),
    ("pool-f32", "six requests in 12 blocks' worth of bytes, f32"),
    (
        "pool-int8",
        "the same bytes in int8 blocks: more of them, more requests at once",
    ),
    (
        "pool-sliding",
        "the same bytes, a window per query of 32: blocks go back as answers grow",
    ),
];

/// A request of a scenario: its prompt text, the iteration it arrives at, its length.
struct Arrival {
    at_iteration: u64,
    prompt: String,
    max_tokens: usize,
}

/// One scenario: the engine's settings and its requests.
struct Scenario {
    policy: Policy,
    max_batch_tokens: usize,
    /// The pool, in f32 blocks' worth of bytes (an int8 pool gets more blocks of it).
    pool_f32_blocks: usize,
    kv: KvPolicy,
    arrivals: Vec<Arrival>,
}

const SYSTEM: &str = "You are a patient astronomy teacher. Answer every question about \
the solar system in one short, precise sentence that a twelve-year-old can follow, \
and never invent a number you are not sure of.";
const QUESTIONS: [&str; 6] = [
    "Why is Mars red?",
    "How long is a day on Venus?",
    "What are Saturn's rings made of?",
    "Which planet is the hottest?",
    "Why does the Moon have phases?",
    "What is the Kuiper belt?",
];
const STORY: &str = "The lighthouse keeper climbed the spiral stairs every evening, \
counting the steps as her father had taught her, and lit the great lamp that swept the \
dark water. Ships she would never meet passed safely because of that light. ";

fn arrival(at_iteration: u64, prompt: String, max_tokens: usize) -> Arrival {
    Arrival {
        at_iteration,
        prompt,
        max_tokens,
    }
}

fn scenario(name: &str) -> Result<Scenario> {
    let plain = |policy, max_batch_tokens, pool_f32_blocks, arrivals| Scenario {
        policy,
        max_batch_tokens,
        pool_f32_blocks,
        kv: KvPolicy::Full,
        arrivals,
    };
    let questions = |n: usize, gap: u64, max_tokens| -> Vec<Arrival> {
        (QUESTIONS.iter().take(n).enumerate())
            .map(|(i, q)| {
                arrival(
                    i as u64 * gap,
                    format!("{SYSTEM}\n\nQuestion: {q}\nAnswer:"),
                    max_tokens,
                )
            })
            .collect()
    };
    let stall = |policy| {
        let mut arrivals: Vec<Arrival> = (QUESTIONS.iter().take(3))
            .map(|q| arrival(0, format!("Question: {q}\nAnswer:"), 40))
            .collect();
        arrivals.push(arrival(
            8,
            format!("{}Summarize the story:", STORY.repeat(12)),
            8,
        ));
        plain(policy, 64, 96, arrivals)
    };
    let pool = |kv| Scenario {
        kv,
        ..plain(Policy::ContinuousChunked, 256, 12, questions(6, 0, 24))
    };
    Ok(match name {
        "prefix-sharing" => plain(Policy::ContinuousChunked, 128, 32, questions(6, 3, 16)),
        "stall-continuous" => stall(Policy::Continuous),
        "stall-chunked" => stall(Policy::ContinuousChunked),
        "preemption" => plain(Policy::ContinuousChunked, 256, 10, questions(4, 0, 48)),
        "pool-f32" => pool(KvPolicy::Full),
        "pool-int8" => pool(KvPolicy::Int8),
        // Answers twice as long, prompts in chunks of 32: a request's window (4 sinks and
        // the 28 latest positions) slides past its first blocks while it decodes.
        "pool-sliding" => Scenario {
            kv: KvPolicy::Sliding {
                window: 32,
                sinks: 4,
                codes: RowCodes::F32,
            },
            ..plain(Policy::ContinuousChunked, 32, 12, questions(6, 0, 48))
        },
        other => {
            let names: Vec<&str> = SCENARIOS.iter().map(|(n, _)| *n).collect();
            return Err(Error::InvalidArgument(format!(
                "no scenario `{other}`: pick one of {}",
                names.join(", ")
            )));
        }
    })
}

/// What a recording holds, in numbers.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub scenario: String,
    pub file: String,
    pub policy: &'static str,
    pub kv: &'static str,
    pub pool_blocks: usize,
    pub block_size: usize,
    pub max_batch_tokens: usize,
    pub requests: usize,
    pub iterations: u64,
    pub peak_running: usize,
    pub peak_blocks_used: usize,
    pub peak_shared_blocks: usize,
    pub preemptions: usize,
    pub prefix_hit_tokens: u64,
    /// The longest iteration, and the longest gap between two tokens of one request.
    pub longest_iteration_ms: f64,
    pub max_inter_token_ms: f64,
    pub generated_tokens: u64,
}

// ANCHOR: record
/// Runs scenario `name` on `model` and writes every iteration's snapshot to `out`.
pub fn record(
    model: Arc<dyn BatchModel>,
    tokenizer: &Tokenizer,
    name: &str,
    out: &Path,
) -> Result<ReplayReport> {
    let s = scenario(name)?;
    let f32_block = KvElement::for_pool(model.config(), KvPolicy::Full, "paged")?;
    let block_size = crate::cache::DEFAULT_BLOCK_SIZE;
    let config = EngineConfig {
        policy: s.policy,
        max_batch_tokens: s.max_batch_tokens,
        kv: s.kv,
        block_size,
        kv_budget_bytes: s.pool_f32_blocks * block_size * f32_block.bytes_per_token(model.config()),
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(model, config.clone())?;
    let mut writer = TraceWriter::create(out)?;
    let text = |ids: &[u32]| tokenizer.decode(ids).unwrap_or_default();
    let start = Instant::now();
    let mut pending: Vec<&Arrival> = s.arrivals.iter().collect();
    let mut report = ReplayReport {
        scenario: name.to_string(),
        file: out.display().to_string(),
        policy: s.policy.name(),
        kv: s.kv.name(),
        pool_blocks: engine.cache().pool().n_blocks(),
        block_size,
        max_batch_tokens: s.max_batch_tokens,
        requests: s.arrivals.len(),
        iterations: 0,
        peak_running: 0,
        peak_blocks_used: 0,
        peak_shared_blocks: 0,
        preemptions: 0,
        prefix_hit_tokens: 0,
        longest_iteration_ms: 0.0,
        max_inter_token_ms: 0.0,
        generated_tokens: 0,
    };
    while engine.has_work() || !pending.is_empty() {
        let now = engine.metrics().iterations;
        for a in pending.iter().filter(|a| a.at_iteration <= now) {
            let prompt = tokenizer.encode(&a.prompt)?;
            engine
                .add(greedy(prompt, a.max_tokens))
                .map_err(submit_error)?;
        }
        pending.retain(|a| a.at_iteration > now);
        let step = engine.step()?;
        let t_us = start.elapsed().as_micros() as u64;
        let snap = engine.snapshot(Some(&step), t_us, &text);
        writer.write(&snap)?;
        tally(&mut report, &snap);
    }
    writer.finish()?;
    let metrics = engine.metrics();
    report.iterations = metrics.iterations;
    report.prefix_hit_tokens = metrics.prefix_hit_tokens;
    report.generated_tokens = metrics.generated_tokens;
    Ok(report)
}
// ANCHOR_END: record

fn tally(report: &mut ReplayReport, snap: &Snapshot) {
    let running = (snap.requests.iter())
        .filter(|r| r.state == RequestState::Running)
        .count();
    report.peak_running = report.peak_running.max(running);
    report.peak_blocks_used = report.peak_blocks_used.max(snap.pool.used);
    report.peak_shared_blocks = report.peak_shared_blocks.max(snap.pool.shared);
    report.preemptions += snap.preempted.len();
    report.longest_iteration_ms = report.longest_iteration_ms.max(snap.seconds * 1e3);
    for &gap in &snap.inter_token_ms {
        report.max_inter_token_ms = report.max_inter_token_ms.max(gap);
    }
}
