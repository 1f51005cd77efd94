//! The live view's data (book: live-view.md): what a snapshot says is what the engine
//! holds, a recording gives back the snapshots it was given, and the event stream
//! behaves as a server route must.
//!
//! The engine half runs a tiny random model under seeded loads (shared prefixes,
//! preemption, prefix caching on and off) and checks every iteration's snapshot against
//! the pool: each block's owners are the block tables that hold it and their number is
//! its reference count; used, free, parked and shared add up; each request's block
//! count, the running and waiting lists and the batch's rows are the engine's. The
//! server half runs the real model: the first snapshot arrives at once, the page is open
//! without the key and the stream is not, the last snapshot after a load equals
//! `/metrics`, a watcher that never reads does not hold the engine back, a page left
//! open does not hold a shutdown, and `--record` leaves a closed trace with one
//! snapshot per iteration.

mod common;

use common::server::Server;
use common::{real_model_present, tiny_config};
use kvlab::cache::{KvElement, KvPolicy};
use kvlab::engine::{
    read_snapshots, Engine, EngineConfig, Policy, Request, RequestState, RowKind, SamplingParams,
    Snapshot, StepReport, TraceWriter,
};
use kvlab::server::{Limits, ServerConfig};
use kvlab::Model;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpSocket;

fn ids(ids: &[u32]) -> String {
    format!("{ids:?}")
}

/// Every claim a snapshot makes, checked against the engine it was taken of.
fn check_snapshot(engine: &Engine, report: &StepReport, snap: &Snapshot) {
    let metrics = engine.metrics();
    let pool = &snap.pool;
    assert_eq!(pool.blocks.len(), engine.cache().pool().n_blocks());
    assert_eq!(pool.used, metrics.kv_blocks_used, "used blocks");
    assert_eq!(
        pool.free + pool.parked,
        metrics.kv_blocks_free,
        "free + parked"
    );
    assert_eq!(pool.used + pool.free + pool.parked, pool.blocks.len());
    let mut held: BTreeMap<u64, usize> = BTreeMap::new();
    for (b, block) in pool.blocks.iter().enumerate() {
        // A block's reference count is the number of block tables holding it.
        assert_eq!(
            block.owners.len(),
            block.refs as usize,
            "block {b}: {block:?}"
        );
        if block.parked {
            assert!(
                block.named && block.refs == 0,
                "block {b} parked: {block:?}"
            );
        }
        for &owner in &block.owners {
            *held.entry(owner).or_default() += 1;
        }
    }
    assert_eq!(
        pool.shared,
        pool.blocks.iter().filter(|b| b.refs > 1).count()
    );
    assert_eq!(pool.parked, pool.blocks.iter().filter(|b| b.parked).count());
    let running: Vec<u64> = (snap.requests.iter())
        .filter(|r| r.state == RequestState::Running)
        .map(|r| r.id)
        .collect();
    assert_eq!(running, engine.running_ids());
    let waiting: Vec<u64> = (snap.requests.iter())
        .filter(|r| r.state == RequestState::Waiting)
        .map(|r| r.id)
        .collect();
    assert_eq!(waiting, engine.waiting_ids().collect::<Vec<_>>());
    for r in &snap.requests {
        assert_eq!(
            r.blocks,
            held.get(&r.id).copied().unwrap_or(0),
            "request {}",
            r.id
        );
        let seq = engine.sequence(r.id);
        assert_eq!((r.computed, r.generated), (seq.n_computed, seq.generated));
    }
    assert_eq!(
        snap.batch.iter().map(|b| b.rows).sum::<usize>(),
        report.n_rows()
    );
    for b in snap.batch.iter().filter(|b| b.kind == RowKind::Decode) {
        assert_eq!(
            b.rows - b.drafts,
            1,
            "a decode runs one pending token: {b:?}"
        );
    }
    assert_eq!(snap.finished, report.finished);
    assert_eq!(snap.preempted, report.preempted);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Seeded loads on a tiny model: every iteration's snapshot tells the truth, and the
    /// recording of them reads back the same.
    #[test]
    fn snapshots_tell_the_pool_as_it_is(
        seed in 0u64..1000,
        n_requests in 2usize..7,
        shared_prefix in 0usize..40,
        pool_blocks in 6usize..40,
        prefix_caching in any::<bool>(),
        chunked in any::<bool>(),
    ) {
        let config = tiny_config(2, 4, 2, 8, 64);
        let element = KvElement::for_pool(&config, KvPolicy::Full, "paged").unwrap();
        let token_bytes = element.bytes_per_token(&config);
        let model = Arc::new(Model::random(config, seed).unwrap());
        let block_size = 4;
        let engine_config = EngineConfig {
            policy: if chunked { Policy::ContinuousChunked } else { Policy::Continuous },
            max_batch_tokens: 24,
            block_size,
            kv_budget_bytes: pool_blocks * block_size * token_bytes,
            prefix_caching,
            ..EngineConfig::default()
        };
        let mut engine = Engine::new(model, engine_config).unwrap();
        let mut rng = kvlab::rng::Rng::new(seed);
        let prefix: Vec<u32> = (0..shared_prefix).map(|_| (rng.next_u64() % 64) as u32).collect();
        let mut arrivals: Vec<(u64, Request)> = (0..n_requests)
            .map(|i| {
                let own = 1 + (rng.next_u64() % 12) as usize;
                let mut prompt = prefix.clone();
                prompt.extend((0..own).map(|_| (rng.next_u64() % 64) as u32));
                let request = Request {
                    prompt,
                    max_tokens: 1 + (rng.next_u64() % 10) as usize,
                    sampling: SamplingParams::default(),
                    stop_ids: Vec::new(),
                };
                (i as u64 * (rng.next_u64() % 3), request)
            })
            .collect();
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut writer = TraceWriter::create(file.path()).unwrap();
        let mut written = Vec::new();
        for t in 0.. {
            prop_assert!(t < 2000, "the load never ends");
            for (_, request) in arrivals.iter().filter(|(at, _)| *at <= t) {
                // A request the pool can never hold is refused at once: fine here.
                let _ = engine.add(request.clone());
            }
            arrivals.retain(|(at, _)| *at > t);
            if !engine.has_work() && arrivals.is_empty() {
                break;
            }
            let report = engine.step().unwrap();
            let snap = engine.snapshot(Some(&report), t * 1000, &ids);
            check_snapshot(&engine, &report, &snap);
            writer.write(&snap).unwrap();
            // Through text, as the reader gets it (serde_json's float parsing is not
            // a round trip of its printing in the last bit).
            written.push(serde_json::from_str::<Value>(&serde_json::to_string(&snap).unwrap()).unwrap());
        }
        writer.finish().unwrap();
        let text = std::fs::read_to_string(file.path()).unwrap();
        let read: Vec<Value> = (read_snapshots(&text).unwrap().iter())
            .map(|s| serde_json::to_value(s).unwrap())
            .collect();
        prop_assert_eq!(&read, &written);
        // A server killed mid-run leaves no closing bracket: the file still reads.
        let cut = text.trim_end().trim_end_matches(']');
        prop_assert_eq!(read_snapshots(cut).unwrap().len(), written.len());
        check_trace(&text);
    }
}

