//! `kvlab loadtest`'s table.

use kvlab::server::loadtest::LoadtestReport;

pub fn loadtest(r: &LoadtestReport) {
    outln!(
        "{} requests at {:.2}/s (seed {}) against {} ({}, policy {})",
        r.requests,
        r.rate,
        r.seed,
        r.url,
        r.model,
        r.policy.as_deref().unwrap_or("unknown")
    );
    outln!(
        "completed {} | rejected (429) {} | failed {}",
        r.completed,
        r.rejected_429,
        r.failed
    );
    outln!(
        "{:.2} requests/s, {:.1} output tok/s over {:.1} s",
        r.requests_per_s,
        r.output_tokens_per_s,
        r.duration_s
    );
    for (name, p) in [
        ("TTFT", &r.ttft_ms),
        ("TTFT (short)", &r.short_ttft_ms),
        ("inter-token", &r.inter_token_ms),
        ("end-to-end", &r.e2e_ms),
    ] {
        outln!(
            "{name:>13}: p50 {:>8.1} ms | p99 {:>8.1} ms | max {:>8.1} ms ({} samples)",
            p.p50,
            p.p99,
            p.max,
            p.samples
        );
    }
}
