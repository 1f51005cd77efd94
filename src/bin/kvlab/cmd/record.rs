//! `kvlab record`: a scripted run of the engine written as a Chrome trace, for the live
//! view's replays and Perfetto (book: live-view.md).

use crate::args::{DtypeArgs, JsonArgs, ModelArgs};
use crate::print;
use clap::Args;
use kvlab::error::{Error, Result};
use kvlab::lab::replays::{self, SCENARIOS};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The scenario: prefix-sharing, stall-continuous, stall-chunked, preemption,
    /// pool-f32, pool-int8, pool-sliding (`--list` says what each shows).
    #[arg(required_unless_present = "list")]
    pub scenario: Option<String>,
    /// The trace file to write.
    #[arg(long, default_value = "kvlab-trace.json")]
    pub out: PathBuf,
    /// Lists the scenarios.
    #[arg(long)]
    pub list: bool,
    #[command(flatten)]
    pub weights: DtypeArgs,
    #[command(flatten)]
    pub json: JsonArgs,
}

pub fn record(args: RecordArgs) -> Result<()> {
    if args.list {
        for (name, what) in SCENARIOS {
            println!("{name:18} {what}");
        }
        return Ok(());
    }
    let scenario = args.scenario.unwrap_or_default();
    let loaded = args.model.load(0, true)?;
    let tokenizer = loaded.tokenizer.ok_or_else(|| {
        Error::InvalidArgument(
            "kvlab record needs the model's tokenizer (its prompts are text): give --model, not --random-weights".into(),
        )
    })?;
    let model = args.weights.batch_model(Arc::new(loaded.model))?;
    let report = replays::record(model, &tokenizer, &scenario, &args.out)?;
    if args.json.json {
        return print::json(&report);
    }
    println!(
        "{}: {} requests, {} iterations ({}, --kv {}, {} blocks of {}, budget {} tokens)",
        report.scenario,
        report.requests,
        report.iterations,
        report.policy,
        report.kv,
        report.pool_blocks,
        report.block_size,
        report.max_batch_tokens
    );
    println!(
        "  peak: {} running, {} blocks used, {} shared; {} preemptions; {} prompt tokens from the prefix cache",
        report.peak_running,
        report.peak_blocks_used,
        report.peak_shared_blocks,
        report.preemptions,
        report.prefix_hit_tokens
    );
    println!(
        "  longest iteration {:.1} ms, longest gap between two tokens {:.1} ms",
        report.longest_iteration_ms, report.max_inter_token_ms
    );
    println!(
        "  written to {} (open it in the live view's replay, or in Perfetto)",
        report.file
    );
    Ok(())
}
