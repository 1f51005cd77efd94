//! `kvlab generate`, `kvlab compare` and `kvlab demo`: one request, on one path or both.

use crate::args::{
    CacheArgs, DeviceArgs, JsonArgs, ModelArgs, PathArg, PromptArgs, SamplingArgs, SpecArgs,
};
use crate::print;
use clap::Args;
use kvlab::backend::{Backend, CacheLayout};
use kvlab::cache::CacheKind;
use kvlab::error::Result;
use kvlab::generate::{check_request, generate_with, timed, GenerateOptions, PathKind};
use kvlab::lab::against_engine::against_engine;
use kvlab::lab::compare::compare_with;
use kvlab::lab::timing::synthetic_prompt;
use kvlab::sampler::SamplerConfig;
use kvlab::tokenizer::{Message, TextStream, Tokenizer};
use kvlab::{loader, Config, Model};
use std::path::PathBuf;

#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub prompt: PromptArgs,
    #[arg(long, value_enum, default_value_t = PathArg::Cached)]
    pub path: PathArg,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub implementation: ImplArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
    #[command(flatten)]
    pub out: JsonArgs,
}

#[derive(Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub prompt: PromptArgs,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub implementation: ImplArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
    #[command(flatten)]
    pub rounds: TtftRoundsArg,
    #[command(flatten)]
    pub out: JsonArgs,
}

/// Which implementation of the forward pass runs.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ImplArg {
    /// The engine: threads, SIMD kernels, weight panels, every cache layout.
    Engine,
    /// The reference core, src/textbook.rs: one thread, f32, nothing optimised; the
    /// engine's bits (tests/textbook.rs), slower.
    Textbook,
    /// The reference core running your exercise code (02 RMSNorm, 03 RoPE, 06 and 14
    /// attention; src/learner.rs), checked against the engine by `kvlab compare`.
    Learner,
}

#[derive(Args)]
pub struct ImplArgs {
    /// Which implementation of the forward pass runs (book: forward-pass.md).
    #[arg(long = "impl", value_enum, default_value_t = ImplArg::Engine)]
    pub implementation: ImplArg,
}

impl ImplArgs {
    /// Refuses `--impl textbook` for a feature only the engine has.
    pub fn engine_only(&self, feature: &str) -> Result<()> {
        match self.implementation {
            ImplArg::Engine => Ok(()),
            ImplArg::Textbook | ImplArg::Learner => Err(kvlab::Error::InvalidArgument(format!(
                "{feature} runs on the engine only: drop --impl textbook or --impl learner"
            ))),
        }
    }

    /// The backend `--impl` asks for: the textbook core only runs f32 weights on the CPU.
    pub fn backend<'a>(&self, device: &DeviceArgs, model: &'a Model) -> Result<Backend<'a>> {
        match self.implementation {
            ImplArg::Engine => device.backend(model),
            ImplArg::Textbook | ImplArg::Learner => {
                if device.device != crate::args::DeviceArg::Cpu
                    || device.weights.dtype.is_some()
                    || device.weights.layout.is_some()
                {
                    return Err(kvlab::Error::InvalidArgument(
                        "--impl textbook and --impl learner run the f32 weights as loaded, on the CPU: drop --device, --dtype and --layout".into(),
                    ));
                }
                Ok(match self.implementation {
                    ImplArg::Learner => Backend::Learner(model),
                    _ => Backend::Textbook(model),
                })
            }
        }
    }
}

#[derive(Args)]
pub struct TtftRoundsArg {
    /// TTFT is measured apart from the full generations: one warm-up round, then this many
    /// rounds, the paths alternating which goes first; the table quotes the medians.
    #[arg(long, default_value_t = 5)]
    pub ttft_rounds: usize,
}

#[derive(Args)]
pub struct DemoArgs {
    /// Model folder. If it has no config.json, the demo (and only the demo) falls back to
    /// seeded random weights of SmolLM2-135M's shape, so it runs with zero set-up.
    #[arg(long, default_value = crate::args::DEFAULT_MODEL)]
    pub model: PathBuf,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[arg(long, default_value_t = 32)]
    pub max_new_tokens: usize,
    #[command(flatten)]
    pub rounds: TtftRoundsArg,
    #[command(flatten)]
    pub out: JsonArgs,
}

pub(crate) fn options(
    max_new_tokens: usize,
    sampling: &SamplingArgs,
    model: &Model,
    path: PathKind,
) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens,
        path,
        sampler: sampling.config(),
        eos_ids: model.config.eos_ids(),
    }
}

