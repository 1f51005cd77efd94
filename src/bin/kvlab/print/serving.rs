//! `kvlab loadtest`'s summary and `kvlab loadtest-table`'s comparison of policies.

use kvlab::error::{Error, Result};
use kvlab::server::loadtest::LoadtestReport;
use serde_json::Value;

pub fn loadtest(r: &LoadtestReport) {
    let load = match r.concurrency {
        Some(n) => format!("{n} at a time"),
        None => format!("at {:.2}/s", r.rate),
    };
    outln!(
        "{} requests {load} (seed {}) against {} ({}, policy {})",
        r.requests,
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
    if let Some(spec) = r.speculation.as_deref().filter(|s| *s != "none") {
        outln!(
            "drafts ({spec}): {} of {} kept",
            r.accepted_tokens,
            r.drafted_tokens
        );
    }
    for (name, p) in [
        ("TTFT", &r.ttft_ms),
        ("TTFT (short)", &r.short_ttft_ms),
        ("inter-token", &r.inter_token_ms),
        ("per token", &r.tpot_ms),
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

/// One markdown row per saved report (the book includes the output as it is).
pub fn loadtest_table(reports: &[Value]) -> Result<()> {
    let num = |r: &Value, path: &[&str]| -> Result<f64> {
        let mut v = r;
        for key in path {
            v = &v[*key];
        }
        v.as_f64().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "a report has no number at {}: regenerate it with kvlab loadtest --json",
                path.join(".")
            ))
        })
    };
    let first = reports
        .first()
        .ok_or_else(|| Error::InvalidArgument("no reports".into()))?;
    outln!(
        "{} requests, Poisson arrivals at {}/s, seed {}; milliseconds except where noted",
        num(first, &["requests"])?,
        num(first, &["rate"])?,
        num(first, &["seed"])?
    );
    outln!();
    outln!("| policy | weights | KV | drafts (kept/run) | KV KiB/request | requests in pool | done | req/s | out tok/s | TTFT p50 | TTFT p99 | short TTFT p99 | ITL p50 | ITL p99 | ITL max | TPOT p50 | TPOT p99 |");
    outln!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    // A report from a server that did not say what it ran shows "?"; a column with no
    // samples (no short requests in a copy workload) shows "-".
    let said = |r: &Value, key: &str| match &r[key] {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => "?".to_string(),
    };
    let ms = |r: &Value, key: &str, p: &str| -> Result<String> {
        Ok(match r[key]["samples"].as_u64() {
            Some(0) => "-".to_string(),
            _ => format!("{:.0}", num(r, &[key, p])?),
        })
    };
    for r in reports {
        let drafts = match (r["speculation"].as_str(), r["drafted_tokens"].as_u64()) {
            (Some("none"), _) => "none".to_string(),
            (Some(spec), Some(run)) => {
                format!(
                    "{spec}: {}/{run}",
                    r["accepted_tokens"].as_u64().unwrap_or(0)
                )
            }
            _ => "?".to_string(),
        };
        let kib = match r["kv_bytes_per_request"].as_f64() {
            Some(bytes) => format!("{:.0}", bytes / 1024.0),
            None => "?".to_string(),
        };
        outln!(
            "| {} | {} | {} | {drafts} | {kib} | {} | {}/{} | {:.2} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} |",
            said(r, "policy"),
            said(r, "weights"),
            said(r, "kv"),
            said(r, "requests_in_pool"),
            num(r, &["completed"])?,
            num(r, &["requests"])?,
            num(r, &["requests_per_s"])?,
            num(r, &["output_tokens_per_s"])?,
            ms(r, "ttft_ms", "p50")?,
            ms(r, "ttft_ms", "p99")?,
            ms(r, "short_ttft_ms", "p99")?,
            ms(r, "inter_token_ms", "p50")?,
            ms(r, "inter_token_ms", "p99")?,
            ms(r, "inter_token_ms", "max")?,
            ms(r, "tpot_ms", "p50")?,
            ms(r, "tpot_ms", "p99")?,
        );
    }
    Ok(())
}
