//! `kvlab serve` (an OpenAI-compatible server) and `kvlab loadtest` (a seeded workload
//! against one): book serving.md. Both only parse arguments; the server and the load
//! generator live in the library (`kvlab::server`).

use crate::args::{BlockSizeArgs, DtypeArgs, KvArgs, SpecArgs, DEFAULT_MODEL};
use crate::checks::{at_least, in_range, seconds};
use crate::print;
use clap::{Args, ValueEnum};
use kvlab::engine::{EngineConfig, Policy};
use kvlab::error::{Error, Result};
use kvlab::loader;
use kvlab::server::loadtest::{self, LoadtestConfig};
use kvlab::server::workload::PromptMix;
use kvlab::server::{App, Limits, ServerConfig};
use kvlab::tokenizer::Tokenizer;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args)]
pub struct ServeArgs {
    /// Model folder (config.json, *.safetensors, tokenizer.json).
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub model: PathBuf,
    /// The name clients send as "model" (default: the folder's name).
    #[arg(long)]
    pub served_model_name: Option<String>,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// 0 picks a free port (printed on stderr).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// How the engine forms batches.
    #[arg(long, value_enum, default_value_t = PolicyArg::ContinuousChunked)]
    pub policy: PolicyArg,
    /// Tokens one engine iteration may run (decode rows + prefill chunk rows).
    #[arg(long, default_value_t = EngineConfig::default().max_batch_tokens)]
    pub max_batch_tokens: usize,
    /// Bytes of the paged KV pool (default: 16384 positions of SmolLM2-135M in f32).
    #[arg(long, default_value_t = EngineConfig::default().kv_budget_bytes)]
    pub kv_budget: usize,
    /// Requests that may wait for admission; more are refused with 429.
    #[arg(long, default_value_t = EngineConfig::default().max_waiting)]
    pub max_waiting: usize,
    /// Larger request bodies are refused with 413.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// max_tokens for a request that gives none.
    #[arg(long, default_value_t = 256)]
    pub default_max_tokens: usize,
    /// Every route but /health asks for `Authorization: Bearer <key>` (OpenAI's clients
    /// send their api_key so). Read from KVLAB_API_KEY when not given: a flag shows in `ps`.
    #[arg(long, env = "KVLAB_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Connections served at once; more wait in the kernel's accept queue.
    #[arg(long, default_value_t = Limits::default().max_connections)]
    pub max_connections: usize,
    /// Seconds a client has to send its request line and headers.
    #[arg(long, default_value_t = Limits::default().header_timeout.as_secs_f64())]
    pub header_timeout_s: f64,
    /// Seconds a client has to send its whole request body (then 408).
    #[arg(long, default_value_t = Limits::default().body_timeout.as_secs_f64())]
    pub body_timeout_s: f64,
    /// Seconds a streamed answer waits for a client that reads nothing, then is cancelled.
    #[arg(long, default_value_t = Limits::default().stream_stall.as_secs_f64())]
    pub stream_stall_s: f64,
    /// On SIGTERM or Ctrl-C, seconds the answers under way get to finish.
    #[arg(long, default_value_t = Limits::default().drain_timeout.as_secs_f64())]
    pub drain_timeout_s: f64,
    /// Do not reuse the KV blocks of prompt prefixes seen before.
    #[arg(long)]
    pub no_prefix_caching: bool,
    /// Write the engine's snapshot after every iteration to FILE, a Chrome trace that
    /// Perfetto opens and the live view replays (book: live-view.md).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    #[command(flatten)]
    pub weights: DtypeArgs,
    #[command(flatten)]
    pub block: BlockSizeArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum PolicyArg {
    /// One request at a time, to completion.
    Sequential,
    /// A batch runs until all its requests finish; then the next batch.
    Static,
    /// Requests join and leave at every iteration (Orca).
    Continuous,
    /// Continuous, with long prompts prefilled in chunks under the token budget (Sarathi).
    ContinuousChunked,
}

impl From<PolicyArg> for Policy {
    fn from(p: PolicyArg) -> Policy {
        match p {
            PolicyArg::Sequential => Policy::Sequential,
            PolicyArg::Static => Policy::Static,
            PolicyArg::Continuous => Policy::Continuous,
            PolicyArg::ContinuousChunked => Policy::ContinuousChunked,
        }
    }
}

/// A multi-threaded tokio runtime: handlers, streams and the load generator run on it;
/// the engine's forward passes run on the engine's own thread.
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("cannot start the async runtime: {e}")))
}

