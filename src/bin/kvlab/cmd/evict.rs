//! `kvlab evict-speed` and `kvlab eval-table` (book: eviction.md).

use crate::args::{JsonArgs, ModelArgs};
use crate::checks::{in_range, MAX_REPS};
use crate::plot::pareto;
use crate::print;
use clap::Args;
use kvlab::error::{Error, Result};
use kvlab::lab::evict_speed::evict_speed as measure;
use kvlab::limits::{read_text_capped, MAX_PROMPT_BYTES};
use std::path::PathBuf;

#[derive(Args)]
pub struct EvictSpeedArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The text whose tokens fill the caches (cycled when shorter than a context).
    #[arg(long)]
    pub text_file: PathBuf,
    /// Positions the sliding window keeps.
    #[arg(long, default_value_t = 256)]
    pub window: usize,
    /// Of the window, the first positions always kept (attention sinks).
    #[arg(long, default_value_t = 4)]
    pub sinks: usize,
    /// Positions at which to time a decode step.
    #[arg(long, value_delimiter = ',', default_value = "512,2048")]
    pub contexts: Vec<usize>,
    /// Timed steps per point (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    #[command(flatten)]
    pub out: JsonArgs,
}

pub fn evict_speed(args: EvictSpeedArgs) -> Result<()> {
    kvlab::cache::window::check_window(args.window, args.sinks)?;
    in_range("--reps", args.reps, 1, MAX_REPS, "timed steps per point")?;
    let text = read_text_capped(&args.text_file, MAX_PROMPT_BYTES, "text file")?;
    let loaded = args.model.load(0, true)?;
    let ids = match loaded.tokenizer.as_ref() {
        Some(tokenizer) => tokenizer.encode(&text)?,
        None => kvlab::lab::timing::synthetic_prompt(4096, loaded.model.config.vocab_size, 0),
    };
    let report = measure(
        &loaded.model,
        &ids,
        args.window,
        args.sinks,
        &args.contexts,
        args.reps,
    )?;
    if args.out.json {
        return print::json(&report);
    }
    print::evict_speed(&report);
    Ok(())
}

#[derive(Args)]
pub struct EvalTableArgs {
    /// `kvlab eval --json` reports, one per line, all on the same text.
    #[arg(long, default_value = "book/src/figures/data/eval_pareto.jsonl")]
    pub data: PathBuf,
}

/// Every policy's accuracy and bytes as one Markdown table (the Pareto figure's numbers).
pub fn eval_table(args: EvalTableArgs) -> Result<()> {
    let text = read_text_capped(&args.data, MAX_PROMPT_BYTES, "eval reports")?;
    let bad = |e: String| Error::InvalidFile {
        path: args.data.clone(),
        msg: e,
    };
    let reports = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| bad(format!("a line is not JSON: {e}"))))
        .collect::<Result<Vec<serde_json::Value>>>()?;
    let rows = pareto::rows(&reports).map_err(|e| bad(e.to_string()))?;
    print::eval_table(&rows);
    Ok(())
}
