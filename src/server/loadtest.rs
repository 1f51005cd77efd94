//! `kvlab loadtest`: replays a seeded workload against a running server and times every
//! token as it arrives (book: serving.md).
//!
//! Each request is sent at its planned arrival time whether or not the earlier ones are
//! done (an open loop, as real users behave: a closed loop that waits would hide the
//! queueing a slow policy causes). `--concurrency N` runs the closed loop instead: N
//! clients, each sending its next request when its last one is done, the load
//! `vllm bench serve --max-concurrency` and llama.cpp's side-by-side use to compare servers
//! at a fixed number of requests in flight. It streams `/v1/completions` and records the arrival
//! time of every chunk. From those: TTFT (arrival → first text), inter-token latency (the
//! gaps between chunks of one request: a stall shows up as one long gap), throughput,
//! and the per-token timeline behind the book's stall figure.

use super::workload::{plan, Planned, PromptMix};
use crate::error::{Error, Result};
use serde::Serialize;
use std::time::{Duration, Instant};
use tokio_stream::StreamExt;

#[derive(Debug, Clone)]
pub struct LoadtestConfig {
    /// Base URL, e.g. `http://127.0.0.1:8000`.
    pub url: String,
    /// The model to ask for; `None`: the first that `GET /v1/models` lists.
    pub model: Option<String>,
    pub requests: usize,
    /// Mean arrivals per second.
    pub rate: f64,
    pub seed: u64,
    pub mix: PromptMix,
    pub timeout_s: u64,
    /// `Some(n)`: a closed loop of `n` clients (arrival times ignored); `None`: the open
    /// loop, each request at its planned arrival.
    pub concurrency: Option<usize>,
}

/// Median, 99th percentile and mean of a set of samples (milliseconds).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub mean: f64,
    pub max: f64,
    pub samples: usize,
}

