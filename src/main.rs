//! The `kvlab` command line: generate, compare the two paths, size a KV cache,
//! import a GGUF, a zero-setup demo, and the cache-layout experiments (trace,
//! capacity, prefix, chat, bench-cache).

use clap::{Args, Parser, Subcommand};
use kvlab::cache::{new_store, CacheKind, DEFAULT_BLOCK_SIZE};
use kvlab::chat::ChatSession;
use kvlab::compare::{compare_with, Comparison};
use kvlab::device::{Backend, Device, GpuDtype};
use kvlab::error::{Error, Result};
use kvlab::generate::{
    check_request, cpu_decoder_with, generate_with, Decoder, GenerateOptions, Generation, PathKind,
};
use kvlab::kv_size::{KvDtype, KvShape};
use kvlab::sampler::SamplerConfig;
use kvlab::tokenizer::{Message, TextStream, Tokenizer};
use kvlab::{loader, Config, Model};
use std::io::Write;
use std::path::PathBuf;

/// Where SmolLM2 lands after `bash scripts/fetch-smollm2.sh`.
const DEFAULT_MODEL: &str = "models/smollm2-135m-instruct";

#[derive(Parser)]
#[command(
    name = "kvlab",
    version,
    about = "Why the first token is slow and the rest are fast: a Llama forward pass, naive and KV-cached"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt, streaming tokens as they come.
    Generate(GenerateArgs),
    /// Run the naive and the cached path on the same request: same tokens? how much faster?
    Compare(CompareArgs),
    /// KV cache size: 2 x layers x kv_heads x head_dim x seq_len x bytes (x batch).
    KvSize(KvSizeArgs),
    /// Convert a GGUF file (llama.cpp) into a Hugging Face model folder.
    ImportGguf(ImportArgs),
    /// Zero set-up: compare both paths on SmolLM2 (or a random model of its shape).
    Demo(DemoArgs),
    /// Measure prefill throughput and per-token latency of both paths at several contexts.
    Bench(BenchArgs),
    /// Trace the KV cache's memory and step time, token by token, in several layouts (CSV + SVG).
    Trace(TraceArgs),
    /// How many requests fit in a memory budget: preallocated by max_new_tokens vs paged.
    Capacity(CapacityArgs),
    /// N requests sharing a long system prompt, with and without prefix caching: TTFT and KV bytes.
    Prefix(PrefixArgs),
    /// Multi-turn chat that keeps its KV cache between turns (user messages: one per stdin line).
    Chat(ChatArgs),
    /// Decode speed of every cache layout at a context, and prefix-hit vs cold TTFT.
    BenchCache(BenchCacheArgs),
}

#[derive(Args, Clone, Copy)]
struct CacheArgs {
    /// Where the cached path keeps K and V (the CPU only; see `src/cache/`).
    #[arg(long, value_enum, default_value_t = CacheKind::Preallocated)]
    cache: CacheKind,
    /// Positions per block, for --cache paged and prefix.
    #[arg(long, default_value_t = DEFAULT_BLOCK_SIZE, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    block_size: usize,
}

#[derive(Args)]
struct PromptArgs {
    /// Model folder (config.json, *.safetensors, tokenizer.json).
    #[arg(long, default_value = DEFAULT_MODEL)]
    model: PathBuf,
    /// Use seeded random weights of SmolLM2-135M's shape instead of --model (no tokenizer:
    /// give --prompt-len).
    #[arg(long)]
    random_weights: bool,
    /// The prompt text.
    #[arg(long, required_unless_present_any = ["prompt_len", "prompt_file"], conflicts_with_all = ["prompt_len", "prompt_file"])]
    prompt: Option<String>,
    /// Read the prompt text from a file.
    #[arg(long, conflicts_with = "prompt_len")]
    prompt_file: Option<PathBuf>,
    /// A synthetic prompt of this many token ids (for measurements at a chosen length).
    #[arg(long)]
    prompt_len: Option<usize>,
    /// Wrap the prompt in the model's chat template, as a user message.
    #[arg(long)]
    chat: bool,
    /// System message for --chat (else the template's default, if any).
    #[arg(long, requires = "chat")]
    system: Option<String>,
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    device: DeviceArgs,
    /// Print one JSON object with the figures instead of text.
    #[arg(long)]
    json: bool,
}

/// How tokens are picked: shared by every command that generates.
#[derive(Args, Clone, Copy)]
struct SamplingArgs {
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Keep the k most likely tokens (0 = all).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Nucleus sampling mass (1.0 = off).
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Seeds the sampler (and --random-weights).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl SamplingArgs {
    fn config(&self) -> SamplerConfig {
        SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            seed: self.seed,
        }
    }
}

#[derive(Args, Clone, Copy)]
struct DeviceArgs {
    /// Where to run the forward pass.
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    device: Device,
    /// Weight format on the GPU (with --device cuda).
    #[arg(long, value_enum, default_value_t = GpuDtype::Bf16)]
    gpu_dtype: GpuDtype,
}

