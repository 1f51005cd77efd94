//! `kvlab serve` from the outside: the server runs in-process on 127.0.0.1:0 with the real
//! model, and a plain HTTP client drives it (book: serving.md).
//!
//! What must hold: greedy answers are exactly `kvlab generate`'s, streamed or not; every
//! bad request gets a 4xx with an OpenAI-style error body and the server keeps serving;
//! a client that hangs up (mid-stream, or waiting for a whole answer) frees every KV block
//! its request held; a full queue answers 429 with Retry-After while every admitted
//! request completes; and any weights with any pool (`--dtype --layout --kv`), 8 streams at
//! once, each get what they get alone and what `kvlab generate` gives with the same options.

mod common;

use common::{cli, real_model_present, MODEL_DIR};
use kvlab::batch::{batch_model, BatchModel};
use kvlab::cache::{KvPolicy, RowCodes};
use kvlab::device::{WeightDtype, WeightLayout};
use kvlab::engine::{EngineConfig, Policy, Speculation};
use kvlab::server::loadtest::SseReader;
use kvlab::server::metrics::read_value;
use kvlab::server::{App, ServerConfig};
use kvlab::tokenizer::Tokenizer;
use kvlab::{loader, Model};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio_stream::StreamExt;

const NAME: &str = "smollm2-135m-instruct";

/// One copy of the weights for every test in this file.
fn model() -> Arc<Model> {
    static MODEL: OnceLock<Arc<Model>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            Arc::new(loader::load_model(Path::new(MODEL_DIR)).expect("the model loads"))
        })
        .clone()
}

