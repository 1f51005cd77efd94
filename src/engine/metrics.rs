//! What the engine counts: requests, preemptions, KV blocks, tokens, and latency
//! histograms (TTFT, inter-token) that a server renders for Prometheus.

use serde::Serialize;

/// A snapshot of the engine's counters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EngineMetrics {
    pub requests_running: usize,
    pub requests_waiting: usize,
    pub requests_finished: u64,
    pub requests_cancelled: u64,
    pub preemptions: u64,
    pub kv_blocks_used: usize,
    pub kv_blocks_free: usize,
    pub prefix_hit_tokens: u64,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    /// Speculation: tokens drafted, and of those, accepted.
    pub drafted_tokens: u64,
    pub accepted_tokens: u64,
    /// Seconds from submission to the first token.
    pub ttft_seconds: Histogram,
    /// Seconds between two tokens of one request.
    pub inter_token_seconds: Histogram,
    pub iterations: u64,
}

/// A Prometheus-style histogram: `counts[i]` samples were `<= bounds[i]` (cumulative).
#[derive(Debug, Clone, Serialize)]
pub struct Histogram {
    pub bounds: Vec<f64>,
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

/// Seconds, from a millisecond (a decode step) to a minute (a long queue).
const LATENCY_BOUNDS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            bounds: LATENCY_BOUNDS.to_vec(),
            counts: vec![0; LATENCY_BOUNDS.len()],
            sum: 0.0,
            count: 0,
        }
    }
}

impl Histogram {
    pub fn observe(&mut self, value: f64) {
        for (bound, count) in self.bounds.iter().zip(&mut self.counts) {
            if value <= *bound {
                *count += 1;
            }
        }
        self.sum += value;
        self.count += 1;
    }
}