#[derive(Args)]
struct GenerateArgs {
    #[command(flatten)]
    prompt: PromptArgs,
    #[arg(long, value_enum, default_value_t = PathKind::Cached)]
    path: PathKind,
    #[command(flatten)]
    cache: CacheArgs,
}

#[derive(Args)]
struct CompareArgs {
    #[command(flatten)]
    prompt: PromptArgs,
    #[command(flatten)]
    cache: CacheArgs,
}

#[derive(Args)]
struct TraceArgs {
    #[command(flatten)]
    prompt: PromptArgs,
    /// Layouts to trace, side by side.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "preallocated,growable,paged"
    )]
    layouts: Vec<CacheKind>,
    #[arg(long, default_value_t = DEFAULT_BLOCK_SIZE, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    block_size: usize,
    /// Folder for trace.csv and trace.svg (created).
    #[arg(long, default_value = "trace")]
    out: PathBuf,
}

#[derive(Args)]
struct CapacityArgs {
    /// KV cache memory: bytes, or with a unit (1GiB, 512MiB, 2GB).
    #[arg(long)]
    budget: String,
    /// Read the cache's shape from this model folder's config.json (default: SmolLM2-135M).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Requests offered, in arrival order (admission stops at the first that does not fit).
    #[arg(long, default_value_t = 100_000)]
    requests: usize,
    /// Longest prompt of the mix (lengths are log-uniform from 16).
    #[arg(long, default_value_t = 1024)]
    max_prompt: usize,
    /// What each request may generate: the preallocated layout reserves this much.
    #[arg(long, default_value_t = 512)]
    max_new_tokens: usize,
    #[arg(long, default_value_t = DEFAULT_BLOCK_SIZE, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    block_size: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct PrefixArgs {
    /// Model folder; without it, seeded random weights of SmolLM2-135M's shape (same cost).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Requests that share the system prompt.
    #[arg(long, default_value_t = 4)]
    requests: usize,
    /// Tokens of the shared system prompt.
    #[arg(long, default_value_t = 1000)]
    shared_len: usize,
    /// Tokens of each request's own part.
    #[arg(long, default_value_t = 16)]
    suffix_len: usize,
    #[arg(long, default_value_t = 8)]
    max_new_tokens: usize,
    #[arg(long, default_value_t = DEFAULT_BLOCK_SIZE, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    block_size: usize,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ChatArgs {
    #[arg(long, default_value = DEFAULT_MODEL)]
    model: PathBuf,
    /// System message (else the template's default).
    #[arg(long)]
    system: Option<String>,
    #[arg(long, default_value_t = 128)]
    max_new_tokens: usize,
    #[command(flatten)]
    cache: CacheArgs,
    /// Positions the conversation may reach (the preallocated layout reserves them all).
    #[arg(long, default_value_t = 2048)]
    max_context: usize,
    /// Recompute the whole conversation every turn (to feel the difference).
    #[arg(long)]
    no_reuse: bool,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// One JSON object per turn, one per line, instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct BenchCacheArgs {
    /// Model folder; without it, seeded random weights of SmolLM2-135M's shape (same cost).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Contexts at which to time one decode step of each layout.
    #[arg(long, value_delimiter = ',', default_value = "128,512")]
    contexts: Vec<usize>,
    #[arg(long, default_value_t = DEFAULT_BLOCK_SIZE, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    block_size: usize,
    /// Timed repetitions (medians are reported).
    #[arg(long, default_value_t = 9)]
    reps: usize,
    /// Shared-prefix length for the prefix-hit TTFT (0 = skip it).
    #[arg(long, default_value_t = 1000)]
    shared_len: usize,
    #[arg(long, default_value_t = 16)]
    suffix_len: usize,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct KvSizeArgs {
    /// Read the shape from this model folder's config.json.
    #[arg(long, conflicts_with_all = ["layers", "kv_heads", "head_dim"])]
    model: Option<PathBuf>,
    #[arg(long)]
    layers: Option<usize>,
    #[arg(long)]
    kv_heads: Option<usize>,
    #[arg(long)]
    head_dim: Option<usize>,
    /// Type of the cached values (kvlab's CPU cache is f32; GPUs usually bf16).
    #[arg(long, value_enum, default_value_t = KvDtype::Bf16)]
    dtype: KvDtype,
    #[arg(long)]
    seq_len: usize,
    /// Concurrent sequences.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ImportArgs {
    /// The .gguf file.
    gguf: PathBuf,
    /// Output folder (created).
    out_dir: PathBuf,
    /// Weight type written to model.safetensors. f32 keeps the dequantized values exactly.
    #[arg(long, value_enum, default_value_t = ImportDtype::F32)]
    dtype: ImportDtype,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ImportDtype {
    F32,
    Bf16,
}

#[derive(Args)]
struct DemoArgs {
    #[arg(long, default_value = DEFAULT_MODEL)]
    model: PathBuf,
    #[command(flatten)]
    device: DeviceArgs,
    #[arg(long, default_value_t = 32)]
    max_new_tokens: usize,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct BenchArgs {
    /// Model folder; without it, seeded random weights of SmolLM2-135M's shape (same cost).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Prompt lengths for the prefill measurement.
    #[arg(long, value_delimiter = ',', default_value = "32,128,512")]
    prefill: Vec<usize>,
    /// Contexts at which to time one step of each path.
    #[arg(long, value_delimiter = ',', default_value = "32,128,512")]
    contexts: Vec<usize>,
    /// Timed repetitions per figure (the median is reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    #[arg(long)]
    json: bool,
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate(args) => cmd_generate(args),
        Command::Compare(args) => cmd_compare(args),
        Command::KvSize(args) => cmd_kv_size(args),
        Command::ImportGguf(args) => cmd_import(args),
        Command::Demo(args) => cmd_demo(args),
        Command::Bench(args) => cmd_bench(args),
        Command::Trace(args) => cmd_trace(args),
        Command::Capacity(args) => cmd_capacity(args),
        Command::Prefix(args) => cmd_prefix(args),
        Command::Chat(args) => cmd_chat(args),
        Command::BenchCache(args) => cmd_bench_cache(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn print_json(value: &impl serde::Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::InvalidArgument(format!("cannot serialise the report: {e}")))?;
    println!("{text}");
    Ok(())
}

/// Loads the model and its tokenizer (none for random weights), and turns the prompt into ids.
fn load(args: &PromptArgs) -> Result<(Model, Option<Tokenizer>, Vec<u32>)> {
    let (model, tokenizer) = if args.random_weights {
        (
            Model::random(Config::smollm2_135m(), args.sampling.seed)?,
            None,
        )
    } else {
        if !args.model.is_dir() {
            return Err(Error::ModelFolderMissing(args.model.clone()));
        }
        let tokenizer = Tokenizer::from_dir(&args.model)?;
        (loader::load_model(&args.model)?, Some(tokenizer))
    };
    let prompt = match &args.prompt_file {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?),
        None => args.prompt.clone(),
    };
    if args.chat && prompt.is_none() {
        return Err(Error::InvalidArgument(
            "--chat needs a text prompt (--prompt or --prompt-file)".into(),
        ));
    }
    let prompt_ids = match (&prompt, args.prompt_len, &tokenizer) {
        (_, Some(n), _) => kvlab::bench::synthetic_prompt(n, model.config.vocab_size),
        (Some(prompt), None, Some(tokenizer)) => {
            let text = if args.chat {
                let mut messages = Vec::new();
                if let Some(system) = &args.system {
                    messages.push(Message::new("system", system));
                }
                messages.push(Message::new("user", prompt));
                tokenizer.apply_chat_template(&messages)?
            } else {
                prompt.clone()
            };
            tokenizer.encode(&text)?
        }
        _ => {
            return Err(Error::InvalidArgument(
                "--random-weights has no tokenizer: give --prompt-len N instead of --prompt".into(),
            ))
        }
    };
    if prompt_ids.is_empty() {
        return Err(Error::EmptyPrompt);
    }
    Ok((model, tokenizer, prompt_ids))
}

fn options(args: &PromptArgs, model: &Model, path: PathKind) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: args.max_new_tokens,
        path,
        sampler: args.sampling.config(),
        eos_ids: model.config.eos_ids(),
    }
}

fn cmd_generate(args: GenerateArgs) -> Result<()> {
    let (model, tokenizer, prompt_ids) = load(&args.prompt)?;
    let opts = options(&args.prompt, &model, args.path);
    check_request(&model, &prompt_ids, opts.max_new_tokens)?;
    let d = args.prompt.device;
    let backend = Backend::new(d.device, &model, d.gpu_dtype)?;
    let mut decoder = decoder_for(
        &backend,
        &model,
        args.cache,
        opts.path,
        prompt_ids.len(),
        opts.max_new_tokens,
    )?;
    let json = args.prompt.json;
    let mut stream = tokenizer.as_ref().map(TextStream::new);
    let mut out = std::io::stdout();
    let mut generation = generate_with(decoder.as_mut(), &prompt_ids, &opts, |token| {
        if json {
            return;
        }
        let text = match &mut stream {
            Some(stream) => stream.push(token),
            None => Some(format!("[{token}]")),
        };
        if let Some(text) = text {
            let _ = write!(out, "{text}");
            let _ = out.flush();
        }
    })?;
    if let Some(tokenizer) = &tokenizer {
        generation.text = tokenizer.decode(&generation.generated_ids)?;
    }
    if json {
        print_json(&generation)
    } else {
        println!();
        eprintln!("{}", summary(&generation));
        if args.cache.cache != CacheKind::Preallocated && opts.path == PathKind::Cached {
            eprintln!("cache layout: {}", args.cache.cache.name());
        }
        Ok(())
    }
}

/// The decoder for `path` on `backend`, its cache in the layout `cache` asks for.
fn decoder_for<'a>(
    backend: &'a Backend<'a>,
    model: &'a Model,
    cache: CacheArgs,
    path: PathKind,
    prompt_len: usize,
    max_new_tokens: usize,
) -> Result<Box<dyn Decoder + 'a>> {
    match (backend.device(), cache.cache) {
        (_, CacheKind::Preallocated) => backend.decoder(path, prompt_len, max_new_tokens),
        (Device::Cpu, layout) => cpu_decoder_with(
            model,
            path,
            layout,
            cache.block_size,
            prompt_len,
            max_new_tokens,
        ),
        #[allow(unreachable_patterns)]
        (_, layout) => Err(Error::InvalidArgument(format!(
            "--cache {} runs on the CPU only: the CUDA backend keeps its own preallocated cache (a CUDA paged-attention kernel is not written yet)",
            layout.name()
        ))),
    }
}