/// A server on a free loopback port, stopped when dropped.
struct Server {
    addr: SocketAddr,
    client: reqwest::Client,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Server {
    async fn start(engine: EngineConfig) -> Server {
        Server::start_on(model(), engine).await
    }

    /// A server of `weights` (`kvlab serve --dtype --layout`).
    async fn start_on(weights: Arc<dyn BatchModel>, engine: EngineConfig) -> Server {
        Server::start_model(weights, Path::new(MODEL_DIR), NAME, engine).await
    }

    /// A server of `weights` with the tokenizer of the model folder `dir`, named `name`.
    async fn start_model(
        weights: Arc<dyn BatchModel>,
        dir: &Path,
        name: &str,
        engine: EngineConfig,
    ) -> Server {
        let tokenizer = Tokenizer::from_dir(dir).expect("the tokenizer loads");
        let config = ServerConfig {
            engine,
            max_body_bytes: 256 * 1024,
            ..ServerConfig::new(name)
        };
        let app = App::new(weights, tokenizer, config).expect("the engine starts");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(kvlab::server::serve(listener, app, async move {
            let _ = stopped.await;
        }));
        Server {
            addr,
            client: reqwest::Client::new(),
            _stop: stop,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// POSTs `body` as it is (it may be broken JSON); returns status, headers, JSON body.
    async fn post_raw(&self, path: &str, body: String) -> (u16, reqwest::header::HeaderMap, Value) {
        let response = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("the server answers");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("a body");
        let value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
        (status, headers, value)
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let (status, _, value) = self.post_raw(path, body.to_string()).await;
        (status, value)
    }

    /// A streamed request: the text of its chunks, its finish reason, its usage chunk.
    async fn stream(&self, path: &str, body: Value) -> (String, String, Value) {
        let response = self
            .client
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let mut bytes = response.bytes_stream();
        let mut reader = SseReader::default();
        let (mut text, mut finish, mut usage, mut done) =
            (String::new(), String::new(), Value::Null, false);
        while let Some(chunk) = bytes.next().await {
            for data in reader.push(&chunk.unwrap()) {
                assert!(!done, "nothing may follow [DONE]");
                if data == "[DONE]" {
                    done = true;
                    continue;
                }
                let v: Value = serde_json::from_str(&data).unwrap();
                let choice = &v["choices"][0];
                text += choice["delta"]["content"]
                    .as_str()
                    .or(choice["text"].as_str())
                    .unwrap_or("");
                if let Some(f) = choice["finish_reason"].as_str() {
                    finish = f.to_string();
                }
                if !v["usage"].is_null() {
                    assert_eq!(v["choices"], json!([]), "the usage chunk has no choices");
                    usage = v["usage"].clone();
                }
            }
        }
        assert!(done, "the stream ends with data: [DONE]");
        (text, finish, usage)
    }

    /// Waits (up to 120 s) until `/metrics` shows `name` at `value`: the engine publishes
    /// its counters after each iteration, a moment after it sends that iteration's events.
    async fn wait_for_metric(&self, name: &str, value: f64) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let now = self.metric(name).await;
            if now == value {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name} is {now}, expected {value}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn metric(&self, name: &str) -> f64 {
        let page = self
            .client
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        read_value(&page, name).unwrap_or_else(|| panic!("{name} missing from /metrics:\n{page}"))
    }
}

/// What `kvlab generate ARGS` prints on stdout, without the newline it ends with.
fn kvlab_generate(args: &[&str]) -> String {
    let out = cli::ok(args, "");
    out.strip_suffix('\n').unwrap_or(&out).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greedy_answers_are_kvlab_generates_streamed_or_not() {
    if !real_model_present() {
        return;
    }
    let server = Server::start(EngineConfig::default()).await;
    let question = "What is the capital of France?";
    let expected = kvlab_generate(&[
        "generate",
        "--chat",
        "--prompt",
        question,
        "--max-new-tokens",
        "24",
    ]);
    assert!(!expected.is_empty());
    let chat = json!({"model": NAME, "messages": [{"role": "user", "content": question}], "temperature": 0, "max_tokens": 24});
    let (status, whole) = server.post("/v1/chat/completions", chat.clone()).await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["choices"][0]["message"]["content"], expected.as_str());
    let usage = &whole["usage"];
    assert!(usage["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        usage["total_tokens"],
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );

    let mut streamed = chat.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let (text, finish, stream_usage) = server.stream("/v1/chat/completions", streamed).await;
    assert_eq!(text, expected);
    assert_eq!(
        finish,
        whole["choices"][0]["finish_reason"].as_str().unwrap()
    );
    assert_eq!(
        stream_usage["completion_tokens"],
        usage["completion_tokens"]
    );

    // A stop string is matched on the text and cut; the request ends with "stop".
    let cut_at = expected.find(" Paris").expect("the model names Paris");
    let mut stopped = chat.clone();
    stopped["stop"] = json!([" Paris", "never appears"]);
    let (_, whole_stopped) = server.post("/v1/chat/completions", stopped.clone()).await;
    assert_eq!(
        whole_stopped["choices"][0]["message"]["content"],
        &expected[..cut_at]
    );
    assert_eq!(whole_stopped["choices"][0]["finish_reason"], "stop");
    stopped["stream"] = json!(true);
    let (text, finish, _) = server.stream("/v1/chat/completions", stopped).await;
    assert_eq!(
        (text.as_str(), finish.as_str()),
        (&expected[..cut_at], "stop")
    );

    // Completions: the prompt as it is, no template, as `kvlab generate` without --chat.
    let prompt = "The three primary colors are";
    let expected = kvlab_generate(&["generate", "--prompt", prompt, "--max-new-tokens", "12"]);
    let completion = json!({"model": NAME, "prompt": prompt, "temperature": 0, "max_tokens": 12});
    let (status, whole) = server.post("/v1/completions", completion.clone()).await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["object"], "text_completion");
    assert_eq!(whole["choices"][0]["text"], expected.as_str());
    let mut streamed = completion;
    streamed["stream"] = json!(true);
    let (text, _, usage) = server.stream("/v1/completions", streamed).await;
    assert_eq!(text, expected);
    assert!(
        usage.is_null(),
        "no usage chunk unless stream_options.include_usage"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_openai_errors_and_the_server_keeps_serving() {
    if !real_model_present() {
        return;
    }
    let server = Server::start(EngineConfig::default()).await;
    let chat = |extra: Value| {
        let mut body = json!({"model": NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body.to_string()
    };
    let long_prompt = "word ".repeat(9000);
    // (path, body, status, param, words the message must hold)
    let cases: Vec<(&str, String, u16, Option<&str>, &str)> = vec![
        (
            "/v1/chat/completions",
            "{\"model\": ".into(),
            400,
            None,
            "JSON",
        ),
        (
            "/v1/chat/completions",
            json!({"model": NAME}).to_string(),
            400,
            None,
            "missing field `messages`",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"max_tokens": "four"})),
            400,
            None,
            "invalid type",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"messages": "Hi"})),
            400,
            None,
            "invalid type",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"messages": [{"role": "user", "content": 7}]})),
            400,
            Some("messages[0].content"),
            "string",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"messages": []})),
            400,
            Some("messages"),
            "empty",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"n": 2})),
            400,
            Some("n"),
            "one choice",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"model": "gpt-4"})),
            404,
            Some("model"),
            "does not exist",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"max_tokens": 8192})),
            400,
            Some("max_tokens"),
            "at most",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"max_completion_tokens": 0})),
            400,
            Some("max_completion_tokens"),
            "at least 1",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"temperature": -1})),
            400,
            Some("temperature"),
            "0 (greedy) to 2",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"logprobs": true})),
            400,
            Some("logprobs"),
            "not supported",
        ),
        (
            "/v1/completions",
            json!({"model": NAME, "prompt": long_prompt}).to_string(),
            400,
            Some("prompt"),
            "context is 8192",
        ),
        (
            "/v1/completions",
            json!({"model": NAME, "prompt": [1, 2, 99999999]}).to_string(),
            400,
            Some("prompt"),
            "not a token id",
        ),
        (
            "/v1/completions",
            json!({"model": NAME, "prompt": ["a", "b"]}).to_string(),
            400,
            Some("prompt"),
            "one prompt per request",
        ),
        (
            "/v1/completions",
            json!({"model": NAME, "prompt": "x".repeat(300 * 1024)}).to_string(),
            413,
            None,
            "larger than",
        ),
        ("/v1/nothing", "{}".into(), 404, None, "no route"),
    ];
    let n_generation_refusals = cases.iter().filter(|c| c.0.starts_with("/v1/c")).count();
    for (path, body, status, param, words) in cases {
        let (got, _, value) = server.post_raw(path, body).await;
        let error = &value["error"];
        assert_eq!(got, status, "{path}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains(words),
            "{path}: {error}"
        );
        assert!(
            error["type"].is_string() && error.get("code").is_some(),
            "{error}"
        );
        assert_eq!(error["param"].as_str(), param, "{error}");
    }
    // The wrong method is refused in the same shape.
    let response = server
        .client
        .get(server.url("/v1/completions"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 405);
    let value: Value = response.json().await.unwrap();
    assert!(value["error"]["message"].as_str().unwrap().contains("POST"));

    // Still serving, and the refusals were counted.
    let (status, _, ok) = server
        .post_raw("/v1/chat/completions", chat(json!({})))
        .await;
    assert_eq!(status, 200, "{ok}");
    assert_eq!(
        server.metric("kvlab_requests_rejected_invalid_total").await,
        n_generation_refusals as f64
    );
    let health: Value = server
        .client
        .get(server.url("/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_frees_every_block() {
    if !real_model_present() {
        return;
    }
    let server = Server::start(EngineConfig::default()).await;
    // The pool's size, from the engine's configuration (not from /metrics).
    let engine = EngineConfig::default();
    let block_bytes = kvlab::cache::paged::BlockPool::block_bytes(
        &model().config,
        kvlab::cache::KvElement::F32,
        engine.block_size,
    );
    let total = (engine.kv_budget_bytes / block_bytes) as f64;
    // 2000 tokens would take minutes: only a cancel ends it soon.
    let body = json!({"model": NAME, "prompt": "Count with me: 1, 2, 3,", "max_tokens": 2000,
                      "temperature": 0, "ignore_eos": true, "stream": true});
    let response = server
        .client
        .post(server.url("/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut bytes = response.bytes_stream();
    let mut reader = SseReader::default();
    let mut chunks = 0;
    while chunks < 3 {
        chunks += reader.push(&bytes.next().await.unwrap().unwrap()).len();
    }
    assert!(
        server.metric("kvlab_kv_blocks_used").await > 0.0,
        "the request holds blocks while it runs"
    );
    drop(bytes); // the client hangs up
    server.wait_for_metric("kvlab_kv_blocks_used", 0.0).await;
    server
        .wait_for_metric("kvlab_requests_cancelled_total", 1.0)
        .await;
    assert_eq!(server.metric("kvlab_requests_running").await, 0.0);
    assert_eq!(
        server.metric("kvlab_kv_blocks_free").await,
        total,
        "every block is free again"
    );
    assert_eq!(server.metric("kvlab_requests_finished_total").await, 0.0);

    // A client of a whole (non-streamed) answer that gives up: hyper drops the handler,
    // and with it the request.
    let mut whole = body.clone();
    whole["stream"] = json!(false);
    let gave_up = server
        .client
        .post(server.url("/v1/completions"))
        .json(&whole)
        .timeout(Duration::from_secs(3))
        .send()
        .await;
    assert!(gave_up.is_err(), "2000 tokens cannot come back in 3 s");
    server
        .wait_for_metric("kvlab_requests_cancelled_total", 2.0)
        .await;
    server.wait_for_metric("kvlab_kv_blocks_used", 0.0).await;
    assert_eq!(server.metric("kvlab_requests_finished_total").await, 0.0);
    // And the server goes on.
    let (status, value) = server
        .post(
            "/v1/completions",
            json!({"model": NAME, "prompt": "Hello", "max_tokens": 2}),
        )
        .await;
    assert_eq!(status, 200, "{value}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_429_and_every_admitted_request_completes() {
    if !real_model_present() {
        return;
    }
    // One request runs at a time, one may wait: a burst of eight overflows it.
    let server = Arc::new(
        Server::start(EngineConfig {
            policy: Policy::Sequential,
            max_waiting: 1,
            ..EngineConfig::default()
        })
        .await,
    );
    let burst: Vec<_> = (0..8)
        .map(|i| {
            let server = server.clone();
            tokio::spawn(async move {
                let body = json!({"model": NAME, "prompt": format!("Request {i}: once upon a time"),
                                  "max_tokens": 8, "temperature": 0, "ignore_eos": true});
                server.post_raw("/v1/completions", body.to_string()).await
            })
        })
        .collect();
    let (mut admitted, mut refused) = (0, 0);
    for task in burst {
        let (status, headers, value) = task.await.unwrap();
        match status {
            200 => {
                admitted += 1;
                assert_eq!(value["usage"]["completion_tokens"], 8, "{value}");
                assert_eq!(value["choices"][0]["finish_reason"], "length");
            }
            429 => {
                refused += 1;
                assert_eq!(value["error"]["type"], "rate_limit_error");
                assert_eq!(value["error"]["code"], "rate_limit_exceeded");
                let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
                assert!(retry >= 1);
            }
            other => panic!("unexpected {other}: {value}"),
        }
    }
    assert!(
        admitted >= 1 && refused >= 1,
        "admitted {admitted}, refused {refused}"
    );
    assert_eq!(
        server
            .metric("kvlab_requests_rejected_queue_full_total")
            .await,
        refused as f64
    );
    server
        .wait_for_metric("kvlab_requests_finished_total", admitted as f64)
        .await;
    // The queue drained: a new request is admitted.
    let (status, value) = server
        .post(
            "/v1/completions",
            json!({"model": NAME, "prompt": "Hello", "max_tokens": 2}),
        )
        .await;
    assert_eq!(status, 200, "{value}");
}

/// Five servers, each combining a weight format with a KV pool element (one of them int8
/// blocks under a window per query, two with prompt-lookup drafts), as `kvlab serve
/// --dtype D --layout L --kv K [--window W --sinks S]` would: 8 streamed completions at once, each
/// equal to the same request sent alone afterwards, and (the first two prompts) to
/// `kvlab generate --dtype D --layout L --cache paged --kv K`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_streams_on_any_weights_and_pool_equal_each_alone_and_generate() {
    if !real_model_present() {
        return;
    }
    let ngram = Some(Speculation::new(3, 4).unwrap());
    let combinations = [
        (
            WeightDtype::Bf16,
            WeightLayout::Panels,
            KvPolicy::Int8,
            None,
        ),
        (
            WeightDtype::Int8,
            WeightLayout::Panels,
            KvPolicy::Full,
            None,
        ),
        (
            WeightDtype::F32,
            WeightLayout::Panels,
            KvPolicy::Int4PerToken { group: 32 },
            None,
        ),
        // bf16 weights, an int8 pool and prompt-lookup speculation, all at once.
        (
            WeightDtype::Bf16,
            WeightLayout::Panels,
            KvPolicy::Int8,
            ngram,
        ),
        // int8 weights, int8 blocks under a window per query of 8 with 2 sinks (the
        // prompts are longer than the window, so it masks), and drafts.
        (
            WeightDtype::Int8,
            WeightLayout::Panels,
            KvPolicy::Sliding {
                window: 8,
                sinks: 2,
                codes: RowCodes::Int8,
            },
            ngram,
        ),
    ];
    // Prompts that invite copying, so that the drafts are often right.
    let prompts: Vec<String> = (0..8)
        .map(|i| format!("Fact {i}: the largest animal on land is the elephant. Fact {i}: the largest animal on land is"))
        .collect();
    for (dtype, layout, kv, speculation) in combinations {
        let weights = batch_model(model(), dtype, layout).unwrap();
        let engine = EngineConfig {
            kv,
            speculation,
            ..EngineConfig::default()
        };
        let server = Arc::new(Server::start_on(weights, engine).await);
        // /health says what it serves with (the load test records it).
        let health: Value = (server
            .client
            .get(server.url("/health"))
            .send()
            .await
            .unwrap())
        .json()
        .await
        .unwrap();
        let expected_weights = match dtype {
            WeightDtype::Int8 => "int8 blocks".to_string(),
            _ => format!("{} in {}", dtype.name(), layout.name()),
        };
        assert_eq!(health["weights"], expected_weights.as_str(), "{health}");
        assert_eq!(health["kv"], kv.name(), "{health}");
        let element = kvlab::cache::KvElement::for_pool(&model().config, kv, "paged").unwrap();
        let per_token = element.bytes_per_token(&model().config);
        assert_eq!(health["kv_bytes_per_token"], per_token, "{health}");
        let positions = health["pool_positions"].as_u64().unwrap() as usize;
        let budget = EngineConfig::default().kv_budget_bytes;
        // Whole blocks of 16 in the budget: about budget / per_token positions, a little
        // less for the scales' share of a block.
        assert!(
            positions.is_multiple_of(16)
                && positions <= budget / per_token
                && positions * 10 >= budget / per_token * 9,
            "{health}"
        );
        let body = |p: &str| json!({"model": NAME, "prompt": p, "temperature": 0, "max_tokens": 10, "stream": true});
        let streams: Vec<_> = (prompts.iter())
            .map(|p| {
                let (server, body) = (server.clone(), body(p));
                tokio::spawn(async move { server.stream("/v1/completions", body).await.0 })
            })
            .collect();
        let mut together = Vec::new();
        for s in streams {
            together.push(s.await.unwrap());
        }
        let combination = format!(
            "--dtype {} --layout {} --kv {} --speculative {speculation:?}",
            dtype.name(),
            layout.name(),
            kv.name()
        );
        if speculation.is_some() {
            // The drafts ran, and some were right: /metrics counts them.
            let metrics = (server
                .client
                .get(server.url("/metrics"))
                .send()
                .await
                .unwrap())
            .text()
            .await
            .unwrap();
            let count = |name: &str| -> f64 {
                let line = metrics.lines().find(|l| l.starts_with(name)).unwrap();
                line.split(' ').nth(1).unwrap().parse().unwrap()
            };
            let accepted = count("kvlab_spec_accepted_tokens_total");
            assert!(accepted >= 8.0, "{combination}: {accepted} drafts accepted");
        }
        for (p, text) in prompts.iter().zip(&together) {
            let (alone, _, _) = server.stream("/v1/completions", body(p)).await;
            assert_eq!(text, &alone, "{combination}: {p:?} among 8 vs alone");
        }
        let kv_name = kv.name();
        let window = kv
            .window()
            .map(|w| (w.size.to_string(), w.sinks.to_string()));
        for (p, text) in prompts.iter().zip(&together).take(2) {
            let mut args = vec!["generate", "--prompt", p.as_str(), "--max-new-tokens", "10"];
            args.extend(["--dtype", dtype.name(), "--cache", "paged", "--kv", kv_name]);
            if let Some((size, sinks)) = &window {
                args.extend(["--window", size.as_str(), "--sinks", sinks.as_str()]);
            }
            if dtype != WeightDtype::Int8 {
                args.extend(["--layout", layout.name()]);
            }
            assert_eq!(
                text,
                &kvlab_generate(&args),
                "{combination}: {p:?} vs generate"
            );
        }
    }
}

/// `kvlab loadtest --concurrency N` (the closed loop that compares servers): never more
/// than N requests in flight, every request done, and each request's greedy text the same
/// at N = 3 as at N = 1 (batch invariance, seen from the client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_loop_load_test_keeps_n_in_flight_and_the_same_texts() {
    use kvlab::server::loadtest::{self, LoadtestConfig};
    use kvlab::server::workload::PromptMix;
    if !real_model_present() {
        return;
    }
    let server = Server::start(EngineConfig::default()).await;
    let run = |concurrency| {
        let config = LoadtestConfig {
            url: server.url(""),
            model: Some(NAME.into()),
            requests: 7,
            rate: 1.0,
            seed: 5,
            mix: PromptMix::parse("short:1").unwrap(),
            timeout_s: 300,
            concurrency: Some(concurrency),
        };
        async move { loadtest::run(&config).await.expect("the load test runs") }
    };
    let (one, three) = (run(1).await, run(3).await);
    for r in [&one, &three] {
        assert_eq!((r.completed, r.failed, r.per_request.len()), (7, 0, 7));
        assert!(r.per_request.iter().all(|q| !q.text.is_empty()));
    }
    // In flight at each send: the requests sent before it and not yet finished.
    let in_flight = |r: &loadtest::LoadtestReport| {
        let spans: Vec<(f64, f64)> = (r.per_request.iter())
            .map(|q| (q.sent_ms, *q.token_ms.last().unwrap()))
            .collect();
        spans
            .iter()
            .map(|&(t, _)| spans.iter().filter(|&&(s, e)| s <= t && t < e).count())
            .max()
            .unwrap()
    };
    assert_eq!(in_flight(&one), 1);
    assert!(
        (2..=3).contains(&in_flight(&three)),
        "{}",
        in_flight(&three)
    );
    assert_eq!(three.concurrency, Some(3));
    for (a, b) in one.per_request.iter().zip(&three.per_request) {
        assert_eq!(a.text, b.text, "request {}", a.index);
    }
}

/// `kvlab loadtest --prompt-mix copy:1` against `kvlab serve --speculative ngram`: the
/// report names the drafts the server ran and kept (read off `/metrics`, which must agree),
/// sizes each request's KV in whole blocks from what `/health` says, and gives one TPOT per
/// request; against the same server without drafts it reports none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_test_reports_the_drafts_the_kv_per_request_and_tpot() {
    use kvlab::server::loadtest::{self, LoadtestConfig};
    use kvlab::server::workload::PromptMix;
    if !real_model_present() {
        return;
    }
    for speculation in [Some(Speculation::new(3, 4).unwrap()), None] {
        let engine = EngineConfig {
            policy: Policy::ContinuousChunked,
            speculation,
            ..EngineConfig::default()
        };
        let server = Server::start(engine).await;
        let config = LoadtestConfig {
            url: server.url(""),
            model: Some(NAME.into()),
            requests: 4,
            rate: 100.0,
            seed: 0,
            mix: PromptMix::parse("copy:1").unwrap(),
            timeout_s: 300,
            concurrency: None,
        };
        let r = loadtest::run(&config).await.expect("the load test runs");
        assert_eq!((r.completed, r.failed), (4, 0), "{speculation:?}");
        let expected: usize = r.per_request.iter().map(|q| q.max_tokens).sum();
        assert_eq!(
            r.output_tokens, expected,
            "ignore_eos: every request runs to max_tokens"
        );
        assert_eq!(r.tpot_ms.samples, 4);
        assert!(r.tpot_ms.p50 > 0.0 && r.tpot_ms.p50.is_finite());
        // KV of a request: prompt + output rounded up to blocks of 16, 46,080 bytes a
        // position (f32, 30 layers, 3 KV heads of 64).
        let positions: Vec<f64> = (r.per_request.iter())
            .map(|q| ((q.prompt_tokens + q.max_tokens).div_ceil(16) * 16) as f64)
            .collect();
        let mean = positions.iter().sum::<f64>() / 4.0;
        assert_eq!(r.kv_bytes_per_request, Some(mean * 46_080.0));
        let pool = r.pool_positions.expect("/health names the pool") as f64;
        assert_eq!(r.requests_in_pool, Some((pool / mean).floor() as u64));
        let drafted = server.metric("kvlab_spec_draft_tokens_total").await;
        let accepted = server.metric("kvlab_spec_accepted_tokens_total").await;
        assert_eq!(
            (r.drafted_tokens as f64, r.accepted_tokens as f64),
            (drafted, accepted)
        );
        match speculation {
            Some(_) => {
                assert_eq!(r.speculation.as_deref(), Some("ngram:3 k=4"));
                // A copy prompt: the model goes on with the passage, and lookup finds it.
                assert!(r.accepted_tokens > 0 && r.accepted_tokens <= r.drafted_tokens);
                assert!(r.accepted_tokens < r.output_tokens as u64);
            }
            None => {
                assert_eq!(r.speculation.as_deref(), Some("none"));
                assert_eq!((r.drafted_tokens, r.accepted_tokens), (0, 0));
            }
        }
    }
}

/// The second real model through the server: Gemma 3 270M (local layers, MQA, SentencePiece),
/// four greedy completions at once in the batching engine, each equal to transformers'
/// greedy tokens (tests/fixtures/gemma-3-270m.json), one of them past the 512-position window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemma3_completions_batched_are_transformers_greedy_tokens() {
    if !common::gemma_present() {
        return;
    }
    let dir = Path::new(common::GEMMA_DIR);
    let model: Arc<Model> = Arc::new(loader::load_model(dir).expect("Gemma 3 loads"));
    let tokenizer = Tokenizer::from_dir(dir).unwrap();
    let server =
        Arc::new(Server::start_model(model, dir, "gemma-3-270m", EngineConfig::default()).await);
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/gemma-3-270m.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let cases = fixture["cases"].as_array().unwrap().clone();
    let requests: Vec<_> = cases
        .iter()
        .map(|case| {
            let body = json!({
                "model": "gemma-3-270m",
                "prompt": case["prompt_text"],
                "max_tokens": 8,
                "temperature": 0,
            });
            let server = server.clone();
            tokio::spawn(async move { server.post("/v1/completions", body).await })
        })
        .collect();
    let mut answers = Vec::new();
    for r in requests {
        answers.push(r.await.unwrap());
    }
    for (case, (status, answer)) in cases.iter().zip(answers) {
        assert_eq!(status, 200, "{answer}");
        let greedy = common::ids(&case["greedy_ids"]);
        let want = tokenizer.decode(&greedy[..8]).unwrap();
        assert_eq!(
            answer["choices"][0]["text"],
            want.as_str(),
            "case {}",
            case["name"]
        );
    }
}
