//! The cache-layout experiments: `kvlab trace`, `kvlab capacity`, `kvlab prefix`.

use crate::args::{BlockSizeArgs, CacheArg, JsonArgs, ModelArgs, PromptArgs, SamplingArgs};
use crate::checks::{at_least, in_range, sum};
use crate::print;
use clap::Args;
use kvlab::cache::CacheKind;
use kvlab::error::{Error, Result};
use kvlab::generate::{check_request, GenerateOptions, PathKind};
use kvlab::lab::{capacity, shared_prompt, trace};
use kvlab::Config;
use std::path::PathBuf;

#[derive(Args)]
pub struct TraceArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub prompt: PromptArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Layouts to trace, side by side (on the CPU: the layouts live in src/cache/).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "preallocated,growable,paged"
    )]
    pub layouts: Vec<CacheArg>,
    #[command(flatten)]
    pub block: BlockSizeArgs,
    /// Folder for trace.csv and trace.svg (created).
    #[arg(long, default_value = "trace")]
    pub out: PathBuf,
    #[command(flatten)]
    pub json: JsonArgs,
}

#[derive(Args)]
pub struct CapacityArgs {
    /// KV cache memory: bytes, or with a unit (1GiB, 512MiB, 2GB).
    #[arg(long)]
    pub budget: String,
    /// Read the cache's shape from this model folder's config.json (default: SmolLM2-135M's
    /// shape; no weights are loaded).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Requests offered, in arrival order (admission stops at the first that does not fit).
    #[arg(long, default_value_t = 100_000)]
    pub requests: usize,
    /// Longest prompt of the mix (lengths are log-uniform from 16).
    #[arg(long, default_value_t = 1024)]
    pub max_prompt: usize,
    /// What each request may generate: the preallocated layout reserves this much.
    #[arg(long, default_value_t = 512)]
    pub max_new_tokens: usize,
    #[command(flatten)]
    pub block: BlockSizeArgs,
    /// What each cached value is: full (f32), int8 or int4-per-token (groups of 32).
    #[arg(long, default_value = "full", value_name = "ELEMENT")]
    pub kv: String,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub out: JsonArgs,
}

#[derive(Args)]
pub struct PrefixArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Requests that share the system prompt.
    #[arg(long, default_value_t = 4)]
    pub requests: usize,
    /// Tokens of the shared system prompt.
    #[arg(long, default_value_t = 1000)]
    pub shared_len: usize,
    /// Tokens of each request's own part.
    #[arg(long, default_value_t = 16)]
    pub suffix_len: usize,
    #[arg(long, default_value_t = 8)]
    pub max_new_tokens: usize,
    #[command(flatten)]
    pub block: BlockSizeArgs,
    #[command(flatten)]
    pub out: JsonArgs,
}

pub fn trace(args: TraceArgs) -> Result<()> {
    if args.layouts.is_empty() {
        return Err(Error::InvalidArgument(
            "give at least one layout: --layouts preallocated,growable,paged".into(),
        ));
    }
    let layouts: Vec<CacheKind> = args.layouts.iter().map(|&l| l.into()).collect();
    let loaded = args.model.load(args.sampling.seed, true)?;
    let model = &loaded.model;
    let prompt_ids = args
        .prompt
        .token_ids(loaded.tokenizer.as_ref(), &model.config)?;
    let opts = GenerateOptions {
        max_new_tokens: args.prompt.max_new_tokens,
        path: PathKind::Cached,
        sampler: args.sampling.config(),
        eos_ids: model.config.eos_ids(),
    };
    check_request(&model.config, &prompt_ids, opts.max_new_tokens)?;
    let json = args.json.json;
    if !json {
        eprintln!(
            "tracing {} layouts: prompt {} tokens, up to {} new...",
            layouts.len(),
            prompt_ids.len(),
            opts.max_new_tokens
        );
    }
    let block_size = args.block.block_size;
    let rows = trace::trace(model, &prompt_ids, &layouts, &opts, block_size)?;
    std::fs::create_dir_all(&args.out).map_err(|e| Error::io(&args.out, e))?;
    let csv = args.out.join("trace.csv");
    std::fs::write(&csv, trace::to_csv(&rows)).map_err(|e| Error::io(&csv, e))?;
    let title = format!(
        "KV cache by layout: prompt {} tokens, {} generated, block size {block_size}",
        prompt_ids.len(),
        rows.iter().map(|r| r.step).max().unwrap_or(0),
    );
    let svg = args.out.join("trace.svg");
    let values = serde_json::to_value(&rows)
        .map_err(|e| Error::Internal(format!("cannot serialise the trace: {e}")))?;
    let drawing = crate::plot::trace_svg(values.as_array().map_or(&[][..], |v| &v[..]), &title)
        .map_err(|e| Error::Internal(format!("cannot draw the trace: {e}")))?;
    std::fs::write(&svg, drawing).map_err(|e| Error::io(&svg, e))?;
    if json {
        return print::json(&rows);
    }
    print::trace(&rows);
    outln!("wrote {} and {}", csv.display(), svg.display());
    Ok(())
}

