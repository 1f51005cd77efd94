//! `kvlab serve` against clients that are slow, broken or hostile, and against its own
//! failures (book: serving-http.md, "Running kvlab serve safely").
//!
//! What must hold: a client that never finishes its request head is cut off at the head
//! timeout, and one that trickles its body in is answered 408 at the body timeout;
//! connections over `max_connections` wait in the kernel's queue and are served when a
//! slot frees (a thousand idle ones cost the server under 16 MiB); a head over the size
//! limit is a 431; a streamed answer whose client stops reading is cancelled and its KV
//! blocks freed, and 64 streams dropped at random points leave every block free; hostile
//! bodies and numbers get a 4xx; an engine iteration that errs or panics fails its
//! requests with a 500 and the next request is served; a shutdown lets answers under way
//! finish (and cuts them at the drain timeout); and with a key, every route but /health
//! answers 401 to a request without it.

mod common;

use common::server::{model, Server};
use common::{real_model_present, MODEL_DIR};
use kvlab::engine::{EngineConfig, Fault};
use kvlab::server::metrics::read_value;
use kvlab::server::{App, Limits, ServerConfig};
use kvlab::tokenizer::Tokenizer;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

fn question(max_tokens: usize, stream: bool) -> Value {
    json!({
        "model": "smollm2",
        "messages": [{"role": "user", "content": "Tell me about the history of Paris."}],
        "max_tokens": max_tokens,
        "stream": stream,
    })
}

/// Reads until the server closes the connection; how long that took, or None after `limit`.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return start.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

/// A connection with a 4 KiB receive window, so that a client that stops reading stops
/// the server's writes after a few kilobytes, not after the kernel's megabytes.
async fn connect_small_window(addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(addr).await.unwrap()
}