/// The file is a Chrome trace: a JSON array of events, each with a phase and a time;
/// every request's async slice opens once and closes once.
fn check_trace(text: &str) {
    let events: Vec<Value> = serde_json::from_str(text).expect("a JSON array");
    let mut open: BTreeMap<u64, i32> = BTreeMap::new();
    for e in &events {
        let ph = e["ph"].as_str().expect("every event has a phase");
        assert!(ph == "M" || e["ts"].is_u64(), "an event without ts: {e}");
        match ph {
            "b" => *open.entry(e["id"].as_u64().unwrap()).or_default() += 1,
            "e" => *open.entry(e["id"].as_u64().unwrap()).or_default() -= 1,
            _ => {}
        }
    }
    assert!(
        open.values().all(|&n| n == 0),
        "unbalanced request slices: {open:?}"
    );
}

#[test]
fn a_recording_of_another_version_or_not_a_trace_is_refused_in_one_line() {
    let e = read_snapshots("{\"not\": \"an array\"}")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a Chrome trace"), "{e}");
    let old =
        json!([{"name": "iteration", "ph": "X", "ts": 0, "args": {"snapshot": {"version": 999}}}]);
    let e = read_snapshots(&old.to_string()).unwrap_err().to_string();
    assert!(
        e.contains("does not parse") || e.contains("version 999"),
        "{e}"
    );
}

/// Reads SSE `snapshot` events from `response` until `done` says stop (or 60 s pass).
async fn snapshots_until(
    response: &mut reqwest::Response,
    mut done: impl FnMut(&Snapshot) -> bool,
) -> Vec<Snapshot> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buffer = String::new();
    let mut seen = Vec::new();
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) {
                assert!(event.starts_with("event: snapshot"), "{event}");
                let snap: Snapshot = serde_json::from_str(data).expect("a snapshot");
                let stop = done(&snap);
                seen.push(snap);
                if stop {
                    return seen;
                }
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, response.chunk())
            .await
            .expect("a snapshot within 60 s")
            .expect("the stream reads")
            .expect("the stream goes on");
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
    }
}