pub fn capacity(args: CapacityArgs) -> Result<()> {
    let budget = capacity::parse_bytes(&args.budget)?;
    let config = match &args.model {
        Some(dir) => Config::from_file(&dir.join("config.json"))?,
        None => Config::smollm2_135m(),
    };
    // Every size below is checked before the mix and the pool are allocated from it.
    in_range(
        "--requests",
        args.requests,
        1,
        MAX_CAPACITY_REQUESTS,
        "requests offered",
    )?;
    at_least("--max-new-tokens", args.max_new_tokens, 1)?;
    at_least("--max-prompt", args.max_prompt, 16)?;
    let longest = sum(&[
        ("--max-prompt", args.max_prompt),
        ("--max-new-tokens", args.max_new_tokens),
    ])?;
    let context = config.max_position_embeddings;
    if longest > context {
        return Err(Error::InvalidArgument(format!(
            "--max-prompt {} + --max-new-tokens {} = {longest} positions is longer than the model's context of {context}: lower --max-prompt or --max-new-tokens",
            args.max_prompt, args.max_new_tokens
        )));
    }
    let policy = kvlab::cache::KvPolicy::parse(&args.kv, Default::default())?;
    let element = kvlab::cache::KvElement::for_pool(&config, policy, "paged")?;
    // The smallest block: one layer group's (all layers, for a model without local ones).
    let block_bytes =
        kvlab::cache::paged::BlockPool::block_bytes(&config, element, args.block.block_size);
    let blocks = budget / block_bytes.max(1);
    if blocks > MAX_CAPACITY_BLOCKS {
        return Err(Error::InvalidArgument(format!(
            "--budget {} in blocks of {} positions is {blocks} blocks, and kvlab counts at most {MAX_CAPACITY_BLOCKS}: raise --block-size or lower --budget",
            args.budget, args.block.block_size
        )));
    }
    let mix = capacity::request_mix(
        args.requests,
        args.max_prompt,
        args.max_new_tokens,
        args.seed,
    );
    let block_size = args.block.block_size;
    let report = capacity::capacity(
        &config,
        element,
        budget,
        block_size,
        args.max_new_tokens,
        &mix,
    )?;
    if args.out.json {
        return print::json(&report);
    }
    print::capacity(&report, args.max_prompt, args.seed);
    Ok(())
}

/// Requests `kvlab capacity` draws (16 bytes each): far past where any budget fills.
const MAX_CAPACITY_REQUESTS: usize = 1_000_000;
/// Blocks `kvlab capacity` counts (~12 bytes of bookkeeping each).
const MAX_CAPACITY_BLOCKS: usize = 1 << 24;
/// Requests `kvlab prefix` runs, one table row each.
const MAX_PREFIX_REQUESTS: usize = 1024;

pub fn prefix(args: PrefixArgs) -> Result<()> {
    in_range(
        "--requests",
        args.requests,
        1,
        MAX_PREFIX_REQUESTS,
        "one table row each",
    )?;
    at_least("--suffix-len", args.suffix_len, 1)?;
    at_least("--max-new-tokens", args.max_new_tokens, 1)?;
    let loaded = args.model.load(0, false)?;
    let prompt_len = sum(&[
        ("--shared-len", args.shared_len),
        ("--suffix-len", args.suffix_len),
    ])?;
    let context = loaded.model.config.max_position_embeddings;
    if prompt_len >= context {
        return Err(Error::InvalidArgument(format!(
            "--shared-len {} + --suffix-len {} = {prompt_len} tokens leaves no room for a new token in the model's context of {context}: lower --shared-len or --suffix-len",
            args.shared_len, args.suffix_len
        )));
    }
    if !args.out.json {
        eprintln!(
            "{}: {} requests = {} shared + {} own tokens each, {} new tokens; without prefix caching, then with...",
            loaded.name, args.requests, args.shared_len, args.suffix_len, args.max_new_tokens
        );
    }
    let report = shared_prompt::run(
        &loaded.model,
        args.requests,
        args.shared_len,
        args.suffix_len,
        args.max_new_tokens,
        args.block.block_size,
    )?;
    if args.out.json {
        print::json(&report)?;
    } else {
        print::prefix(&report);
    }
    report.check()
}