/// A streamed chat request written by hand, on `stream`, never read. It ignores the
/// end-of-turn token: a sampled answer may end after a few dozen tokens, small enough to sit
/// in the socket buffers, and then nothing would ever stall.
async fn send_streamed_request(stream: &mut TcpStream, max_tokens: usize) {
    let mut body = question(max_tokens, true);
    body["ignore_eos"] = json!(true);
    let body = body.to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_loris_is_cut_off_at_the_header_timeout() {
    if !real_model_present() {
        return;
    }
    let limits = Limits {
        header_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let server = Server::start(limits, None).await;
    let mut loris = TcpStream::connect(server.addr).await.unwrap();
    loris.write_all(b"GET /health HTTP/1.1\r\n").await.unwrap();
    // One header line every 100 ms: always sending, never done.
    let (mut reader, mut writer) = loris.into_split();
    let drip = tokio::spawn(async move {
        for i in 0..100 {
            if writer
                .write_all(format!("x-{i}: y\r\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    drip.abort();
    assert!(
        closed.is_ok(),
        "a client still sending its head after 5 s is still connected"
    );
    assert!(
        start.elapsed() >= Duration::from_millis(400),
        "cut off before the timeout"
    );
    // The server goes on serving.
    assert_eq!(server.get("/health", None).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_trickles_in_is_408_at_the_body_timeout() {
    if !real_model_present() {
        return;
    }
    let limits = Limits {
        body_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let server = Server::start(limits, None).await;
    let body = question(4, false).to_string();
    let mut slow = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    let start = Instant::now();
    let (mut reader, mut writer) = slow.into_split();
    // One byte every 100 ms: the whole body would take seconds.
    let drip = tokio::spawn(async move {
        for byte in body.into_bytes() {
            if writer.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = [0u8; 4096];
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    drip.abort();
    assert!(read.is_ok(), "no answer 5 s into a trickling body");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(start.elapsed() >= Duration::from_millis(400));
    assert_eq!(
        server.metric("kvlab_request_bodies_timed_out_total").await,
        1.0
    );
    // A body sent at once is served.
    assert_eq!(server.chat(question(4, false), None).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_wait_until_a_slot_frees() {
    if !real_model_present() {
        return;
    }
    let limits = Limits {
        max_connections: 8,
        ..Limits::default()
    };
    let server = Server::start(limits, None).await;
    // 100 idle clients: 8 hold the slots, 92 wait in the kernel's queue.
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(TcpStream::connect(server.addr).await.unwrap());
    }
    let waiting = tokio::time::timeout(
        Duration::from_millis(500),
        server.client.get(server.url("/health")).send(),
    )
    .await;
    assert!(
        waiting.is_err(),
        "a 101st client was served while 8 idle ones held every slot"
    );
    drop(idle);
    let (status, _, _) = server.get("/health", None).await;
    assert_eq!(status, 200, "served once the idle clients left");
    assert!(server.metric("kvlab_connections_peak").await <= 8.0);
    assert!(server.metric("kvlab_connections_accepted_total").await >= 9.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_over_the_limit_is_431() {
    if !real_model_present() {
        return;
    }
    let server = Server::start(Limits::default(), None).await;
    // hyper refuses a head once it has buffered max_header_bytes (32 KiB) without finding
    // its end; it reads in growing chunks, so a head a little over the limit may pass.
    let huge = "a".repeat(128 * 1024);
    let response = server
        .client
        .get(server.url("/health"))
        .header("x-huge", huge)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 431);
    assert_eq!(server.get("/health", None).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_nobody_reads_is_cancelled_and_frees_its_blocks() {
    if !real_model_present() {
        return;
    }
    let limits = Limits {
        send_buffer_bytes: 4096,
        stream_stall: Duration::from_millis(300),
        ..Limits::default()
    };
    let server = Server::start(limits, None).await;
    let mut silent = connect_small_window(server.addr).await;
    send_streamed_request(&mut silent, 4000).await;
    // The client keeps its connection open and reads nothing: only the stall clock can
    // end the request.
    server
        .wait_for_metric("kvlab_streams_stalled_total", 1.0)
        .await;
    server.wait_for_metric("kvlab_kv_blocks_used", 0.0).await;
    assert_eq!(server.metric("kvlab_requests_running").await, 0.0);
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_iteration_fails_its_requests_and_the_engine_starts_again() {
    if !real_model_present() {
        return;
    }
    let server = Server::start(Limits::default(), None).await;
    for (n, fault) in [Fault::Error, Fault::Panic].into_iter().enumerate() {
        server.app.engine.inject_fault(fault);
        let (status, body) = server.chat(question(8, false), None).await;
        assert_eq!(status, 500, "{fault:?}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("started again"), "{fault:?}: {message}");
        let (status, body) = server.chat(question(8, false), None).await;
        assert_eq!(status, 200, "{fault:?}: the next request is served: {body}");
        assert_eq!(
            server.metric("kvlab_engine_restarts_total").await,
            (n + 1) as f64
        );
    }
    server.wait_for_metric("kvlab_kv_blocks_used", 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_lets_answers_finish_and_cuts_them_at_the_drain_timeout() {
    if !real_model_present() {
        return;
    }
    // An answer under way finishes: the client gets all of it.
    let server = Server::start(Limits::default(), None).await;
    let running = {
        let (client, url) = (server.client.clone(), server.url("/v1/chat/completions"));
        tokio::spawn(async move {
            let response = client
                .post(url)
                .json(&question(24, false))
                .send()
                .await
                .unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        })
    };
    server.wait_for_metric("kvlab_requests_running", 1.0).await;
    let drained = server.stop().await;
    let (status, body) = running.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(!drained.cancelled);
    assert!(drained.connections >= 1);

    // A client that never reads cannot hold the shutdown past the drain timeout.
    let limits = Limits {
        send_buffer_bytes: 4096,
        drain_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let server = Server::start(limits, None).await;
    let mut silent = connect_small_window(server.addr).await;
    send_streamed_request(&mut silent, 4000).await;
    // 300 tokens are ~45 KB of events: far more than the socket buffers and the channel
    // hold, so the answer is stuck on the client, not waiting for the engine.
    let deadline = Instant::now() + Duration::from_secs(120);
    while server.metric("kvlab_generation_tokens_total").await < 300.0 {
        assert!(Instant::now() < deadline, "300 tokens took over 120 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let app = server.app.clone();
    let start = Instant::now();
    let drained = server.stop().await;
    assert!(
        drained.cancelled,
        "the drain waited for a client that never reads"
    );
    assert!(start.elapsed() < Duration::from_secs(5));
    // The cut closed the connection: the client, still not reading, holds nothing.
    let deadline = Instant::now() + Duration::from_secs(2);
    while app.connections.open() > 0 {
        assert!(
            Instant::now() < deadline,
            "a connection outlived the drain timeout"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(closed_within(&mut silent, Duration::from_secs(5))
        .await
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_key_every_route_but_health_answers_401_without_it() {
    if !real_model_present() {
        return;
    }
    let key = "sk-kvlab-test-7f3a";
    let server = Server::start(Limits::default(), Some(key)).await;
    for path in ["/v1/models", "/metrics", "/no/such/route"] {
        let (status, headers, body) = server.get(path, None).await;
        assert_eq!(status, 401, "{path} without a key: {body}");
        assert_eq!(headers["www-authenticate"], "Bearer");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["code"], "invalid_api_key");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no API key"));
        let (status, _, body) = server.get(path, Some("sk-kvlab-test-7f3b")).await;
        assert_eq!(status, 401, "{path} with another key");
        assert!(body.contains("incorrect API key"));
    }
    let (status, _) = server.chat(question(4, false), None).await;
    assert_eq!(status, 401);
    let (status, body) = server.chat(question(4, false), Some(key)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.get("/v1/models", Some(key)).await.0, 200);
    assert_eq!(
        server.get("/health", None).await.0,
        200,
        "the probe needs no key"
    );
    let (_, _, page) = server.get("/metrics", Some(key)).await;
    assert_eq!(
        read_value(&page, "kvlab_requests_rejected_unauthorized_total"),
        Some(7.0)
    );
}

/// The process's resident memory in KiB (Linux: /proc/self/status).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_connections_cost_a_bounded_amount_of_memory() {
    if !real_model_present() {
        return;
    }
    let limits = Limits {
        max_connections: 32,
        ..Limits::default()
    };
    let server = Server::start(limits, None).await;
    assert_eq!(server.get("/health", None).await.0, 200);
    let before = rss_kib();
    let mut idle = Vec::new();
    for i in 0..1000 {
        match TcpStream::connect(server.addr).await {
            Ok(stream) => idle.push(stream),
            Err(e) => panic!("connection {i} of 1000: {e} (ulimit -n too low for this test?)"),
        }
    }
    // Give the server time to accept what it will.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let grown_kib = rss_kib().saturating_sub(before);
    let open = server.app.connections.open();
    drop(idle);
    // 32 connections served (hyper's buffers, a task each), 968 waiting in the kernel's
    // queue, which costs this process nothing: 16 MiB is room for ten times that.
    assert!(
        grown_kib < 16 * 1024,
        "1000 idle connections grew the server by {grown_kib} KiB"
    );
    assert!(
        open <= 32,
        "{open} connections open at once with a cap of 32"
    );
    assert_eq!(
        server.get("/health", None).await.0,
        200,
        "served once they left"
    );
    assert!(server.metric("kvlab_connections_peak").await <= 32.0);
}

/// A tiny seeded generator (the tests must not depend on a crate's sequence).
fn next_random(state: &mut u64) -> u64 {
    // SplitMix64 (Steele, Lea, Flood 2014).
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_hanging_up_at_random_points_leave_every_block_free() {
    if !real_model_present() {
        return;
    }
    let server = Server::start(Limits::default(), None).await;
    let mut seed = 24u64;
    let clients: Vec<_> = (0..64)
        .map(|i| {
            // Each reads 0 to 11 chunks, then drops its response mid-stream.
            let chunks = (next_random(&mut seed) % 12) as usize;
            let (client, url) = (server.client.clone(), server.url("/v1/completions"));
            tokio::spawn(async move {
                let body = json!({"model": "smollm2", "prompt": format!("Story {i}: once upon a time"),
                                  "max_tokens": 48, "stream": true, "ignore_eos": true});
                let response = client.post(url).json(&body).send().await.unwrap();
                let status = response.status().as_u16();
                assert!(status == 200 || status == 429, "{status}");
                let mut bytes = response.bytes_stream();
                for _ in 0..chunks {
                    if tokio_stream::StreamExt::next(&mut bytes).await.is_none() {
                        break;
                    }
                }
            })
        })
        .collect();
    for client in clients {
        client.await.expect("a client task");
    }
    server.wait_for_metric("kvlab_kv_blocks_used", 0.0).await;
    server.wait_for_metric("kvlab_requests_running", 0.0).await;
    assert!(server.metric("kvlab_requests_cancelled_total").await >= 1.0);
    let (status, body) = server.chat(question(4, false), None).await;
    assert_eq!(status, 200, "still serving: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_and_numbers_get_a_4xx_and_the_server_keeps_serving() {
    if !real_model_present() {
        return;
    }
    // A pool of 64 positions: a max_tokens the context allows but the pool cannot hold.
    let tokenizer = Tokenizer::from_dir(Path::new(MODEL_DIR)).unwrap();
    let block_bytes = 16 * 46_080; // 16 positions of SmolLM2 in f32
    let config = ServerConfig {
        engine: EngineConfig {
            kv_budget_bytes: 4 * block_bytes,
            ..EngineConfig::default()
        },
        ..ServerConfig::new("smollm2")
    };
    let app = App::new(model(), tokenizer, config).unwrap();
    let listener = kvlab::server::bind("127.0.0.1:0".parse().unwrap(), &Limits::default()).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(kvlab::server::serve(listener, app, std::future::pending()));
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/v1/chat/completions");
    let chat = |extra: &str| {
        format!(
            r#"{{"model": "smollm2", "messages": [{{"role": "user", "content": "Hi"}}]{extra}}}"#
        )
    };
    let nested = format!(
        r#"{{"model": "smollm2", "messages": {}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("invalid UTF-8", b"{\"model\": \"\xff\xfe\"}".to_vec(), ""),
        ("JSON nested 100,000 deep", nested.into_bytes(), ""),
        (
            "a temperature of 1e400",
            chat(r#", "temperature": 1e400"#).into_bytes(),
            "",
        ),
        (
            "a negative temperature",
            chat(r#", "temperature": -1"#).into_bytes(),
            "temperature",
        ),
        (
            "top_p NaN as a string",
            chat(r#", "top_p": "NaN""#).into_bytes(),
            "",
        ),
        (
            "max_tokens over u64",
            chat(r#", "max_tokens": 1e20"#).into_bytes(),
            "",
        ),
        (
            "max_tokens u64::MAX",
            chat(r#", "max_tokens": 18446744073709551615"#).into_bytes(),
            "max_tokens",
        ),
        (
            "max_tokens negative",
            chat(r#", "max_tokens": -5"#).into_bytes(),
            "",
        ),
        (
            "max_tokens beyond the pool",
            chat(r#", "max_tokens": 4000"#).into_bytes(),
            "pool",
        ),
        (
            "a seed over u64",
            chat(r#", "seed": 99999999999999999999999"#).into_bytes(),
            "",
        ),
    ];
    for (what, body, words) in cases {
        let response = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        assert!((400..500).contains(&status), "{what}: {status} {text}");
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{what}: {text}"));
        let message = value["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{what}: {message}");
    }
    let response = client
        .post(&url)
        .header("content-type", "application/json")
        .body(chat(r#", "max_tokens": 4"#))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200, "still serving");
}