pub fn serve(args: ServeArgs) -> Result<()> {
    at_least("--max-batch-tokens", args.max_batch_tokens, 1)?;
    at_least("--max-waiting", args.max_waiting, 1)?;
    at_least("--default-max-tokens", args.default_max_tokens, 1)?;
    in_range(
        "--max-connections",
        args.max_connections,
        1,
        100_000,
        "each one is a socket and a task",
    )?;
    let limits = Limits {
        max_connections: args.max_connections,
        header_timeout: seconds("--header-timeout-s", args.header_timeout_s)?,
        body_timeout: seconds("--body-timeout-s", args.body_timeout_s)?,
        stream_stall: seconds("--stream-stall-s", args.stream_stall_s)?,
        drain_timeout: seconds("--drain-timeout-s", args.drain_timeout_s)?,
        ..Limits::default()
    };
    if args.api_key.as_deref() == Some("") {
        return Err(Error::InvalidArgument(
            "--api-key (or KVLAB_API_KEY) is empty: give a key, or leave both unset to serve without one".into(),
        ));
    }
    if !args.model.is_dir() {
        return Err(loader::not_a_folder(&args.model));
    }
    let name = match &args.served_model_name {
        Some(name) => name.clone(),
        None => args
            .model
            .file_name()
            .map_or("model".into(), |n| n.to_string_lossy().into_owned()),
    };
    let tokenizer = Tokenizer::from_dir(&args.model)?;
    let model = args
        .weights
        .batch_model(Arc::new(loader::load_model(&args.model)?))?;
    let mut config = ServerConfig::new(&name);
    config.engine = EngineConfig {
        policy: args.policy.into(),
        max_batch_tokens: args.max_batch_tokens,
        kv_budget_bytes: args.kv_budget,
        max_waiting: args.max_waiting,
        prefix_caching: !args.no_prefix_caching,
        block_size: args.block.block_size,
        kv: args.kv.policy()?,
        speculation: args.spec.engine()?,
        ..EngineConfig::default()
    };
    config.max_body_bytes = args.max_body_bytes;
    config.default_max_tokens = args.default_max_tokens;
    config.limits = limits;
    config.api_key = args.api_key.clone();
    config.record = args.record.clone();
    let policy = config.engine.policy;
    let pool = format!(
        "weights {}, --kv {} in blocks of {}",
        model.weights(),
        config.engine.kv.name(),
        config.engine.block_size
    );
    let app = App::new(model, tokenizer, config)?;
    runtime()?.block_on(async move {
        let addr = format!("{}:{}", args.host, args.port);
        let cannot = |e: &dyn std::fmt::Display| {
            Error::InvalidArgument(format!(
                "cannot listen on {addr}: {e}: pick another --port or --host"
            ))
        };
        let resolved = tokio::net::lookup_host(&addr)
            .await
            .map_err(|e| cannot(&e))?
            .next()
            .ok_or_else(|| cannot(&"the host has no address"))?;
        let listener = kvlab::server::bind(resolved, &limits).map_err(|e| cannot(&e))?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::io("the listening socket", e))?;
        eprintln!(
            "kvlab serve: `{name}` on http://{local}/v1 (policy {}, {pool}), Ctrl-C to stop",
            policy.name()
        );
        eprintln!("kvlab serve: the live view is at http://{local}/");
        if let Some(file) = &args.record {
            eprintln!("kvlab serve: recording every iteration to {}", file.display());
        }
        if args.api_key.is_none() && !local.ip().is_loopback() {
            eprintln!("kvlab serve: warning: listening on {local} without --api-key: anyone who can reach it can use it");
        }
        let drained = kvlab::server::serve(listener, app, shutdown_signal())
            .await
            .map_err(|e| Error::io("the server socket", e))?;
        eprintln!(
            "kvlab serve: stopped: {} connection(s) drained in {:.1} s{}",
            drained.connections,
            drained.seconds,
            if drained.cancelled {
                " (the drain timeout cancelled the answers still running)"
            } else {
                ""
            }
        );
        Ok(())
    })
}