impl Percentiles {
    /// Nearest-rank percentiles (p99 of 30 samples is the largest).
    pub fn of(samples: &[f64]) -> Percentiles {
        if samples.is_empty() {
            return Percentiles::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank =
            |p: f64| sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
        Percentiles {
            p50: rank(0.50),
            p99: rank(0.99),
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            max: sorted[sorted.len() - 1],
            samples: sorted.len(),
        }
    }
}

/// One request as the client saw it. Times are milliseconds since the test started.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRecord {
    pub index: usize,
    pub kind: &'static str,
    pub prompt_tokens: usize,
    pub max_tokens: usize,
    /// When it was sent: its planned arrival (open loop), or when its client was free
    /// (closed loop).
    pub sent_ms: f64,
    /// HTTP status (0: no answer).
    pub status: u16,
    /// Arrival time of each chunk of text.
    pub token_ms: Vec<f64>,
    /// Tokens the server says it generated (`usage.completion_tokens`).
    pub completion_tokens: usize,
    pub finish_reason: Option<String>,
    pub error: Option<String>,
    /// The text generated (greedy: two servers on the same weights can be compared).
    pub text: String,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct LoadtestReport {
    pub url: String,
    pub model: String,
    /// The server's scheduling policy, as its `/health` reports it.
    pub policy: Option<String>,
    /// Its weights' format, pool element and pool size (`/health`; `None` from a server
    /// that does not say).
    pub weights: Option<String>,
    pub kv: Option<String>,
    pub kv_bytes_per_token: Option<u64>,
    pub pool_positions: Option<u64>,
    /// The engine's drafts (`--speculative`): "none", "ngram:3 k=4".
    pub speculation: Option<String>,
    /// KV bytes one request of this workload holds at its end (prompt + output, rounded
    /// up to whole blocks), averaged over the requests.
    pub kv_bytes_per_request: Option<f64>,
    /// Requests of that mean size the whole pool holds at once.
    pub requests_in_pool: Option<u64>,
    /// Drafts the engine ran and kept during the test (`/metrics`' counters; 0 without
    /// speculation).
    pub drafted_tokens: u64,
    pub accepted_tokens: u64,
    pub requests: usize,
    pub rate: f64,
    /// Clients of the closed loop (`--concurrency`); `None` for the open loop at `rate`.
    pub concurrency: Option<usize>,
    pub seed: u64,
    pub completed: usize,
    pub rejected_429: usize,
    pub failed: usize,
    /// First send to last token, seconds.
    pub duration_s: f64,
    pub requests_per_s: f64,
    pub output_tokens: usize,
    pub output_tokens_per_s: f64,
    pub ttft_ms: Percentiles,
    pub inter_token_ms: Percentiles,
    /// Time per output token after the first, one sample per request: (last token -
    /// first token) / (tokens - 1), vLLM's TPOT. With speculation several tokens arrive
    /// in one step, so the gaps (ITL) are bursty; a request's TPOT is still its speed.
    pub tpot_ms: Percentiles,
    /// Send to last token.
    pub e2e_ms: Percentiles,
    /// TTFT of the short requests alone: what a chat user waits when long prompts share
    /// the server.
    pub short_ttft_ms: Percentiles,
    pub per_request: Vec<RequestRecord>,
}

// ANCHOR: run
/// Runs the workload against `config.url` and measures it.
pub async fn run(config: &LoadtestConfig) -> Result<LoadtestReport> {
    // Arrivals are timers: a rate near 0 would set them centuries ahead (and overflow).
    if !(config.rate.is_finite() && (0.001..=10_000.0).contains(&config.rate))
        || config.requests == 0
    {
        return Err(Error::InvalidArgument(format!(
            "a load test needs at least one request and a rate between 0.001 and 10000 per second, not {} at {}",
            config.requests, config.rate
        )));
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(config.timeout_s))
        .build()
        .map_err(|e| Error::Internal(format!("cannot build the HTTP client: {e}")))?;
    let unreachable = |e: reqwest::Error| {
        Error::InvalidArgument(format!(
            "{}: {e}: is `kvlab serve` running there? (--url)",
            config.url
        ))
    };
    let health: serde_json::Value = client
        .get(format!("{}/health", config.url))
        .send()
        .await
        .map_err(unreachable)?
        .json()
        .await
        .map_err(unreachable)?;
    let model = match &config.model {
        Some(m) => m.clone(),
        None => {
            let models: serde_json::Value = client
                .get(format!("{}/v1/models", config.url))
                .send()
                .await
                .map_err(unreachable)?
                .json()
                .await
                .map_err(unreachable)?;
            models["data"][0]["id"]
                .as_str()
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "{}/v1/models lists no model: give --model",
                        config.url
                    ))
                })?
                .to_string()
        }
    };
    let workload = plan(config.requests, config.rate, config.seed, &config.mix);
    let drafts_before = spec_counters(&client, &config.url).await;
    let start = Instant::now();
    let tasks: Vec<_> = match config.concurrency {
        // Open loop: one task per request, each waiting for its arrival time.
        None => workload
            .into_iter()
            .map(|planned| {
                let (client, url, model) = (client.clone(), config.url.clone(), model.clone());
                tokio::spawn(async move {
                    tokio::time::sleep_until(
                        (start + Duration::from_secs_f64(planned.arrival_s)).into(),
                    )
                    .await;
                    vec![one_request(&client, &url, &model, planned, start).await]
                })
            })
            .collect(),
        // Closed loop: `n` clients share the requests in order, each sending its next
        // as soon as its last is done.
        Some(n) => {
            let queue = std::sync::Arc::new(std::sync::Mutex::new(workload.into_iter()));
            (0..n)
                .map(|_| {
                    let (client, url, model) = (client.clone(), config.url.clone(), model.clone());
                    let queue = queue.clone();
                    tokio::spawn(async move {
                        let mut done = Vec::new();
                        loop {
                            let next = queue.lock().map(|mut q| q.next()).ok().flatten();
                            let Some(planned) = next else { break };
                            done.push(one_request(&client, &url, &model, planned, start).await);
                        }
                        done
                    })
                })
                .collect()
        }
    };
    let mut records = Vec::with_capacity(config.requests);
    for task in tasks {
        records.extend(
            task.await
                .map_err(|e| Error::Internal(format!("a load-test task failed: {e}")))?,
        );
    }
    records.sort_by_key(|r| r.index);
    let drafts = spec_counters(&client, &config.url).await - drafts_before;
    Ok(summarise(config, model, &health, drafts, records))
}
// ANCHOR_END: run

