//! Speculative decoding from the command line: `kvlab generate --speculative`,
//! `kvlab compare --speculative`, `kvlab bench-verify` and `kvlab spec-sweep`.
//! Book: speculative.md.

use super::generate::{options, visible_text, CompareArgs, GenerateArgs, TokenPrinter};
use crate::args::{
    CacheArgs, DeviceArg, DeviceArgs, JsonArgs, ModelArgs, PathArg, PromptArgs, SamplingArgs,
    SpecArgs,
};
use crate::print;
use clap::Args;
use kvlab::backend::new_layout_store;
use kvlab::device::WeightDtype;
use kvlab::error::{Error, Result};
use kvlab::generate::{check_request, PathKind};
use kvlab::lab;
use kvlab::model::Model;
use kvlab::speculative::{generate_speculative, AcceptRule, DrafterSpec, SpecOptions};

#[derive(Args)]
pub struct BenchVerifyArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Positions in the cache under every pass.
    #[arg(long, default_value_t = 180)]
    pub context: usize,
    /// Largest draft length measured (k = 1..=max-k; the pass runs k + 1 rows).
    #[arg(long, default_value_t = 16)]
    pub max_k: usize,
    /// Timed repetitions, interleaved across k (medians are reported).
    #[arg(long, default_value_t = 9)]
    pub reps: usize,
    #[command(flatten)]
    pub out: JsonArgs,
}

#[derive(Args)]
pub struct SpecSweepArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Drafters, comma-separated: ngram, ngram:N, early-exit:L, bf16.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ngram,early-exit:20,bf16"
    )]
    pub drafters: Vec<String>,
    /// Draft lengths k, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub draft_lens: Vec<usize>,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub out: JsonArgs,
}

/// The drafter `--speculative` names, and a clear error for what speculative decoding
/// does not run on. Checked before the model loads.
fn drafter_spec(spec: &SpecArgs, path: PathArg, device: &DeviceArgs) -> Result<DrafterSpec> {
    let name = spec.speculative.as_deref().unwrap_or("ngram");
    let drafter: DrafterSpec = name.parse()?;
    if matches!(path, PathArg::Naive) {
        return Err(Error::InvalidArgument(
            "--speculative verifies drafts on top of a KV cache: it has no naive path (drop --path naive)".into(),
        ));
    }
    if device.device == DeviceArg::Cuda {
        return Err(Error::InvalidArgument(
            "--speculative runs on the CPU only from the command line (the GPU loop, greedy with the n-gram drafter, is kvlab::cuda::speculative, not yet wired to the CLI): drop --device cuda".into(),
        ));
    }
    if device.cpu_dtype()? != WeightDtype::F32 {
        return Err(Error::InvalidArgument(
            "--speculative verifies with f32 weights only (for a bf16 draft of the f32 model use --speculative bf16): drop --dtype".into(),
        ));
    }
    Ok(drafter)
}

/// Plain decoding's options as speculative ones, `k` checked against the model.
fn spec_options(
    max_new_tokens: usize,
    sampling: &SamplingArgs,
    model: &Model,
    draft_len: usize,
) -> Result<SpecOptions> {
    let plain = options(max_new_tokens, sampling, model, PathKind::Cached);
    let opts = SpecOptions {
        max_new_tokens,
        sampler: plain.sampler,
        eos_ids: plain.eos_ids,
        draft_len,
        accept_rule: AcceptRule::Exact,
    };
    opts.validate(model)?;
    Ok(opts)
}

// ANCHOR: cli_generate
/// `kvlab generate --speculative DRAFTER [--draft-len K]`: streams the tokens as rounds
/// emit them, then the usual figures and the drafter's (acceptance, tokens per pass).
pub fn generate(args: GenerateArgs) -> Result<()> {
    args.implementation.engine_only("--speculative")?;
    let spec = drafter_spec(&args.spec, args.path, &args.device)?;
    let loaded = args.model.load(args.sampling.seed, true)?;
    let (model, tokenizer) = (&loaded.model, loaded.tokenizer.as_ref());
    let prompt_ids = args.prompt.token_ids(tokenizer, &model.config)?;
    let (max_new, layout) = (args.prompt.max_new_tokens, args.cache.layout()?);
    let opts = spec_options(max_new, &args.sampling, model, args.spec.draft_len)?;
    check_request(&model.config, &prompt_ids, max_new)?;
    let mut drafter = spec.build(model)?;
    let capacity = prompt_ids.len() + max_new;
    let mut cache = new_layout_store(&model.config, layout, capacity)?;
    let json = args.out.json;
    let mut printer = TokenPrinter::new(tokenizer, &opts.eos_ids, json);
    let mut g = generate_speculative(
        model,
        cache.as_mut(),
        drafter.as_mut(),
        &prompt_ids,
        &opts,
        |token, _| printer.push(token),
    )?;
    if let Some(tokenizer) = tokenizer {
        g.text = visible_text(tokenizer, &g.generated_ids, &opts.eos_ids)?;
    }
    if json {
        return print::json(&g);
    }
    outln!();
    eprintln!("{}", print::spec_summary(&g));
    eprintln!("cache layout: {}", layout.kind.name());
    Ok(())
}
// ANCHOR_END: cli_generate

