//! `kvlab bench-batch`: the serving engine's throughput against concurrency, and the
//! decode stall with and without chunked prefill (book: scheduling.md).

use crate::args::{parse_weights, BlockSizeArgs, DtypeArgs, JsonArgs, KvArgs, ModelArgs, SpecArgs};
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
    pub weights: DtypeArgs,
    /// Also run each level's continuous load on these weights, right after (e.g.
    /// `f32:rows`, `bf16`, `int8`): what `--dtype`/`--layout` buy, side by side.
    #[arg(long, value_parser = parse_weights)]
    pub against: Option<DtypeArgs>,
    #[command(flatten)]
    pub block: BlockSizeArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// With --speculative: concurrent requests of the copy load run without and with drafts.
    #[arg(long, default_value_t = 4)]
    pub spec_concurrency: usize,
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
        kv: args.kv.policy()?,
        block_size: args.block.block_size,
        speculation: args.spec.engine()?,
        spec_concurrency: args.spec_concurrency,
    };
    let loaded_model = Arc::new(loaded.model);
    let against = match args.against {
        Some(weights) => Some(weights.batch_model(loaded_model.clone())?),
        None => None,
    };
    let model = args.weights.batch_model(loaded_model)?;
    let report = batching::run(model, against, &loaded.name, options)?;
    if args.out.json {
        return print::json(&report);
    }
    print::batching(&report);
    Ok(())
}

#[derive(Args)]
pub struct BenchDisaggArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Requests in the seeded workload (`kvlab loadtest`'s generator).
    #[arg(long, default_value_t = 12)]
    pub requests: usize,
    /// Mean arrivals per second (Poisson).
    #[arg(long, default_value_t = 2.0)]
    pub rate: f64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Kinds of requests and their weights: short (20-60 prompt tokens), long (900-1100).
    #[arg(long, default_value = "short:3,long:1")]
    pub prompt_mix: String,
    /// Tokens one iteration may run (decodes + a prefill chunk).
    #[arg(long, default_value_t = 256)]
    pub max_batch_tokens: usize,
    #[command(flatten)]
    pub weights: DtypeArgs,
    #[command(flatten)]
    pub block: BlockSizeArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    #[command(flatten)]
    pub out: JsonArgs,
}

/// `kvlab bench-disagg`: prefill/decode disaggregation over loopback TCP vs colocated.
pub fn bench_disagg(args: BenchDisaggArgs) -> Result<()> {
    let loaded = args.model.load(0, false)?;
    let options = kvlab::lab::disagg::DisaggOptions {
        requests: args.requests,
        rate: args.rate,
        seed: args.seed,
        mix: kvlab::server::workload::PromptMix::parse(&args.prompt_mix)?,
        max_batch_tokens: args.max_batch_tokens,
        block_size: args.block.block_size,
        kv: args.kv.policy()?,
    };
    let model = args.weights.batch_model(Arc::new(loaded.model))?;
    let report = kvlab::lab::disagg::run(model, &loaded.name, options)?;
    if args.out.json {
        return print::json(&report);
    }
    print::disagg(&report);
    Ok(())
}