/// The server's speculation counters (drafted, accepted) from `GET /metrics`; zeros from
/// a server that has none.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct SpecCounters {
    drafted: u64,
    accepted: u64,
}

impl std::ops::Sub for SpecCounters {
    type Output = SpecCounters;
    fn sub(self, before: SpecCounters) -> SpecCounters {
        SpecCounters {
            drafted: self.drafted.saturating_sub(before.drafted),
            accepted: self.accepted.saturating_sub(before.accepted),
        }
    }
}

async fn spec_counters(client: &reqwest::Client, url: &str) -> SpecCounters {
    let text = match client.get(format!("{url}/metrics")).send().await {
        Ok(response) => response.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    parse_spec_counters(&text)
}

/// Reads `kvlab_spec_draft_tokens_total N` and `kvlab_spec_accepted_tokens_total N` out
/// of a Prometheus text page.
fn parse_spec_counters(text: &str) -> SpecCounters {
    let value = |name: &str| {
        text.lines()
            .filter_map(|line| line.strip_prefix(name)?.trim().parse::<f64>().ok())
            .next()
            .map_or(0, |v| v as u64)
    };
    SpecCounters {
        drafted: value("kvlab_spec_draft_tokens_total "),
        accepted: value("kvlab_spec_accepted_tokens_total "),
    }
}

/// A request's time per output token after its first; `None` for one of fewer than two
/// tokens.
fn tpot_ms(r: &RequestRecord) -> Option<f64> {
    let (first, last) = (r.token_ms.first()?, r.token_ms.last()?);
    let gaps = r.completion_tokens.checked_sub(1).filter(|&n| n > 0)?;
    Some((last - first) / gaps as f64)
}

/// The mean KV bytes of the workload's requests at their end, in whole blocks, and how
/// many requests of that size `pool_positions` holds.
fn kv_per_request(
    records: &[RequestRecord],
    health: &serde_json::Value,
) -> (Option<f64>, Option<u64>) {
    let (Some(token_bytes), Some(block), Some(pool)) = (
        health["kv_bytes_per_token"].as_u64(),
        health["block_size"].as_u64().filter(|&b| b > 0),
        health["pool_positions"].as_u64(),
    ) else {
        return (None, None);
    };
    if records.is_empty() {
        return (None, None);
    }
    let positions: Vec<u64> = records
        .iter()
        .map(|r| ((r.prompt_tokens + r.max_tokens) as u64).div_ceil(block) * block)
        .collect();
    let mean = positions.iter().sum::<u64>() as f64 / positions.len() as f64;
    (
        Some(mean * token_bytes as f64),
        Some((pool as f64 / mean).floor() as u64),
    )
}

/// Sends one streamed completion and times its chunks.
async fn one_request(
    client: &reqwest::Client,
    url: &str,
    model: &str,
    planned: Planned,
    start: Instant,
) -> RequestRecord {
    let ms = |t: Instant| t.duration_since(start).as_secs_f64() * 1e3;
    let mut record = RequestRecord {
        index: planned.index,
        kind: planned.kind,
        prompt_tokens: planned.prompt.len(),
        max_tokens: planned.max_tokens,
        sent_ms: ms(Instant::now()),
        status: 0,
        token_ms: Vec::new(),
        completion_tokens: 0,
        finish_reason: None,
        error: None,
        text: String::new(),
    };
    let body = serde_json::json!({
        "model": model,
        "prompt": planned.prompt,
        "max_tokens": planned.max_tokens,
        "temperature": 0,
        "ignore_eos": true,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let response = match client
        .post(format!("{url}/v1/completions"))
        .json(&body)
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => {
            record.error = Some(e.to_string());
            return record;
        }
    };
    record.status = response.status().as_u16();
    if !response.status().is_success() {
        record.error = response.text().await.ok();
        return record;
    }
    let mut bytes = response.bytes_stream();
    let mut events = SseReader::default();
    while let Some(chunk) = bytes.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                record.error = Some(e.to_string());
                return record;
            }
        };
        let now = ms(Instant::now());
        for data in events.push(&chunk) {
            if data == "[DONE]" {
                // A server that reports no usage (not every one does): count the chunks.
                if record.completion_tokens == 0 {
                    record.completion_tokens = record.token_ms.len();
                }
                return record;
            }
            let Ok(value) = serde_json::from_str::<serde_json::Value>(&data) else {
                continue;
            };
            if let Some(error) = value.get("error") {
                record.error = Some(error.to_string());
            }
            if let Some(n) = value["usage"]["completion_tokens"].as_u64() {
                record.completion_tokens = n as usize;
            }
            let choice = &value["choices"][0];
            if let Some(text) = choice["text"].as_str().filter(|t| !t.is_empty()) {
                record.token_ms.push(now);
                record.text.push_str(text);
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                record.finish_reason = Some(reason.to_string());
            }
        }
    }
    record
        .error
        .get_or_insert_with(|| "the stream ended without [DONE]".into());
    record
}