/// Prints each generated token's text as it arrives (nothing with `--json`, and never the
/// end-of-turn token): `generate` and `generate --speculative` stream through this.
pub(crate) struct TokenPrinter<'a> {
    stream: Option<TextStream<'a>>,
    eos_ids: &'a [u32],
    quiet: bool,
}

impl<'a> TokenPrinter<'a> {
    pub(crate) fn new(tokenizer: Option<&'a Tokenizer>, eos_ids: &'a [u32], quiet: bool) -> Self {
        TokenPrinter {
            stream: tokenizer.map(TextStream::new),
            eos_ids,
            quiet,
        }
    }

    pub(crate) fn push(&mut self, token: u32) {
        if self.quiet || self.eos_ids.contains(&token) {
            return;
        }
        // Without a tokenizer (random weights) the ids are the text.
        let text = match &mut self.stream {
            Some(stream) => stream.push(token),
            None => Some(format!("[{token}]")),
        };
        if let Some(text) = text {
            out!("{text}");
        }
    }
}

/// The text of `ids` without the end-of-turn tokens (`<|im_end|>`): what a reader wants
/// to see. The JSON keeps every id in `generated_ids`.
pub(crate) fn visible_text(tokenizer: &Tokenizer, ids: &[u32], eos_ids: &[u32]) -> Result<String> {
    let visible: Vec<u32> = ids
        .iter()
        .copied()
        .filter(|t| !eos_ids.contains(t))
        .collect();
    tokenizer.decode(&visible)
}

/// `kvlab generate` without `--speculative` (main.rs sends that to `cmd::speculative`).
pub fn generate(args: GenerateArgs) -> Result<()> {
    let loaded = args.model.load(args.sampling.seed, true)?;
    let (model, tokenizer) = (&loaded.model, loaded.tokenizer.as_ref());
    let prompt_ids = args.prompt.token_ids(tokenizer, &model.config)?;
    let opts = options(
        args.prompt.max_new_tokens,
        &args.sampling,
        model,
        args.path.into(),
    );
    check_request(&model.config, &prompt_ids, opts.max_new_tokens)?;
    let backend = args.implementation.backend(&args.device, model)?;
    let layout = args.cache.layout()?;
    // Timed: building the decoder reserves (and zero-fills) the whole KV cache before the
    // prompt is read, and the request waits for it (`alloc_ms`, book: cache-layouts.md).
    let (mut decoder, alloc_ms) =
        timed(|| backend.decoder(opts.path, layout, prompt_ids.len(), opts.max_new_tokens))?;
    let json = args.out.json;
    let mut printer = TokenPrinter::new(tokenizer, &opts.eos_ids, json);
    let mut generation = generate_with(decoder.as_mut(), &prompt_ids, &opts, |token| {
        printer.push(token)
    })?
    .with_alloc_ms(alloc_ms);
    if let Some(tokenizer) = tokenizer {
        generation.text = visible_text(tokenizer, &generation.generated_ids, &opts.eos_ids)?;
    }
    if json {
        return print::json(&generation);
    }
    outln!();
    eprintln!("{}", print::summary(&generation));
    if layout.kind != CacheKind::Preallocated && opts.path == PathKind::Cached {
        eprintln!("cache layout: {}", layout.kind.name());
    }
    Ok(())
}

/// `kvlab compare` without `--speculative` (main.rs sends that to `cmd::speculative`).
pub fn compare(args: CompareArgs) -> Result<()> {
    let loaded = args.model.load(args.sampling.seed, true)?;
    let model = &loaded.model;
    let prompt_ids = args
        .prompt
        .token_ids(loaded.tokenizer.as_ref(), &model.config)?;
    let opts = options(
        args.prompt.max_new_tokens,
        &args.sampling,
        model,
        PathKind::Cached,
    );
    let backend = args.implementation.backend(&args.device, model)?;
    let request = CompareRequest {
        prompt_ids: &prompt_ids,
        opts: &opts,
        layout: args.cache.layout()?,
        ttft_rounds: args.rounds.ttft_rounds,
    };
    run_compare(
        &backend,
        model,
        loaded.tokenizer.as_ref(),
        &request,
        args.out.json,
    )
}

/// A fixed ~100-token prompt for the demo: long enough that the naive path's per-step
/// cost is visible, short enough to finish in seconds.
const DEMO_PROMPT: &str = "The KV cache is the reason large language models can answer quickly. \
When a model reads a prompt, it computes a key and a value vector for every token in every layer. \
Without a cache, each new token forces the model to recompute all of them from scratch. \
Explain, in two sentences, why caching keys and values makes generation faster:";

