//! `kvlab bench-disagg`: prefill/decode disaggregation against one colocated engine, on
//! the same seeded workload (book: serving.md, "Disaggregation").
//!
//! - **colocated**: one engine, continuous batching + chunked prefill, on a rayon pool
//!   of 2 threads: prefill chunks and decodes share every iteration and both cores.
//! - **disaggregated**: a prefill engine (`Role::PrefillOnly`) on a 1-thread pool and a
//!   decode engine (`Role::DecodeOnly`) on another, each on its own OS thread, joined by
//!   a TCP socket on 127.0.0.1: every finished prefill's KV rows go through the kernel's
//!   network stack as a [`KvTransfer`] (DistServe, Zhong et al. 2024; Splitwise, Patel
//!   et al. 2024, do this between GPUs over NVLink or InfiniBand).
//!
//! Latencies are taken where a client would see them: TTFT from the request's planned
//! arrival to its first token, ITL between consecutive tokens (in the disaggregated
//! mode the second token's gap includes the hand-off).

use super::timing::machine_name;
use crate::batch::BatchModel;
use crate::cache::{KvElement, KvPolicy};
use crate::engine::{Engine, EngineConfig, KvTransfer, Policy, Request, Role, StepReport};
use crate::error::{Error, Result};
use crate::server::loadtest::Percentiles;
use crate::server::workload::{plan, Planned, PromptMix};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// The workload and the engines' budget.
#[derive(Debug, Clone, Serialize)]
pub struct DisaggOptions {
    pub requests: usize,
    /// Mean arrivals per second (Poisson).
    pub rate: f64,
    pub seed: u64,
    pub mix: PromptMix,
    /// Tokens one iteration may run (the prefill chunk when decodes share it).
    pub max_batch_tokens: usize,
    /// Positions per block of both engines' pools (`--block-size`).
    pub block_size: usize,
    /// What both pools store (`--kv`: `full`, `int8`, `int4-per-token`): a transfer
    /// carries the rows as stored, so an int8 pool ships about a quarter of the bytes.
    pub kv: KvPolicy,
}

/// One mode's measurements.
#[derive(Debug, Clone, Serialize)]
pub struct ModeReport {
    pub mode: &'static str,
    /// How the two cores are used.
    pub threads: &'static str,
    pub ttft_ms: Percentiles,
    pub itl_ms: Percentiles,
    pub output_tokens_per_s: f64,
    /// From the start to the last token.
    pub wall_s: f64,
    /// Bytes sent over the socket (frames: 16-byte id + length, then the transfer).
    pub bytes_moved: u64,
    pub bytes_per_request: f64,
    /// First token (prefill side) to imported (decode side): serialize, send, receive,
    /// parse, wait for the decode thread, write into its pool.
    pub handoff_ms: Percentiles,
}

#[derive(Debug, Clone, Serialize)]
pub struct DisaggReport {
    pub machine: String,
    pub model: String,
    /// The engines' weights (`--dtype`, `--layout`): "f32 in panels".
    pub weights: String,
    pub options: DisaggOptions,
    pub prompt_tokens: usize,
    pub output_tokens: usize,
    /// The KV bytes of one prompt position as the pools store it (`2 x n_layers x
    /// kv_dim x 4` for f32): what a transfer carries per prompt token.
    pub kv_bytes_per_prompt_token: usize,
    /// The pools' element, by its `--kv` name.
    pub kv: &'static str,
    pub colocated: ModeReport,
    pub disaggregated: ModeReport,
    /// Greedy requests: the two modes produce the same tokens.
    pub tokens_identical: bool,
}

/// Every request's tokens with the time each was produced.
type Timeline = HashMap<u64, Vec<(Instant, u32)>>;

