//! `kvlab bench-batch`'s and `kvlab bench-disagg`'s tables.

use kvlab::lab::batching::BatchingReport;
use kvlab::lab::disagg::DisaggReport;

pub fn batching(r: &BatchingReport) {
    let o = &r.options;
    outln!(
        "kvlab bench-batch — {} ({}) on {}: {} greedy requests of {} prompt + {} new tokens, one at a time (sequential) vs all at once (continuous batching); KV pool --kv {} in blocks of {}",
        r.model,
        r.weights,
        r.machine,
        o.concurrency.iter().map(|c| c.to_string()).collect::<Vec<_>>().join("/"),
        o.prompt_len,
        o.max_tokens,
        o.kv.name(),
        o.block_size
    );
    outln!(
        "roof: {:.0} MB of weights per pass / {:.1} GB/s measured = {:.1} ms per decode step, however many rows",
        r.weight_bytes / 1e6,
        r.bandwidth_bytes_s / 1e9,
        r.roof_step_ms
    );
    let against = r.against_weights.as_deref();
    let mut header = format!(
        "{:>8} {:>15} {:>15} {:>8} {:>16} {:>10}",
        "requests", "sequential t/s", "continuous t/s", "speedup", "decode iter ms", "same tokens"
    );
    if let Some(w) = against {
        header += &format!("  | {w}: {:>8} {:>9} {:>6}", "cont t/s", "iter ms", "gain");
    }
    outln!("{header}");
    for p in &r.points {
        let mut line = format!(
            "{:>8} {:>15.1} {:>15.1} {:>7.2}x {:>16.1} {:>10}",
            p.concurrency,
            p.sequential_tok_s,
            p.continuous_tok_s,
            p.speedup,
            p.decode_iteration_ms,
            if p.tokens_identical { "yes" } else { "NO" }
        );
        if let (Some(w), Some(a)) = (against, &p.against) {
            line += &format!(
                "  | {w}: {:>8.1} {:>9.1} {:>5.2}x",
                a.continuous_tok_s, a.decode_iteration_ms, a.gain
            );
        }
        outln!("{line}");
    }
    outln!(
        "decode stall: {} requests decoding when a {}-token prompt arrives, token budget {}",
        o.running,
        o.long_prompt,
        o.stall_budget
    );
    outln!(
        "{:>20} {:>10} {:>12} {:>12} {:>12} {:>16}",
        "policy",
        "iterations",
        "p50 ITL ms",
        "p99 ITL ms",
        "max ITL ms",
        "long TTFT ms"
    );
    for s in &r.stall {
        outln!(
            "{:>20} {:>10} {:>12.1} {:>12.1} {:>12.1} {:>16.1}",
            s.policy.name(),
            s.iterations.len(),
            s.p50_itl_ms,
            s.p99_itl_ms,
            s.max_itl_ms,
            s.long_ttft_ms
        );
    }
    outln!("(ITL: gaps between the running requests' tokens; --json has every iteration's time and rows)");
    if let Some(sp) = &r.speculation {
        outln!(
            "speculation in the engine: {} greedy requests copying a passage their prompt gives twice, prompt lookup ngram:{} --draft-len {}",
            sp.concurrency,
            sp.ngram,
            sp.draft_len
        );
        outln!(
            "{:>12} {:>10} {:>11} {:>9} {:>10} {:>11}",
            "engine",
            "tok/s",
            "iterations",
            "drafted",
            "accepted",
            "same tokens"
        );
        outln!(
            "{:>12} {:>10.1} {:>11} {:>9} {:>10} {:>11}",
            "plain",
            sp.plain_tok_s,
            sp.plain_iterations,
            "-",
            "-",
            ""
        );
        outln!(
            "{:>12} {:>10.1} {:>11} {:>9} {:>10} {:>11}",
            "speculative",
            sp.speculative_tok_s,
            sp.speculative_iterations,
            sp.drafted_tokens,
            format!("{} ({:.0}%)", sp.accepted_tokens, 100.0 * sp.acceptance),
            if sp.tokens_identical { "yes" } else { "NO" }
        );
        outln!(
            "speed-up {:.2}x (median of 3 alternating runs each)",
            sp.speedup
        );
    }
}

/// `kvlab bench-disagg`'s table.
pub fn disagg(r: &DisaggReport) {
    let o = &r.options;
    outln!(
        "kvlab bench-disagg — {} ({}, --kv {}) on {}: {} requests ({}, {} prompt + {} output tokens), Poisson {}/s, seed {}, token budget {}, blocks of {}",
        r.model,
        r.weights,
        r.kv,
        r.machine,
        o.requests,
        o.mix.kinds.iter().map(|(k, w)| format!("{}:{w}", k.name)).collect::<Vec<_>>().join(","),
        r.prompt_tokens,
        r.output_tokens,
        o.rate,
        o.seed,
        o.max_batch_tokens,
        o.block_size
    );
    outln!(
        "{:<14} {:<34} {:>9} {:>9} {:>8} {:>8} {:>7} {:>11} {:>10}",
        "mode",
        "threads",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "ITL p99",
        "tok/s",
        "bytes/req",
        "handoff p50"
    );
    for m in [&r.colocated, &r.disaggregated] {
        outln!(
            "{:<14} {:<34} {:>7.0}ms {:>7.0}ms {:>6.1}ms {:>6.1}ms {:>7.1} {:>11.0} {:>9.1}ms",
            m.mode,
            m.threads,
            m.ttft_ms.p50,
            m.ttft_ms.p99,
            m.itl_ms.p50,
            m.itl_ms.p99,
            m.output_tokens_per_s,
            m.bytes_per_request,
            m.handoff_ms.p50
        );
    }
    outln!(
        "KV moved per prompt token, as the pools store it (--kv {}): {} bytes; {} bytes over loopback in all ({:.1} MB); same tokens in both modes: {}",
        r.kv,
        r.kv_bytes_per_prompt_token,
        r.disaggregated.bytes_moved,
        r.disaggregated.bytes_moved as f64 / 1e6,
        if r.tokens_identical { "yes" } else { "NO" }
    );
}
