//! `kvlab bench-batch`: the serving engine's throughput against concurrency, and the
//! decode stall with and without chunked prefill (book: scheduling.md).

use crate::args::{JsonArgs, ModelArgs};
use crate::print;
use clap::Args;
use kvlab::error::Result;
use kvlab::lab::batching::{self, BatchingOptions};
use std::sync::Arc;

#[derive(Args)]
pub struct BenchBatchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Numbers of concurrent greedy requests, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    pub concurrency: Vec<usize>,
    /// Prompt tokens of each request (synthetic ids).
    #[arg(long, default_value_t = 32)]
    pub prompt_len: usize,
    /// Tokens each request generates.
    #[arg(long, default_value_t = 32)]
    pub max_tokens: usize,
    /// Stall experiment: requests decoding when the long prompt arrives.
    #[arg(long, default_value_t = 4)]
    pub running: usize,
    /// Stall experiment: tokens of the prompt that arrives.
    #[arg(long, default_value_t = 1000)]
    pub long_prompt: usize,
    /// Stall experiment: the token budget of one iteration (decodes + prefill chunk).
    #[arg(long, default_value_t = 128)]
    pub stall_budget: usize,
    #[command(flatten)]
    pub out: JsonArgs,
}

pub fn bench_batch(args: BenchBatchArgs) -> Result<()> {
    let loaded = args.model.load(0, false)?;
    let options = BatchingOptions {
        concurrency: args.concurrency,
        prompt_len: args.prompt_len,
        max_tokens: args.max_tokens,
        running: args.running,
        long_prompt: args.long_prompt,
        stall_budget: args.stall_budget,
    };
    let report = batching::run(Arc::new(loaded.model), &loaded.name, options)?;
    if args.out.json {
        return print::json(&report);
    }
    print::batching(&report);
    Ok(())
}