pub fn run(
    model: Arc<dyn BatchModel>,
    model_name: &str,
    options: DisaggOptions,
) -> Result<DisaggReport> {
    if options.requests == 0 || !(options.rate > 0.0 && options.rate.is_finite()) {
        return Err(Error::InvalidArgument(
            "--requests must be at least 1 and --rate a positive number of requests per second"
                .into(),
        ));
    }
    let planned = plan(options.requests, options.rate, options.seed, &options.mix);
    let config = EngineConfig {
        policy: Policy::ContinuousChunked,
        max_batch_tokens: options.max_batch_tokens,
        block_size: options.block_size,
        kv: options.kv,
        ..EngineConfig::default()
    };
    let element = KvElement::for_pool(model.config(), options.kv, "paged")?;
    if options.kv.window().is_some() {
        return Err(Error::InvalidArgument(format!(
            "--kv {} gives a prompt's early blocks back while it prefills, and a KV transfer carries every prompt row to the decode engine: run bench-disagg with --kv full, int8 or int4-per-token",
            options.kv.name()
        )));
    }
    for p in &planned {
        crate::engine::validate(model.config(), &config, request_of(p))?;
    }
    let (colocated, colocated_tokens) = colocated_run(&model, &config, &planned)?;
    let (disaggregated, disagg_tokens) = disaggregated_run(&model, &config, &planned)?;
    let c = model.config();
    Ok(DisaggReport {
        machine: machine_name(),
        model: model_name.to_string(),
        weights: model.weights(),
        prompt_tokens: planned.iter().map(|p| p.prompt.len()).sum(),
        output_tokens: planned.iter().map(|p| p.max_tokens).sum(),
        kv_bytes_per_prompt_token: element.bytes_per_token(c),
        kv: element.name(),
        options,
        colocated,
        disaggregated,
        tokens_identical: colocated_tokens == disagg_tokens,
    })
}

fn request_of(p: &Planned) -> Request {
    Request {
        prompt: p.prompt.clone(),
        max_tokens: p.max_tokens,
        sampling: Default::default(), // greedy: both modes must give the same tokens
        stop_ids: vec![],             // fixed output lengths, as in the load test
    }
}

fn pool(threads: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::Internal(format!("a rayon pool of {threads} threads: {e}")))
}

fn record(report: &StepReport, at: Instant, timeline: &mut Timeline) -> Result<()> {
    for (id, event) in &report.events {
        if let crate::engine::Event::Failed { message } = event {
            return Err(Error::Internal(format!("request {id} failed: {message}")));
        }
    }
    for &(id, token) in &report.tokens {
        timeline.entry(id).or_default().push((at, token));
    }
    Ok(())
}

// ANCHOR: feed
/// Adds each planned request at its arrival time and steps `engine` until the plan is
/// done and the engine idle; `on_step` sees every report and when it ended.
fn feed(
    engine: &mut Engine,
    planned: &[Planned],
    start: Instant,
    mut on_step: impl FnMut(StepReport, Instant) -> Result<()>,
) -> Result<()> {
    let mut next = 0;
    loop {
        let now = start.elapsed().as_secs_f64();
        while next < planned.len() && planned[next].arrival_s <= now {
            let p = &planned[next];
            (engine.add_as(p.index as u64, request_of(p)))
                .map_err(|e| Error::Internal(e.to_string()))?;
            next += 1;
        }
        if engine.has_work() {
            let report = engine.step()?;
            on_step(report, Instant::now())?;
        } else if next == planned.len() {
            return Ok(());
        } else {
            let wait = planned[next].arrival_s - now;
            std::thread::sleep(Duration::from_secs_f64(wait.max(0.0)));
        }
    }
}
// ANCHOR_END: feed

fn colocated_run(
    model: &Arc<dyn BatchModel>,
    config: &EngineConfig,
    planned: &[Planned],
) -> Result<(ModeReport, Vec<Vec<u32>>)> {
    let mut engine = Engine::new(model.clone(), config.clone())?;
    let mut timeline = Timeline::new();
    let start = Instant::now();
    pool(2)?.install(|| {
        feed(&mut engine, planned, start, |r, at| {
            record(&r, at, &mut timeline)
        })
    })?;
    Ok(summarise(
        "colocated",
        "2 threads, both phases",
        planned,
        start,
        &timeline,
        0,
        vec![],
    ))
}