pub fn demo(args: DemoArgs) -> Result<()> {
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
        let ids = synthetic_prompt(100, model.config.vocab_size, 0);
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
    let backend = args.device.backend(&model)?;
    let request = CompareRequest {
        prompt_ids: &prompt_ids,
        opts: &opts,
        layout: CacheLayout::default(),
        ttft_rounds: args.rounds.ttft_rounds,
    };
    run_compare(
        &backend,
        &model,
        tokenizer.as_ref(),
        &request,
        args.out.json,
    )
}

/// What `compare` and `demo` run through both paths.
struct CompareRequest<'a> {
    prompt_ids: &'a [u32],
    opts: &'a GenerateOptions,
    layout: CacheLayout,
    ttft_rounds: usize,
}

fn run_compare(
    backend: &Backend,
    model: &Model,
    tokenizer: Option<&Tokenizer>,
    request: &CompareRequest,
    json: bool,
) -> Result<()> {
    let &CompareRequest {
        prompt_ids,
        opts,
        layout,
        ttft_rounds,
    } = request;
    check_request(&model.config, prompt_ids, opts.max_new_tokens)?;
    if !json {
        eprintln!(
            "device: {} | prompt: {} tokens | TTFT: a warm-up round and {ttft_rounds} rounds, the paths alternating | then {} new tokens with each path (the naive one takes a while)...",
            backend.describe(),
            prompt_ids.len(),
            opts.max_new_tokens
        );
    }
    // The learner's functions first, one by one on the real model's activations: a
    // wrong one is named before a long generation says only "the tokens differ".
    let kernels = match backend {
        Backend::Learner(model) => kvlab::learner::check_kernels(model, prompt_ids, 2)?,
        _ => Vec::new(),
    };
    if let Some(bad) = kernels.iter().find(|k| !k.ok) {
        if json {
            print::json(&kernels)?;
        } else {
            print::kernel_checks(&kernels);
        }
        let n: u32 = bad.exercise.parse().unwrap_or(0);
        return Err(kvlab::Error::Differs(format!(
            "exercise {} ({}) does not give kvlab's numbers in the engine: run `cargo run --manifest-path exercises/Cargo.toml -- run {n}` (and `-- hint {n}`)",
            bad.exercise, bad.function
        )));
    }
    let mut cmp = compare_with(
        |path| backend.decoder(path, layout, prompt_ids.len(), opts.max_new_tokens),
        prompt_ids,
        opts,
        ttft_rounds,
    )?;
    if let Some((implementation, files)) = backend.second_implementation() {
        // The engine as tests/textbook.rs checks it: f32 rows, a preallocated cache.
        let engine = Backend::Cpu(model);
        let (n, max_new) = (prompt_ids.len(), opts.max_new_tokens);
        let mut against = against_engine(
            || engine.decoder(PathKind::Cached, layout, n, max_new),
            || backend.decoder(PathKind::Cached, layout, n, max_new),
            prompt_ids,
            opts,
            &cmp.cached.generated_ids,
            implementation,
            files,
        )?;
        against.kernels = kernels;
        cmp.against_engine = Some(against);
    }
    if let Some(tok) = tokenizer {
        cmp.cached.text = visible_text(tok, &cmp.cached.generated_ids, &opts.eos_ids)?;
        cmp.naive.text = visible_text(tok, &cmp.naive.generated_ids, &opts.eos_ids)?;
    }
    if json {
        print::json(&cmp)?;
    } else {
        print::comparison(&cmp);
    }
    // A policy that rounds or forgets (`--kv int8`, `window`, ...) is not the naive path's
    // arithmetic: different tokens are its cost (measured by `kvlab eval`), not a bug.
    if !layout.policy.is_exact() {
        if !json {
            eprintln!(
                "note: --kv {} rounds or forgets cached positions, so its tokens may differ from the naive path's: measure its cost with kvlab eval",
                layout.policy.name()
            );
        }
        return Ok(());
    }
    cmp.check()?;
    match &cmp.against_engine {
        Some(a) if !a.identical_tokens => Err(kvlab::Error::Differs(format!(
            "--impl {}: generated token {} differs from the engine's{}",
            a.implementation,
            a.first_difference.unwrap_or(0) + 1,
            if a.implementation == "learner" {
                ": run `cargo run --manifest-path exercises/Cargo.toml -- check` to find the exercise"
            } else {
                " (the textbook must give the engine's bits: this is a bug in kvlab, please report it)"
            }
        ))),
        _ => Ok(()),
    }
}
