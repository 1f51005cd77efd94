//! The `kvlab` command line: generate, compare the two paths, size a KV cache, import a
//! GGUF, a zero-setup demo, and the experiments (bench, trace, capacity, prefix, chat,
//! bench-cache, attention-map, gqa, bench-verify, spec-sweep, bench-batch, bench-disagg), and `kvlab plot`,
//! which draws the book's figures.
//!
//! The rule (src/lib.rs): the library computes and returns `Serialize` reports; this
//! binary parses arguments (`args.rs`, one shared group per concern), calls the library
//! (`cmd/`), and prints a text table (`print/`) or, with `--json`, the report itself.
//!
//! Weights: every command that runs a model takes `--model DIR` (default
//! models/smollm2-135m-instruct) or `--random-weights` (seeded weights of SmolLM2-135M's
//! shape, same cost, no tokenizer). Only `kvlab demo` falls back to random weights by
//! itself when the model folder is absent, so that it runs with zero set-up.

#[macro_use]
mod stdout;
mod args;
mod checks;
mod cmd;
mod plot;
mod print;

use clap::{Parser, Subcommand};
use cmd::attention::AttentionMapArgs;
use cmd::batch::{BenchBatchArgs, BenchDisaggArgs};
use cmd::bench::{BenchArgs, BenchCacheArgs, BenchContextArgs, BenchKvArgs};
use cmd::cache::{CapacityArgs, PrefixArgs, TraceArgs};
use cmd::chat::ChatArgs;
use cmd::eval::EvalArgs;
use cmd::evict::{EvalTableArgs, EvictSpeedArgs};
use cmd::generate::{CompareArgs, DemoArgs, GenerateArgs};
use cmd::gqa::GqaArgs;
use cmd::model::{ImportArgs, KvSizeArgs};
use cmd::record::RecordArgs;
use cmd::serve::{LoadtestArgs, LoadtestTableArgs, ServeArgs};
use cmd::side_by_side::LlamacppTableArgs;
use cmd::speculative::{BenchVerifyArgs, SpecSweepArgs};

#[derive(Parser)]
#[command(
    name = "kvlab",
    version,
    about = "Why the first token is slow and the rest are fast: a Llama forward pass, naive and KV-cached",
    after_help = "Weights: --model DIR (default models/smollm2-135m-instruct, fetched by `bash scripts/fetch-smollm2.sh`) or --random-weights. Only `kvlab demo` falls back to random weights when the model folder is absent.\n\nExit status:\n  0    success\n  1    bad input or a runtime error: one line on stderr, `error: <problem>: <fix>`\n  2    usage error: an unknown flag or a value that does not parse (clap's message)\n  141  stdout was closed before kvlab finished (e.g. `kvlab ... | head`): it stopped quietly, as a tool killed by SIGPIPE does"
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
    /// Zero set-up: compare both paths on SmolLM2 (or, if it is absent, a random model of its shape).
    Demo(DemoArgs),
    /// Measure prefill throughput and per-token latency of both paths at several contexts
    /// (with --device cuda: the GPU against its memory-bandwidth roofline).
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
    /// Decode speed of each --kv policy (full, int8, int4, ...) at long contexts.
    BenchKv(BenchKvArgs),
    /// TPOT against the context (to 8k), on the model's own cache (a ring per local layer).
    BenchContext(BenchContextArgs),
    /// One head's attention probabilities on a prompt (the causal mask, made visible) and
    /// every layer's attention on the first token.
    AttentionMap(AttentionMapArgs),
    /// Draw the book's figures (SVG) and their captions from the JSON of scripts/figures.sh.
    Plot(plot::PlotArgs),
    /// MHA vs GQA vs MQA at a long context: KV bytes, decode time, attention's share.
    Gqa(GqaArgs),
    /// Score a text teacher-forced with a KV policy (full, int8, int4, int4-per-token, window,
    /// h2o) against the full cache: perplexity, top-1 agreement, KL, KV bytes.
    Eval(EvalArgs),
    /// Every policy's `kvlab eval --json` on one text as a Markdown table (the Pareto figure's numbers).
    EvalTable(EvalTableArgs),
    /// The llama.cpp side-by-side run (scripts/llamacpp-side-by-side.sh) as a Markdown table.
    LlamacppTable(LlamacppTableArgs),
    /// One decode step at several contexts, full cache vs sliding window: a window's cost stays flat.
    EvictSpeed(EvictSpeedArgs),
    /// Speculative decoding's premise: one verify pass over k drafts, in decode steps (k = 1..16).
    BenchVerify(BenchVerifyArgs),
    /// Speculative decoding over drafters x draft lengths on one prompt: acceptance, speedups.
    SpecSweep(SpecSweepArgs),
    /// Serving many requests: output tokens/s vs concurrency (continuous batching vs one
    /// at a time), and the decode stall with and without chunked prefill.
    BenchBatch(BenchBatchArgs),
    /// Prefill/decode disaggregation: a prefill engine ships KV blocks over loopback TCP
    /// to a decode engine (1 core each) vs one colocated engine (2 cores): TTFT, ITL, bytes.
    BenchDisagg(BenchDisaggArgs),
    /// An OpenAI-compatible HTTP server (chat and completions, streamed or not) over the
    /// batching engine.
    Serve(ServeArgs),
    /// A seeded Poisson workload of short and long prompts against a server: TTFT,
    /// inter-token latency, throughput, every token's arrival time.
    Loadtest(LoadtestArgs),
    /// The scheduling policies side by side, from saved `kvlab loadtest --json` reports.
    LoadtestTable(LoadtestTableArgs),
    /// A scripted run of the engine (prefix sharing, a decode stall, preemption, an int8
    /// pool) recorded as a Chrome trace: the live view replays it, Perfetto opens it.
    Record(RecordArgs),
}