// ANCHOR: disaggregated
/// Prefill thread -> loopback TCP -> decode thread. The prefill thread serializes each
/// finished prefill onto the socket; a reader thread turns frames back into byte
/// buffers; the decode thread parses and imports them between its iterations.
fn disaggregated_run(
    model: &Arc<dyn BatchModel>,
    config: &EngineConfig,
    planned: &[Planned],
) -> Result<(ModeReport, Vec<Vec<u32>>)> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io("bind 127.0.0.1:0"))?;
    let addr = listener.local_addr().map_err(io("local_addr"))?;
    let mut sender = TcpStream::connect(addr).map_err(io("connect to the decode engine"))?;
    let (receiver, _) = listener.accept().map_err(io("accept"))?;
    sender.set_nodelay(true).map_err(io("set_nodelay"))?;
    let (frames_tx, frames_rx) = mpsc::channel::<(u64, Vec<u8>)>();
    let start = Instant::now();
    let (prefill_pool, decode_pool) = (pool(1)?, pool(1)?);

    let reader = std::thread::spawn(move || read_frames(receiver, frames_tx));
    let decode_model = model.clone();
    let decode_config = config.clone();
    let decoder = std::thread::spawn(move || {
        let mut engine = Engine::new(decode_model, decode_config)?;
        engine.set_role(Role::DecodeOnly);
        decode_pool.install(|| decode_loop(&mut engine, frames_rx))
    });
    let mut prefill = Engine::new(model.clone(), config.clone())?;
    prefill.set_role(Role::PrefillOnly);
    let mut timeline = Timeline::new();
    let mut bytes_moved = 0u64;
    let prefill_result = prefill_pool.install(|| {
        feed(&mut prefill, planned, start, |report, at| {
            record(&report, at, &mut timeline)?;
            for (id, transfer) in &report.transfers {
                let bytes = transfer.to_bytes();
                let mut frame = Vec::with_capacity(16 + bytes.len());
                frame.extend_from_slice(&id.to_le_bytes());
                frame.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                frame.extend_from_slice(&bytes);
                sender.write_all(&frame).map_err(io("send a KV transfer"))?;
                bytes_moved += frame.len() as u64;
            }
            Ok(())
        })
    });
    drop(sender); // end of stream: the reader, then the decoder, finish
    let decoded = decoder.join().map_err(|_| panicked("decode"))?;
    reader.join().map_err(|_| panicked("socket reader"))??;
    prefill_result?;
    let (decode_timeline, imported_at) = decoded?;
    let mut handoff = Vec::new();
    for (id, at) in &imported_at {
        if let Some(&(first, _)) = timeline.get(id).and_then(|t| t.first()) {
            handoff.push((*at - first).as_secs_f64() * 1e3);
        }
        let tokens = decode_timeline.get(id).cloned().unwrap_or_default();
        timeline.entry(*id).or_default().extend(tokens);
    }
    Ok(summarise(
        "disaggregated",
        "1 thread prefill + 1 thread decode",
        planned,
        start,
        &timeline,
        bytes_moved,
        handoff,
    ))
}
// ANCHOR_END: disaggregated

/// Frames off the socket until it closes: `id: u64, len: u64, len bytes`.
fn read_frames(mut stream: TcpStream, frames: mpsc::Sender<(u64, Vec<u8>)>) -> Result<()> {
    let mut header = [0u8; 16];
    loop {
        match stream.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(io("receive a KV transfer")(e)),
        }
        let id = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(header[8..].try_into().expect("8 bytes"));
        // A frame past 1 GiB is not a prompt's KV rows but a broken stream.
        if len > 1 << 30 {
            return Err(Error::InvalidArgument(format!(
                "a KV transfer frame claims {len} bytes (over 1 GiB): the stream is corrupt"
            )));
        }
        let mut bytes = vec![0u8; len as usize];
        stream
            .read_exact(&mut bytes)
            .map_err(io("receive a KV transfer"))?;
        if frames.send((id, bytes)).is_err() {
            return Ok(()); // the decoder stopped (its error is reported)
        }
    }
}