fn summary(g: &Generation) -> String {
    format!(
        "[{:?}] prompt {} tokens, generated {} ({:?}) | TTFT {:.1} ms ({:.0} prompt tok/s) | TPOT {:.1} ms ({:.1} tok/s) | KV cache {} reserved, {} used",
        g.path,
        g.prompt_ids.len(),
        g.generated_ids.len(),
        g.stop_reason,
        g.ttft_ms,
        g.prefill_tok_s,
        g.tpot_ms,
        g.decode_tok_s,
        human_bytes(g.kv_cache_bytes),
        human_bytes(g.kv_cache_bytes_used),
    )
}

fn human_bytes(bytes: usize) -> String {
    let b = bytes as f64;
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} GiB", b / (1024.0 * 1024.0 * 1024.0))
    } else if b >= 1024.0 * 1024.0 {
        format!("{:.2} MiB", b / (1024.0 * 1024.0))
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

fn cmd_compare(args: CompareArgs) -> Result<()> {
    let (model, tokenizer, prompt_ids) = load(&args.prompt)?;
    let opts = options(&args.prompt, &model, PathKind::Cached);
    let backend = Backend::new(
        args.prompt.device.device,
        &model,
        args.prompt.device.gpu_dtype,
    )?;
    run_compare(
        &backend,
        &model,
        tokenizer.as_ref(),
        &prompt_ids,
        &opts,
        args.prompt.json,
        args.cache,
    )
}

fn run_compare(
    backend: &Backend,
    model: &Model,
    tokenizer: Option<&Tokenizer>,
    prompt_ids: &[u32],
    opts: &GenerateOptions,
    json: bool,
    cache: CacheArgs,
) -> Result<()> {
    check_request(model, prompt_ids, opts.max_new_tokens)?;
    if !json {
        eprintln!(
            "device: {} | prompt: {} tokens, generating {} with each path (cached first, then naive: the naive one takes a while)...",
            backend.describe(),
            prompt_ids.len(),
            opts.max_new_tokens
        );
    }
    let mut cmp = compare_with(
        |path| {
            decoder_for(
                backend,
                model,
                cache,
                path,
                prompt_ids.len(),
                opts.max_new_tokens,
            )
        },
        prompt_ids,
        opts,
    )?;
    if let Some(tok) = tokenizer {
        cmp.cached.text = tok.decode(&cmp.cached.generated_ids)?;
        cmp.naive.text = tok.decode(&cmp.naive.generated_ids)?;
    }
    if json {
        print_json(&cmp)?;
    } else {
        print_comparison(&cmp);
    }
    if !cmp.identical {
        return Err(Error::InvalidArgument(
            "the naive and cached paths generated different tokens: this is a bug".into(),
        ));
    }
    Ok(())
}

fn print_comparison(c: &Comparison) {
    if !c.cached.text.is_empty() {
        println!("text: {:?}\n", c.cached.text);
    }
    println!(
        "{:>6} {:>8} | {:>11} {:>11} | {:>11} {:>11} {:>6} | {:>12} {:>12}",
        "token",
        "context",
        "naive step",
        "cached step",
        "naive mean",
        "cached mean",
        "ratio",
        "naive total",
        "cached total"
    );
    for p in &c.checkpoints {
        println!(
            "{:>6} {:>8} | {:>8.1} ms {:>8.1} ms | {:>8.1} ms {:>8.1} ms {:>5.1}x | {:>9.1} ms {:>9.1} ms",
            p.token,
            p.context,
            p.naive_step_ms,
            p.cached_step_ms,
            p.naive_mean_step_ms,
            p.cached_mean_step_ms,
            p.naive_mean_step_ms / p.cached_mean_step_ms,
            p.naive_cumulative_ms,
            p.cached_cumulative_ms
        );
    }
    println!(
        "(token 1 is the prefill: its time is TTFT. mean: the mean step since the previous row; \
         ratio: naive mean / cached mean. context: tokens the step attends to.)"
    );
    println!();
    println!("{}", summary(&c.naive));
    println!("{}", summary(&c.cached));
    println!(
        "identical tokens: {} | speedup (naive total / cached total): {:.1}x",
        c.identical, c.speedup
    );
}

#[derive(serde::Serialize)]
struct KvSizeReport {
    shape: KvShape,
    seq_len: usize,
    batch: usize,
    bytes_per_token: usize,
    bytes: usize,
    gib: f64,
}

fn cmd_kv_size(args: KvSizeArgs) -> Result<()> {
    let shape = if let Some(dir) = &args.model {
        let config = Config::from_file(&dir.join("config.json"))?;
        KvShape::of(&config, args.dtype)
    } else {
        let missing = |name: &str| {
            Error::InvalidArgument(format!(
                "give --model DIR, or all of --layers, --kv-heads and --head-dim (missing --{name})"
            ))
        };
        KvShape {
            layers: args.layers.ok_or_else(|| missing("layers"))?,
            kv_heads: args.kv_heads.ok_or_else(|| missing("kv-heads"))?,
            head_dim: args.head_dim.ok_or_else(|| missing("head-dim"))?,
            dtype: args.dtype,
        }
    };
    let bytes = shape.bytes(args.seq_len, args.batch);
    let report = KvSizeReport {
        shape,
        seq_len: args.seq_len,
        batch: args.batch,
        bytes_per_token: shape.bytes_per_token(),
        bytes,
        gib: bytes as f64 / (1u64 << 30) as f64,
    };
    if args.json {
        return print_json(&report);
    }
    println!(
        "2 (K,V) x {} layers x {} kv heads x {} head_dim x {} bytes ({:?}) = {} bytes per token ({})",
        shape.layers,
        shape.kv_heads,
        shape.head_dim,
        shape.dtype.bytes(),
        shape.dtype,
        report.bytes_per_token,
        human_bytes(report.bytes_per_token)
    );
    println!(
        "x {} tokens x {} sequence(s) = {} bytes ({:.2} GB, {})",
        args.seq_len,
        args.batch,
        bytes,
        bytes as f64 / 1e9,
        human_bytes(bytes)
    );
    Ok(())
}

fn cmd_import(args: ImportArgs) -> Result<()> {
    let dtype = match args.dtype {
        ImportDtype::F32 => kvlab::gguf::OutDtype::F32,
        ImportDtype::Bf16 => kvlab::gguf::OutDtype::Bf16,
    };
    let report = kvlab::gguf::import_gguf(&args.gguf, &args.out_dir, dtype)?;
    println!("{report}");
    Ok(())
}

/// A prompt of ~100 tokens for the demo: long enough that the naive path's
/// per-step cost is visible, short enough to finish in seconds.
const DEMO_PROMPT: &str = "The KV cache is the reason large language models can answer quickly. \
When a model reads a prompt, it computes a key and a value vector for every token in every layer. \
Without a cache, each new token forces the model to recompute all of them from scratch. \
Explain, in two sentences, why caching keys and values makes generation faster:";

fn cmd_demo(args: DemoArgs) -> Result<()> {
    let seed = 0;
    let (model, tokenizer, prompt_ids) = if args.model.join("config.json").exists() {
        let tokenizer = Tokenizer::from_dir(&args.model)?;
        let ids = tokenizer
            .encode(&tokenizer.apply_chat_template(&[Message::new("user", DEMO_PROMPT)])?)?;
        (loader::load_model(&args.model)?, Some(tokenizer), ids)
    } else {
        eprintln!(
            "{} not found: using a random-weight model of SmolLM2-135M's shape (seed {seed}); \
             fetch the real one with `bash scripts/fetch-smollm2.sh`",
            args.model.display()
        );
        let model = Model::random(Config::smollm2_135m(), seed)?;
        let mut rng = kvlab::rng::Rng::new(seed);
        let ids = (0..100)
            .map(|_| (rng.next_u64() % model.config.vocab_size as u64) as u32)
            .collect();
        (model, None, ids)
    };
    let opts = GenerateOptions {
        max_new_tokens: args.max_new_tokens,
        path: PathKind::Cached,
        sampler: SamplerConfig::default(),
        eos_ids: if tokenizer.is_some() {
            model.config.eos_ids()
        } else {
            vec![]
        },
    };
    let backend = Backend::new(args.device.device, &model, args.device.gpu_dtype)?;
    run_compare(
        &backend,
        &model,
        tokenizer.as_ref(),
        &prompt_ids,
        &opts,
        args.json,
        CacheArgs {
            cache: CacheKind::Preallocated,
            block_size: DEFAULT_BLOCK_SIZE,
        },
    )
}

fn cmd_bench(args: BenchArgs) -> Result<()> {
    let (model, name) = match &args.model {
        Some(dir) => (loader::load_model(dir)?, dir.display().to_string()),
        None => (
            Model::random(Config::smollm2_135m(), 0)?,
            "SmolLM2-135M shape, random weights".to_string(),
        ),
    };
    let longest = args
        .prefill
        .iter()
        .chain(&args.contexts)
        .max()
        .copied()
        .unwrap_or(0);
    if longest + 1 > model.config.max_position_embeddings {
        return Err(Error::PromptTooLong {
            prompt_len: longest + 1,
            max_seq_len: model.config.max_position_embeddings,
        });
    }
    if args.prefill.contains(&0) {
        return Err(Error::EmptyPrompt);
    }
    let report = kvlab::bench::run(&model, &name, &args.prefill, &args.contexts, args.reps)?;
    if args.json {
        print_json(&report)
    } else {
        kvlab::bench::print_report(&report);
        Ok(())
    }
}

/// The model in `dir`, or seeded random weights of SmolLM2-135M's shape (same cost).
fn model_or_random(dir: Option<&PathBuf>) -> Result<(Model, String)> {
    Ok(match dir {
        Some(dir) => (loader::load_model(dir)?, dir.display().to_string()),
        None => (
            Model::random(Config::smollm2_135m(), 0)?,
            "SmolLM2-135M shape, random weights".to_string(),
        ),
    })
}

fn cmd_trace(args: TraceArgs) -> Result<()> {
    if args.prompt.device.device != Device::Cpu {
        return Err(Error::InvalidArgument(
            "kvlab trace runs on the CPU only (the cache layouts live in src/cache/)".into(),
        ));
    }
    if args.layouts.is_empty() {
        return Err(Error::InvalidArgument(
            "give at least one layout: --layouts preallocated,growable,paged".into(),
        ));
    }
    let (model, _tokenizer, prompt_ids) = load(&args.prompt)?;
    let opts = options(&args.prompt, &model, PathKind::Cached);
    check_request(&model, &prompt_ids, opts.max_new_tokens)?;
    if !args.prompt.json {
        eprintln!(
            "tracing {} layouts: prompt {} tokens, up to {} new...",
            args.layouts.len(),
            prompt_ids.len(),
            opts.max_new_tokens
        );
    }
    let rows =
        kvlab::cache::trace::trace(&model, &prompt_ids, &args.layouts, &opts, args.block_size)?;
    std::fs::create_dir_all(&args.out).map_err(|e| Error::io(&args.out, e))?;
    let csv = args.out.join("trace.csv");
    std::fs::write(&csv, kvlab::cache::trace::to_csv(&rows)).map_err(|e| Error::io(&csv, e))?;
    let title = format!(
        "KV cache by layout: prompt {} tokens, {} generated, block size {}",
        prompt_ids.len(),
        rows.iter().map(|r| r.step).max().unwrap_or(0),
        args.block_size
    );
    let svg = args.out.join("trace.svg");
    std::fs::write(&svg, kvlab::cache::trace::to_svg(&rows, &title))
        .map_err(|e| Error::io(&svg, e))?;
    if args.prompt.json {
        return print_json(&rows);
    }
    println!(
        "{:>13} {:>6} {:>10} {:>12} {:>12} {:>12} {:>12}",
        "layout", "steps", "positions", "reserved", "used", "peak waste", "copied"
    );
    for layout in &args.layouts {
        let mine: Vec<_> = rows.iter().filter(|r| r.layout == *layout).collect();
        let last = mine.last().expect("every layout traced");
        let waste = mine
            .iter()
            .map(|r| r.bytes_reserved - r.bytes_used)
            .max()
            .unwrap_or(0);
        println!(
            "{:>13} {:>6} {:>10} {:>12} {:>12} {:>12} {:>12}",
            layout.name(),
            last.step,
            last.positions,
            human_bytes(last.bytes_reserved),
            human_bytes(last.bytes_used),
            human_bytes(waste),
            human_bytes(last.bytes_copied)
        );
    }
    println!("wrote {} and {}", csv.display(), svg.display());
    Ok(())
}

fn cmd_capacity(args: CapacityArgs) -> Result<()> {
    use kvlab::cache::capacity;
    let budget = capacity::parse_bytes(&args.budget)?;
    let config = match &args.model {
        Some(dir) => Config::from_file(&dir.join("config.json"))?,
        None => Config::smollm2_135m(),
    };
    if args.max_new_tokens == 0 || args.requests == 0 {
        return Err(Error::InvalidArgument(
            "--requests and --max-new-tokens must be at least 1".into(),
        ));
    }
    let mix = capacity::request_mix(
        args.requests,
        args.max_prompt,
        args.max_new_tokens,
        args.seed,
    );
    let r = capacity::capacity(&config, budget, args.block_size, args.max_new_tokens, &mix)?;
    if args.json {
        return print_json(&r);
    }
    println!(
        "budget {} ({} bytes) of f32 KV cache, {} per token; requests: prompt 16..{} tokens (mean {:.0}), output 1..{} (mean {:.0}), seed {}",
        human_bytes(r.budget_bytes),
        r.budget_bytes,
        human_bytes(r.bytes_per_token),
        args.max_prompt,
        r.mean_prompt_len,
        args.max_new_tokens,
        r.mean_output_len,
        args.seed
    );
    println!(
        "\n{:>34} {:>9} {:>12} {:>12} {:>7}",
        "", "requests", "reserved", "live", "waste"
    );
    for (name, f) in [
        (
            format!("preallocated (prompt + {})", r.max_new_tokens),
            &r.preallocated,
        ),
        (format!("paged (blocks of {})", r.block_size), &r.paged),
    ] {
        println!(
            "{:>34} {:>9} {:>12} {:>12} {:>6.1}%",
            name,
            f.requests,
            human_bytes(f.bytes_reserved),
            human_bytes(f.bytes_live),
            100.0 * f.waste
        );
    }
    println!(
        "\npaging fits {:.2}x as many concurrent requests in the same memory",
        r.gain
    );
    if r.paged.requests == r.offered {
        println!(
            "(every offered request fit: raise --requests or lower --budget to see the limit)"
        );
    }
    Ok(())
}

fn cmd_prefix(args: PrefixArgs) -> Result<()> {
    if args.requests == 0 || args.max_new_tokens == 0 || args.suffix_len == 0 {
        return Err(Error::InvalidArgument(
            "--requests, --suffix-len and --max-new-tokens must be at least 1".into(),
        ));
    }
    let (model, name) = model_or_random(args.model.as_ref())?;
    let vocab = model.config.vocab_size;
    let total = args.shared_len + args.suffix_len + args.max_new_tokens;
    if total > model.config.max_position_embeddings {
        return Err(Error::ContextOverflow {
            prompt_len: args.shared_len + args.suffix_len,
            max_new_tokens: args.max_new_tokens,
            max_seq_len: model.config.max_position_embeddings,
        });
    }
    let shared = kvlab::bench::synthetic_prompt(args.shared_len, vocab);
    let suffixes: Vec<Vec<u32>> = (0..args.requests)
        .map(|r| {
            (0..args.suffix_len)
                .map(|i| ((r * 7877 + i * 131 + 17) % vocab) as u32)
                .collect()
        })
        .collect();
    if !args.json {
        eprintln!(
            "{name}: {} requests = {} shared + {} own tokens each, {} new tokens; without prefix caching, then with...",
            args.requests, args.shared_len, args.suffix_len, args.max_new_tokens
        );
    }
    let r = kvlab::cache::shared_prompt::run(
        &model,
        &shared,
        &suffixes,
        args.max_new_tokens,
        args.block_size,
    )?;
    if args.json {
        return print_json(&r);
    }
    println!(
        "{:>8} | {:>28} | {:>28}",
        "request", "without prefix caching", "with prefix caching"
    );
    for (i, (a, b)) in r.without.requests.iter().zip(&r.with.requests).enumerate() {
        println!(
            "{:>8} | TTFT {:>9.1} ms, {:>5} computed | TTFT {:>9.1} ms, {:>5} reused",
            i + 1,
            a.ttft_ms,
            a.computed,
            b.ttft_ms,
            b.reused
        );
    }
    println!(
        "\nrequests 2..{}: mean TTFT {:.1} ms -> {:.1} ms ({:.1}x faster)",
        r.n_requests, r.without.later_ttft_ms, r.with.later_ttft_ms, r.ttft_speedup
    );
    println!(
        "KV cache held by all {} requests: {} -> {} ({:.1}x less; {} block hits, {} misses)",
        r.n_requests,
        human_bytes(r.without.kv_bytes),
        human_bytes(r.with.kv_bytes),
        r.kv_ratio,
        r.with.prefix_hits,
        r.with.prefix_misses
    );
    println!("same tokens with and without: {}", r.identical_tokens);
    if !r.identical_tokens {
        return Err(Error::InvalidArgument(
            "prefix caching changed the generated tokens: this is a bug".into(),
        ));
    }
    Ok(())
}

/// One turn of `kvlab chat --json`.
#[derive(serde::Serialize)]
struct ChatTurnReport {
    turn: usize,
    prompt_tokens: usize,
    reused: usize,
    computed: usize,
    ttft_ms: f64,
    tpot_ms: f64,
    generated_tokens: usize,
    reply: String,
    kv_bytes_reserved: usize,
    kv_bytes_used: usize,
}

fn cmd_chat(args: ChatArgs) -> Result<()> {
    use std::io::{BufRead, IsTerminal};
    if !args.model.is_dir() {
        return Err(Error::ModelFolderMissing(args.model.clone()));
    }
    let tokenizer = Tokenizer::from_dir(&args.model)?;
    let model = loader::load_model(&args.model)?;
    let capacity = args.max_context.min(model.config.max_position_embeddings);
    let new_cache = || {
        new_store(
            &model.config,
            args.cache.cache,
            capacity,
            args.cache.block_size,
        )
    };
    let mut session = ChatSession::new(&model, new_cache()?);
    let opts = GenerateOptions {
        max_new_tokens: args.max_new_tokens,
        path: PathKind::Cached,
        sampler: args.sampling.config(),
        eos_ids: model.config.eos_ids(),
    };
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(Message::new("system", system));
    }
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    if interactive {
        eprintln!(
            "kvlab chat — {} cache{}; one message per line, Ctrl-D to end",
            args.cache.cache.name(),
            if args.no_reuse {
                ", recomputed every turn"
            } else {
                ", kept between turns"
            }
        );
    }
    let mut out = std::io::stdout();
    let mut turn_no = 0;
    let mut line = String::new();
    loop {
        if interactive {
            eprint!("\nyou> ");
        }
        line.clear();
        if stdin
            .lock()
            .read_line(&mut line)
            .map_err(|e| Error::io("stdin", e))?
            == 0
        {
            break;
        }
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        turn_no += 1;
        messages.push(Message::new("user", text));
        let ids = tokenizer.encode(&tokenizer.apply_chat_template(&messages)?)?;
        if ids.len() + args.max_new_tokens > capacity {
            return Err(Error::InvalidArgument(format!(
                "the conversation is {} tokens, and {} more may come: over --max-context {capacity}. Raise --max-context or start a new chat",
                ids.len(),
                args.max_new_tokens
            )));
        }
        if args.no_reuse {
            session = ChatSession::new(&model, new_cache()?);
        }
        if interactive {
            eprint!("assistant> ");
        }
        let mut stream = TextStream::new(&tokenizer);
        let turn = session.turn(&ids, &opts, |token| {
            if args.json || opts.eos_ids.contains(&token) {
                return;
            }
            if let Some(text) = stream.push(token) {
                let _ = write!(out, "{text}");
                let _ = out.flush();
            }
        })?;
        let g = &turn.generation;
        let reply_ids: Vec<u32> = g
            .generated_ids
            .iter()
            .copied()
            .filter(|t| !opts.eos_ids.contains(t))
            .collect();
        let reply = tokenizer.decode(&reply_ids)?;
        messages.push(Message::new("assistant", &reply));
        let (reserved, used) = session.kv_bytes();
        if args.json {
            let report = ChatTurnReport {
                turn: turn_no,
                prompt_tokens: turn.prompt_tokens,
                reused: turn.reused,
                computed: turn.computed,
                ttft_ms: g.ttft_ms,
                tpot_ms: g.tpot_ms,
                generated_tokens: g.generated_ids.len(),
                reply,
                kv_bytes_reserved: reserved,
                kv_bytes_used: used,
            };
            let text = serde_json::to_string(&report)
                .map_err(|e| Error::InvalidArgument(format!("cannot serialise the report: {e}")))?;
            println!("{text}");
        } else {
            println!();
            eprintln!(
                "[turn {turn_no}] TTFT {:.1} ms | prompt {} tokens: {} reused from the cache, {} computed | {} new tokens, {:.1} tok/s | KV cache {} reserved, {} used",
                g.ttft_ms,
                turn.prompt_tokens,
                turn.reused,
                turn.computed,
                g.generated_ids.len(),
                g.decode_tok_s,
                human_bytes(reserved),
                human_bytes(used)
            );
        }
    }
    Ok(())
}

fn cmd_bench_cache(args: BenchCacheArgs) -> Result<()> {
    let (model, name) = model_or_random(args.model.as_ref())?;
    let max = model.config.max_position_embeddings;
    if let Some(&c) = args.contexts.iter().find(|&&c| c == 0 || c + 1 > max) {
        return Err(Error::InvalidArgument(format!(
            "context {c}: contexts must be between 1 and {}",
            max - 1
        )));
    }
    if args.shared_len > 0 && (args.suffix_len == 0 || args.shared_len + args.suffix_len > max) {
        return Err(Error::InvalidArgument(format!(
            "--shared-len + --suffix-len must fit the context of {max}, with --suffix-len at least 1"
        )));
    }
    let prefix = (args.shared_len > 0).then_some((args.shared_len, args.suffix_len));
    let r = kvlab::cache::bench::run(
        &model,
        &name,
        &args.contexts,
        args.block_size,
        args.reps,
        prefix,
    )?;
    if args.json {
        print_json(&r)
    } else {
        kvlab::cache::bench::print(&r);
        Ok(())
    }
}
