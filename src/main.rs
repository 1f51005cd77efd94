//! The `kvlab` command line: generate, compare the two paths, size a KV cache,
//! import a GGUF, and a zero-setup demo.

use clap::{Args, Parser, Subcommand};
use kvlab::compare::{compare_with, Comparison};
use kvlab::device::{Backend, Device, GpuDtype};
use kvlab::error::{Error, Result};
use kvlab::generate::{check_request, generate_with, GenerateOptions, Generation, PathKind};
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
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Keep the k most likely tokens (0 = all).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Nucleus sampling mass (1.0 = off).
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    device: DeviceArgs,
    /// Print one JSON object with the figures instead of text.
    #[arg(long)]
    json: bool,
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
}

#[derive(Args)]
struct CompareArgs {
    #[command(flatten)]
    prompt: PromptArgs,
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
        (Model::random(Config::smollm2_135m(), args.seed)?, None)
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
        sampler: SamplerConfig {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            seed: args.seed,
        },
        eos_ids: model.config.eos_ids(),
    }
}

fn cmd_generate(args: GenerateArgs) -> Result<()> {
    let (model, tokenizer, prompt_ids) = load(&args.prompt)?;
    let opts = options(&args.prompt, &model, args.path);
    check_request(&model, &prompt_ids, opts.max_new_tokens)?;
    let d = args.prompt.device;
    let backend = Backend::new(d.device, &model, d.gpu_dtype)?;
    let mut decoder = backend.decoder(opts.path, prompt_ids.len(), opts.max_new_tokens)?;
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
        Ok(())
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
    )
}

fn run_compare(
    backend: &Backend,
    model: &Model,
    tokenizer: Option<&Tokenizer>,
    prompt_ids: &[u32],
    opts: &GenerateOptions,
    json: bool,
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
        |path| backend.decoder(path, prompt_ids.len(), opts.max_new_tokens),
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
        "{:>6} {:>8} | {:>12} {:>12} | {:>14} {:>14}",
        "token", "context", "naive step", "cached step", "naive total", "cached total"
    );
    for p in &c.checkpoints {
        println!(
            "{:>6} {:>8} | {:>9.1} ms {:>9.1} ms | {:>11.1} ms {:>11.1} ms",
            p.token,
            p.context,
            p.naive_step_ms,
            p.cached_step_ms,
            p.naive_cumulative_ms,
            p.cached_cumulative_ms
        );
    }
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
        KvShape {
            layers: config.num_hidden_layers,
            kv_heads: config.n_kv_heads(),
            head_dim: config.head_dim(),
            dtype: args.dtype,
        }
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
