//! `GET /metrics`: the engine's counters in Prometheus' text format (book: serving.md).
//!
//! The format is lines of `name{labels} value`, each metric preceded by `# HELP` and
//! `# TYPE`; a histogram is cumulative `_bucket{le="..."}` lines, then `_sum` and
//! `_count` (prometheus.io/docs/instrumenting/exposition_formats). The engine keeps its
//! histograms in exactly that shape ([`Histogram`]), so rendering is printing.

use crate::engine::{EngineMetrics, Histogram};
use std::fmt::Write;

/// What the server counts itself (the engine never sees a refused request).
#[derive(Debug, Default, Clone, Copy)]
pub struct ServerCounters {
    /// 429s: the waiting queue was full.
    pub rejected_queue_full: u64,
    /// Other 4xx answers to generation requests.
    pub rejected_invalid: u64,
    /// 401s: no API key, or another one.
    pub rejected_unauthorized: u64,
    /// Streamed answers cancelled because their client read nothing for `stream_stall`.
    pub streams_stalled: u64,
    /// 408s: a body that did not arrive within `body_timeout`.
    pub bodies_timed_out: u64,
    pub connections_open: u64,
    pub connections_peak: u64,
    pub connections_accepted: u64,
    /// Times the engine failed in an iteration and started again on a fresh pool.
    pub engine_restarts: u64,
}

// ANCHOR: render
/// The metrics page.
pub fn render(m: &EngineMetrics, server: ServerCounters) -> String {
    let mut out = String::new();
    let gauges: [(&str, &str, f64); 7] = [
        (
            "kvlab_connections_open",
            "HTTP connections open now.",
            server.connections_open as f64,
        ),
        (
            "kvlab_connections_peak",
            "The most HTTP connections open at once since the start.",
            server.connections_peak as f64,
        ),
        (
            "kvlab_requests_running",
            "Requests in the running batch.",
            m.requests_running as f64,
        ),
        (
            "kvlab_requests_waiting",
            "Requests queued, not yet admitted.",
            m.requests_waiting as f64,
        ),
        (
            "kvlab_kv_blocks_used",
            "KV cache blocks held by at least one sequence.",
            m.kv_blocks_used as f64,
        ),
        (
            "kvlab_kv_blocks_free",
            "KV cache blocks a sequence can get: free, or parked in the prefix cache.",
            m.kv_blocks_free as f64,
        ),
        (
            "kvlab_kv_blocks",
            "KV cache blocks in the pool.",
            (m.kv_blocks_used + m.kv_blocks_free) as f64,
        ),
    ];
    for (name, help, value) in gauges {
        metric(&mut out, name, help, "gauge", value);
    }
    let counters: [(&str, &str, u64); 16] = [
        (
            "kvlab_request_bodies_timed_out_total",
            "Requests refused with 408: the body did not arrive within --body-timeout-s.",
            server.bodies_timed_out,
        ),
        (
            "kvlab_connections_accepted_total",
            "HTTP connections accepted.",
            server.connections_accepted,
        ),
        (
            "kvlab_requests_rejected_unauthorized_total",
            "Requests refused with 401 (no API key, or another).",
            server.rejected_unauthorized,
        ),
        (
            "kvlab_streams_stalled_total",
            "Streamed answers cancelled: the client read nothing for --stream-stall-s.",
            server.streams_stalled,
        ),
        (
            "kvlab_engine_restarts_total",
            "Times the engine failed in an iteration and started again on a fresh KV pool.",
            server.engine_restarts,
        ),
        (
            "kvlab_requests_finished_total",
            "Requests that ran to the end.",
            m.requests_finished,
        ),
        (
            "kvlab_requests_cancelled_total",
            "Requests cancelled (client gone, stop string).",
            m.requests_cancelled,
        ),
        (
            "kvlab_requests_rejected_queue_full_total",
            "Requests refused with 429.",
            server.rejected_queue_full,
        ),
        (
            "kvlab_requests_rejected_invalid_total",
            "Generation requests refused with another 4xx.",
            server.rejected_invalid,
        ),
        (
            "kvlab_preemptions_total",
            "Sequences preempted to free KV blocks.",
            m.preemptions,
        ),
        (
            "kvlab_prefix_cache_hit_tokens_total",
            "Prompt tokens whose K and V came from the prefix cache.",
            m.prefix_hit_tokens,
        ),
        (
            "kvlab_prompt_tokens_total",
            "Prompt tokens received.",
            m.prompt_tokens,
        ),
        (
            "kvlab_generation_tokens_total",
            "Tokens generated.",
            m.generated_tokens,
        ),
        (
            "kvlab_spec_draft_tokens_total",
            "Tokens drafted by prompt lookup (--speculative).",
            m.drafted_tokens,
        ),
        (
            "kvlab_spec_accepted_tokens_total",
            "Drafted tokens the model agreed with.",
            m.accepted_tokens,
        ),
        (
            "kvlab_iterations_total",
            "Engine iterations (batched forward passes).",
            m.iterations,
        ),
    ];
    for (name, help, value) in counters {
        metric(&mut out, name, help, "counter", value as f64);
    }
    histogram(
        &mut out,
        "kvlab_time_to_first_token_seconds",
        "Seconds from arrival to the first token.",
        &m.ttft_seconds,
    );
    histogram(
        &mut out,
        "kvlab_inter_token_latency_seconds",
        "Seconds between two tokens of one request.",
        &m.inter_token_seconds,
    );
    out
}
// ANCHOR_END: render

fn metric(out: &mut String, name: &str, help: &str, kind: &str, value: f64) {
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
    );
}

fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (bound, count) in h.bounds.iter().zip(&h.counts) {
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {count}");
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", h.sum, h.count);
}

/// The value of an unlabelled metric in a page `render` wrote (tests and the load
/// generator read the page back with this).
pub fn read_value(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_reads_back_and_histograms_are_cumulative_with_inf() {
        let mut m = EngineMetrics {
            kv_blocks_used: 3,
            kv_blocks_free: 61,
            ..Default::default()
        };
        m.ttft_seconds.observe(0.02);
        m.ttft_seconds.observe(0.3);
        let page = render(
            &m,
            ServerCounters {
                rejected_queue_full: 2,
                ..Default::default()
            },
        );
        assert_eq!(read_value(&page, "kvlab_kv_blocks_used"), Some(3.0));
        assert_eq!(read_value(&page, "kvlab_kv_blocks_free"), Some(61.0));
        assert_eq!(read_value(&page, "kvlab_kv_blocks"), Some(64.0));
        assert_eq!(
            read_value(&page, "kvlab_requests_rejected_queue_full_total"),
            Some(2.0)
        );
        assert!(page.contains("kvlab_time_to_first_token_seconds_bucket{le=\"0.025\"} 1\n"));
        assert!(page.contains("kvlab_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert_eq!(
            read_value(&page, "kvlab_time_to_first_token_seconds_count"),
            Some(2.0)
        );
    }
}