/// `kvlab compare --speculative DRAFTER`: plain cached vs speculative on the same
/// request. Greedy: the tokens must be identical (exit 1 if not).
pub fn compare(args: CompareArgs) -> Result<()> {
    args.implementation.engine_only("--speculative")?;
    let spec = drafter_spec(&args.spec, PathArg::Cached, &args.device)?;
    let loaded = args.model.load(args.sampling.seed, true)?;
    let (model, tokenizer) = (&loaded.model, loaded.tokenizer.as_ref());
    let prompt_ids = args.prompt.token_ids(tokenizer, &model.config)?;
    let max_new = args.prompt.max_new_tokens;
    let opts = spec_options(max_new, &args.sampling, model, args.spec.draft_len)?;
    check_request(&model.config, &prompt_ids, max_new)?;
    let mut drafter = spec.build(model)?;
    if !args.out.json {
        eprintln!(
            "prompt: {} tokens, generating {max_new} with plain cached decoding, then speculatively ({spec}, k = {})...",
            prompt_ids.len(),
            opts.draft_len
        );
    }
    let layout = args.cache.layout()?;
    let mut e =
        lab::speculative::run_experiment(model, drafter.as_mut(), &prompt_ids, &opts, layout)?;
    if let Some(tokenizer) = tokenizer {
        let ids = &e.speculative.generated_ids;
        e.speculative.text = visible_text(tokenizer, ids, &opts.eos_ids)?;
    }
    if args.out.json {
        print::json(&e)?;
    } else {
        print::spec_comparison(&e);
    }
    let greedy = opts.sampler.temperature == 0.0;
    if greedy && !e.tokens_identical {
        return Err(Error::Mismatch(
            "greedy speculative decoding generated other tokens than plain cached decoding".into(),
        ));
    }
    Ok(())
}

/// `kvlab bench-verify`: one verify pass over k drafts, in decode steps, k = 1..=max-k.
pub fn bench_verify(args: BenchVerifyArgs) -> Result<()> {
    let loaded = args.model.load(0, false)?;
    let report = lab::verify_cost::run(
        &loaded.model,
        &loaded.name,
        args.context,
        args.max_k,
        args.reps,
    )?;
    if args.out.json {
        return print::json(&report);
    }
    print::verify_cost(&report);
    Ok(())
}

/// `kvlab spec-sweep`: every drafter x draft length on one prompt (the chapter's figure).
pub fn spec_sweep(args: SpecSweepArgs) -> Result<()> {
    let drafters = args
        .drafters
        .iter()
        .map(|d| d.parse::<DrafterSpec>())
        .collect::<Result<Vec<_>>>()?;
    let loaded = args.model.load(args.sampling.seed, true)?;
    let model = &loaded.model;
    let prompt_ids = args
        .prompt
        .token_ids(loaded.tokenizer.as_ref(), &model.config)?;
    let max_new = args.prompt.max_new_tokens;
    // Every k is checked before the first (slow) cell runs.
    let mut base = None;
    for &k in &args.draft_lens {
        base = Some(spec_options(max_new, &args.sampling, model, k)?);
    }
    let base = base.ok_or_else(|| {
        Error::InvalidArgument("give at least one draft length (--draft-lens)".into())
    })?;
    for spec in &drafters {
        spec.check(model)?;
    }
    let report = lab::spec_sweep::run(
        model,
        &loaded.name,
        &prompt_ids,
        &drafters,
        &args.draft_lens,
        &base,
        args.cache.layout()?,
    )?;
    if args.out.json {
        print::json(&report)?;
    } else {
        print::spec_sweep(&report);
    }
    report.check()
}