/// Ctrl-C or SIGTERM (what `kill` and the scripts send).
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!("kvlab serve: stopping");
}

#[derive(Args)]
pub struct LoadtestArgs {
    /// The server's base URL (http only).
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub url: String,
    /// The "model" to ask for (default: the first of GET /v1/models).
    #[arg(long)]
    pub model: Option<String>,
    #[arg(long, default_value_t = 32)]
    pub requests: usize,
    /// Mean arrivals per second (Poisson).
    #[arg(long, default_value_t = 1.0)]
    pub rate: f64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Request kinds and their weights: `short:3,long:1` (short: 20-60 prompt tokens,
    /// 16-64 out; long: 900-1100 prompt tokens, 16-32 out; copy: a passage of 80-120
    /// tokens given twice, 48-64 out, where prompt-lookup drafts find what comes next).
    #[arg(long, default_value = "short:3,long:1")]
    pub prompt_mix: String,
    /// Seconds a request may take before it counts as failed.
    #[arg(long, default_value_t = 600)]
    pub timeout_s: u64,
    /// A closed loop of N clients instead of arrivals at --rate: each sends its next request
    /// when its last is done (N requests in flight, as `vllm bench serve
    /// --max-concurrency`), the load that compares two servers.
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// Print the whole report (with every token's arrival time) as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn loadtest(args: LoadtestArgs) -> Result<()> {
    // Every request is planned (and its prompt held) up front: bound the count.
    in_range(
        "--requests",
        args.requests,
        1,
        100_000,
        "requests planned up front",
    )?;
    if let Some(n) = args.concurrency {
        in_range("--concurrency", n, 1, 1024, "clients in flight at once")?;
    }
    // A rate near 0 would plan arrivals centuries away (and overflow the timers).
    if !(args.rate.is_finite() && (0.001..=10_000.0).contains(&args.rate)) {
        return Err(Error::InvalidArgument(format!(
            "--rate {}: give requests per second between 0.001 and 10000",
            args.rate
        )));
    }
    let config = LoadtestConfig {
        url: args.url.trim_end_matches('/').to_string(),
        model: args.model.clone(),
        requests: args.requests,
        rate: args.rate,
        seed: args.seed,
        mix: PromptMix::parse(&args.prompt_mix)?,
        timeout_s: args.timeout_s,
        concurrency: args.concurrency,
    };
    let report = runtime()?.block_on(loadtest::run(&config))?;
    if args.json {
        return print::json(&report);
    }
    print::loadtest(&report);
    Ok(())
}

#[derive(Args)]
pub struct LoadtestTableArgs {
    /// `kvlab loadtest --json` reports (scripts/loadtest-policies.sh writes one per policy).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// The policies' table (book: serving.md), from saved `kvlab loadtest --json` reports.
pub fn loadtest_table(args: LoadtestTableArgs) -> Result<()> {
    let mut reports = Vec::new();
    for path in &args.files {
        let text = kvlab::limits::read_text_capped(
            path,
            kvlab::limits::MAX_JSON_BYTES,
            "load-test report",
        )?;
        let report: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::InvalidFile {
                path: path.clone(),
                msg: format!("not a kvlab loadtest --json report: {e}"),
            })?;
        reports.push(report);
    }
    // The policies in the order the chapter introduces them; unknown ones last.
    let rank = |r: &serde_json::Value| {
        let name = r["policy"].as_str().unwrap_or("");
        Policy::ALL
            .iter()
            .position(|p| p.name() == name)
            .unwrap_or(Policy::ALL.len())
    };
    reports.sort_by_key(rank);
    print::loadtest_table(&reports)
}