fn completion(prompt: &str, max_tokens: usize) -> Value {
    json!({"model": "smollm2", "prompt": prompt, "max_tokens": max_tokens})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_shows_the_engine_and_the_last_picture_equals_metrics() {
    if !real_model_present() {
        return;
    }
    let server = Server::start(Limits::default(), None).await;
    let mut events = (server.client.get(server.url("/v1/engine/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    // The first picture comes at once, though the engine is idle.
    let first = snapshots_until(&mut events, |_| true).await;
    assert_eq!((first[0].iteration, first[0].pool.used), (0, 0));
    let prompt = "The history of the lighthouse begins in the ancient world, where fires on hills guided ships";
    let send = || {
        let client = server.client.clone();
        let url = server.url("/v1/completions");
        tokio::spawn(async move {
            let r = client.post(url).json(&completion(prompt, 12)).send().await;
            r.unwrap().status().as_u16()
        })
    };
    // One request first, until it decodes: its prompt's full blocks are then in the
    // prefix cache, so the two that follow share them. (Sent together, all three could
    // land in one iteration and prefill side by side, sharing nothing.)
    let mut sends = vec![send()];
    let mut seen = snapshots_until(&mut events, |s| {
        s.batch.iter().any(|b| b.kind == RowKind::Decode)
    })
    .await;
    sends.extend([send(), send()]);
    // Until the engine is empty with every answer back (the last picture of an
    // iteration is sent before the answers it finished).
    loop {
        let mut busy = false;
        seen.extend(
            snapshots_until(&mut events, |s| {
                busy |= !s.requests.is_empty();
                busy && s.requests.is_empty()
            })
            .await,
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        if sends.iter().all(|s| s.is_finished()) {
            break;
        }
    }
    for send in sends {
        assert_eq!(send.await.unwrap(), 200);
    }
    assert!(
        seen.iter().any(|s| s.pool.shared > 0),
        "three equal prompts share blocks"
    );
    assert!(seen
        .iter()
        .any(|s| s.batch.iter().any(|b| b.kind == RowKind::Prefill)));
    assert!(seen
        .iter()
        .any(|s| s.batch.iter().any(|b| b.kind == RowKind::Decode)));
    let last = seen.last().unwrap();
    assert_eq!(
        last.pool.used as f64,
        server.metric("kvlab_kv_blocks_used").await
    );
    let free = (last.pool.free + last.pool.parked) as f64;
    assert_eq!(free, server.metric("kvlab_kv_blocks_free").await);
    assert_eq!(
        last.iteration as f64,
        server.metric("kvlab_iterations_total").await
    );
    assert!(
        last.pool.parked > 0,
        "the prompt's full blocks wait in the prefix cache"
    );
    let text: String = seen
        .iter()
        .flat_map(|s| s.requests.iter())
        .map(|r| r.text.clone())
        .collect();
    assert!(!text.is_empty(), "the requests' text streams in");
    drop(events);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_open_and_the_stream_needs_the_key() {
    if !real_model_present() {
        return;
    }
    let key = "sk-live-view-test";
    let server = Server::start(Limits::default(), Some(key)).await;
    for path in ["/", "/ui/kvview.js", "/ui/kvview.css"] {
        let (status, headers, body) = server.get(path, None).await;
        assert_eq!(status, 200, "{path}");
        assert!(!body.is_empty());
        let kind = headers["content-type"].to_str().unwrap().to_string();
        assert!(kind.starts_with("text/"), "{path}: {kind}");
    }
    assert_eq!(server.get("/ui/nothing.js", None).await.0, 401);
    let refused = (server.client.get(server.url("/v1/engine/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let mut events = (server.client.get(server.url("/v1/engine/events")))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    snapshots_until(&mut events, |_| true).await;
    drop(events);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_never_reads_holds_nothing_and_an_open_page_does_not_hold_shutdown() {
    if !real_model_present() {
        return;
    }
    let file = tempfile::NamedTempFile::new().unwrap();
    let server = Server::start_with(ServerConfig {
        record: Some(file.path().to_path_buf()),
        ..ServerConfig::new("smollm2")
    })
    .await;
    // A watcher with a 4 KiB window that never reads a byte.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stuck = socket.connect(server.addr).await.unwrap();
    stuck
        .write_all(b"GET /v1/engine/events HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    // And one that reads, as a page does, until the stream ends.
    let mut page = (server.client.get(server.url("/v1/engine/events")))
        .send()
        .await
        .unwrap();
    snapshots_until(&mut page, |_| true).await;
    let page = tokio::spawn(async move { while let Ok(Some(_)) = page.chunk().await {} });
    let start = Instant::now();
    for _ in 0..4 {
        let (status, _) = (server.client.post(server.url("/v1/completions")))
            .json(&completion("Tell me about the sea", 16))
            .send()
            .await
            .map(|r| (r.status().as_u16(), ()))
            .unwrap();
        assert_eq!(status, 200);
    }
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "the engine was held back"
    );
    // The one that never read is a client like any other that never reads: the drain
    // would wait for it (tests/server_hostile.rs); it goes, the page stays open.
    drop(stuck);
    let iterations = server.app.engine.metrics().iterations;
    let drained = server.stop().await;
    assert!(
        !drained.cancelled,
        "the event stream ends when the server stops: {drained:?}"
    );
    assert!(drained.seconds < 2.0, "{drained:?}");
    tokio::time::timeout(Duration::from_secs(5), page)
        .await
        .expect("the page's stream ended")
        .unwrap();
    let text = std::fs::read_to_string(file.path()).unwrap();
    assert!(
        text.trim_end().ends_with(']'),
        "the recording is closed at shutdown"
    );
    let snaps = read_snapshots(&text).unwrap();
    assert_eq!(snaps.len() as u64, iterations, "one snapshot per iteration");
    check_trace(&text);
}