fn main() {
    let result = match Cli::parse().command {
        // Speculative decoding is its own command module, which builds on generate's
        // arguments; the choice is made here so that generate.rs never calls it back.
        Command::Generate(args) if args.spec.speculative.is_some() => {
            cmd::speculative::generate(args)
        }
        Command::Generate(args) => cmd::generate::generate(args),
        Command::Compare(args) if args.spec.speculative.is_some() => {
            cmd::speculative::compare(args)
        }
        Command::Compare(args) => cmd::generate::compare(args),
        Command::KvSize(args) => cmd::model::kv_size(args),
        Command::ImportGguf(args) => cmd::model::import_gguf(args),
        Command::Demo(args) => cmd::generate::demo(args),
        Command::Bench(args) => cmd::bench::bench(args),
        Command::Trace(args) => cmd::cache::trace(args),
        Command::Capacity(args) => cmd::cache::capacity(args),
        Command::Prefix(args) => cmd::cache::prefix(args),
        Command::Chat(args) => cmd::chat::chat(args),
        Command::BenchCache(args) => cmd::bench::bench_cache(args),
        Command::BenchKv(args) => cmd::bench::bench_kv(args),
        Command::BenchContext(args) => cmd::bench::bench_context(args),
        Command::AttentionMap(args) => cmd::attention::attention_map(args),
        Command::Plot(args) => plot::plot(args),
        Command::Gqa(args) => cmd::gqa::gqa(args),
        Command::Eval(args) => cmd::eval::eval(args),
        Command::EvalTable(args) => cmd::evict::eval_table(args),
        Command::LlamacppTable(args) => cmd::side_by_side::llamacpp_table(args),
        Command::EvictSpeed(args) => cmd::evict::evict_speed(args),
        Command::BenchVerify(args) => cmd::speculative::bench_verify(args),
        Command::SpecSweep(args) => cmd::speculative::spec_sweep(args),
        Command::BenchBatch(args) => cmd::batch::bench_batch(args),
        Command::BenchDisagg(args) => cmd::batch::bench_disagg(args),
        Command::Serve(args) => cmd::serve::serve(args),
        Command::Loadtest(args) => cmd::serve::loadtest(args),
        Command::LoadtestTable(args) => cmd::serve::loadtest_table(args),
        Command::Record(args) => cmd::record::record(args),
    };
    if let Err(e) = result {
        // One line, whatever the message holds (a path or a tokenizer's text may not).
        let message = e.to_string().replace(['\n', '\r'], " ");
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}