/// Splits a response body into the payloads of its SSE `data:` lines. Events end with a
/// blank line; one read from the socket may hold several events, or half of one.
#[derive(Debug, Default)]
pub struct SseReader {
    buffer: Vec<u8>,
}

impl SseReader {
    /// Adds bytes; returns the `data:` payloads of the events they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buffer.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = self.buffer.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&event);
            out.extend(
                text.lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d).to_string()),
            );
        }
        out
    }
}

fn summarise(
    config: &LoadtestConfig,
    model: String,
    health: &serde_json::Value,
    drafts: SpecCounters,
    records: Vec<RequestRecord>,
) -> LoadtestReport {
    let text = |key: &str| health[key].as_str().map(str::to_string);
    let done: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| r.error.is_none() && r.status == 200 && !r.token_ms.is_empty())
        .collect();
    let ttft: Vec<f64> = done.iter().map(|r| r.token_ms[0] - r.sent_ms).collect();
    let short_ttft: Vec<f64> = done
        .iter()
        .filter(|r| r.kind == "short")
        .map(|r| r.token_ms[0] - r.sent_ms)
        .collect();
    let itl: Vec<f64> = done
        .iter()
        .flat_map(|r| r.token_ms.windows(2).map(|w| w[1] - w[0]))
        .collect();
    let e2e: Vec<f64> = done
        .iter()
        .map(|r| r.token_ms[r.token_ms.len() - 1] - r.sent_ms)
        .collect();
    let tpot: Vec<f64> = done.iter().filter_map(|r| tpot_ms(r)).collect();
    let first_sent = records
        .iter()
        .map(|r| r.sent_ms)
        .fold(f64::INFINITY, f64::min);
    let last_token = done
        .iter()
        .map(|r| r.token_ms[r.token_ms.len() - 1])
        .fold(0.0, f64::max);
    let duration_s = ((last_token - first_sent) / 1e3).max(1e-9);
    let output_tokens: usize = done.iter().map(|r| r.completion_tokens).sum();
    let (kv_bytes_per_request, requests_in_pool) = kv_per_request(&records, health);
    LoadtestReport {
        url: config.url.clone(),
        model,
        policy: text("policy"),
        weights: text("weights"),
        kv: text("kv"),
        kv_bytes_per_token: health["kv_bytes_per_token"].as_u64(),
        pool_positions: health["pool_positions"].as_u64(),
        speculation: text("speculation"),
        kv_bytes_per_request,
        requests_in_pool,
        drafted_tokens: drafts.drafted,
        accepted_tokens: drafts.accepted,
        requests: config.requests,
        rate: config.rate,
        concurrency: config.concurrency,
        seed: config.seed,
        completed: done.len(),
        rejected_429: records.iter().filter(|r| r.status == 429).count(),
        failed: records.len() - done.len(),
        duration_s,
        requests_per_s: done.len() as f64 / duration_s,
        output_tokens,
        output_tokens_per_s: output_tokens as f64 / duration_s,
        ttft_ms: Percentiles::of(&ttft),
        inter_token_ms: Percentiles::of(&itl),
        tpot_ms: Percentiles::of(&tpot),
        e2e_ms: Percentiles::of(&e2e),
        short_ttft_ms: Percentiles::of(&short_ttft),
        per_request: records,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_speculation_counters_are_read_off_the_metrics_page() {
        let page = "# HELP kvlab_spec_draft_tokens_total Drafts run.\n\
                    # TYPE kvlab_spec_draft_tokens_total counter\n\
                    kvlab_spec_draft_tokens_total 173\n\
                    kvlab_spec_accepted_tokens_total 152\n";
        let c = parse_spec_counters(page);
        assert_eq!((c.drafted, c.accepted), (173, 152));
        assert_eq!(
            parse_spec_counters("kvlab_requests_total 4\n"),
            SpecCounters::default()
        );
    }

    #[test]
    fn tpot_spreads_the_decode_time_over_the_tokens_after_the_first() {
        let mut r = RequestRecord {
            index: 0,
            kind: "copy",
            prompt_tokens: 10,
            max_tokens: 5,
            sent_ms: 0.0,
            status: 200,
            // Five tokens in three chunks (a speculative step sent three at once).
            token_ms: vec![100.0, 140.0, 180.0],
            completion_tokens: 5,
            finish_reason: None,
            error: None,
            text: String::new(),
        };
        assert_eq!(tpot_ms(&r), Some(20.0));
        r.completion_tokens = 1;
        assert_eq!(tpot_ms(&r), None);
    }

    #[test]
    fn a_request_holds_whole_blocks_and_the_pool_holds_whole_requests() {
        let record = |prompt_tokens, max_tokens| RequestRecord {
            index: 0,
            kind: "short",
            prompt_tokens,
            max_tokens,
            sent_ms: 0.0,
            status: 200,
            token_ms: Vec::new(),
            completion_tokens: 0,
            finish_reason: None,
            error: None,
            text: String::new(),
        };
        let health = serde_json::json!({
            "kv_bytes_per_token": 100, "block_size": 16, "pool_positions": 160
        });
        // 17 positions take two blocks (32), 32 take two: a mean of 32 positions, 3200
        // bytes, and 160 / 32 = 5 requests in the pool.
        let (bytes, fit) = kv_per_request(&[record(10, 7), record(20, 12)], &health);
        assert_eq!((bytes, fit), (Some(3200.0), Some(5)));
        // A server that does not say its pool gives nothing rather than a guess.
        assert_eq!(
            kv_per_request(&[record(1, 1)], &serde_json::json!({})),
            (None, None)
        );
    }

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = Percentiles::of(&samples);
        assert_eq!((p.p50, p.p99, p.max, p.samples), (50.0, 99.0, 100.0, 100));
        assert_eq!(Percentiles::of(&[3.0]).p99, 3.0);
        assert_eq!(Percentiles::of(&[]).samples, 0);
    }
}