/// The decode engine's loop: imports what has arrived, steps, until the stream is
/// closed and every request is done. Returns the tokens and when each request arrived.
fn decode_loop(
    engine: &mut Engine,
    frames: mpsc::Receiver<(u64, Vec<u8>)>,
) -> Result<(Timeline, HashMap<u64, Instant>)> {
    let (mut timeline, mut imported_at) = (Timeline::new(), HashMap::new());
    let mut pending: VecDeque<(u64, KvTransfer)> = VecDeque::new();
    let mut closed = false;
    loop {
        // Wait only when there is nothing to do.
        let idle = !engine.has_work() && pending.is_empty();
        let mut incoming: Vec<(u64, Vec<u8>)> = Vec::new();
        if idle && !closed {
            match frames.recv() {
                Ok(frame) => incoming.push(frame),
                Err(_) => closed = true,
            }
        }
        loop {
            match frames.try_recv() {
                Ok(frame) => incoming.push(frame),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        for (id, bytes) in incoming {
            pending.push_back((id, KvTransfer::from_bytes(&bytes)?));
        }
        while let Some((id, transfer)) = pending.front() {
            match engine.import(*id, transfer) {
                Ok(()) => {
                    imported_at.insert(*id, Instant::now());
                    pending.pop_front();
                }
                // The pool is full: the running requests free blocks as they finish.
                Err(crate::engine::SubmitError::QueueFull { .. }) if engine.has_work() => break,
                Err(e) => return Err(Error::Internal(format!("import request {id}: {e}"))),
            }
        }
        if engine.has_work() {
            let report = engine.step()?;
            record(&report, Instant::now(), &mut timeline)?;
        } else if closed && pending.is_empty() {
            return Ok((timeline, imported_at));
        }
    }
}

fn summarise(
    mode: &'static str,
    threads: &'static str,
    planned: &[Planned],
    start: Instant,
    timeline: &Timeline,
    bytes_moved: u64,
    handoff_ms: Vec<f64>,
) -> (ModeReport, Vec<Vec<u32>>) {
    let (mut ttft, mut itl, mut tokens, mut last) = (vec![], vec![], vec![], start);
    for p in planned {
        let times = timeline.get(&(p.index as u64)).cloned().unwrap_or_default();
        let arrival = start + Duration::from_secs_f64(p.arrival_s);
        if let Some(&(first, _)) = times.first() {
            ttft.push(first.saturating_duration_since(arrival).as_secs_f64() * 1e3);
        }
        for w in times.windows(2) {
            itl.push((w[1].0 - w[0].0).as_secs_f64() * 1e3);
        }
        last = times.iter().map(|t| t.0).fold(last, Instant::max);
        tokens.push(times.iter().map(|t| t.1).collect::<Vec<u32>>());
    }
    let wall_s = (last - start).as_secs_f64();
    let n_tokens: usize = tokens.iter().map(Vec::len).sum();
    let report = ModeReport {
        mode,
        threads,
        ttft_ms: Percentiles::of(&ttft),
        itl_ms: Percentiles::of(&itl),
        output_tokens_per_s: n_tokens as f64 / wall_s.max(1e-9),
        wall_s,
        bytes_moved,
        bytes_per_request: bytes_moved as f64 / planned.len() as f64,
        handoff_ms: Percentiles::of(&handoff_ms),
    };
    (report, tokens)
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |e| Error::Internal(format!("loopback socket: {what}: {e}"))
}

fn panicked(thread: &str) -> Error {
    Error::Internal(format!("the {thread} thread panicked"))
}
