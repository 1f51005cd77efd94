//! Every text table `kvlab` prints, one function per report, and `--json`. The library
//! returns the reports (`Serialize`); only this file decides how they look on a terminal.

use kvlab::error::{Error, Result};
use kvlab::generate::Generation;
use kvlab::kv_size::KvSizeReport;
use kvlab::lab::bench::BenchReport;
use kvlab::lab::cache_bench::CacheBench;
use kvlab::lab::capacity::CapacityReport;
use kvlab::lab::compare::Comparison;
use kvlab::lab::shared_prompt::PrefixReport;
use kvlab::lab::trace::TraceRow;
use kvlab::learner::KernelCheck;

mod batching;
mod eval;
mod evict;
mod serving;
mod speculative;
pub use batching::{batching, disagg};
pub use eval::{eval, eval_weights, eval_window, kv_bench};
pub use evict::{eval_table, evict_speed};
pub use serving::{loadtest, loadtest_table};
pub use speculative::{spec_comparison, spec_summary, spec_sweep, verify_cost};

/// `--json`: the report as one pretty-printed JSON object.
pub fn json(value: &impl serde::Serialize) -> Result<()> {
    outln!("{}", to_json(value, true)?);
    Ok(())
}

/// The report as JSON text, pretty or on one line.
pub fn to_json(value: &impl serde::Serialize, pretty: bool) -> Result<String> {
    let text = if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    };
    text.map_err(|e| Error::Internal(format!("cannot serialise the report: {e}")))
}

pub fn human_bytes(bytes: usize) -> String {
    let b = bytes as f64;
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} GiB", b / (1024.0 * 1024.0 * 1024.0))
    } else if b >= 1024.0 * 1024.0 {
        format!("{:.2} MiB", b / (1024.0 * 1024.0))
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

/// One generation's figures on one line (`generate`, `compare`).
pub fn summary(g: &Generation) -> String {
    format!(
        "[{:?}] prompt {} tokens, generated {} ({:?}) | TTFT {:.1} ms ({:.0} prompt tok/s; {:.1} ms with reserving the KV cache) | TPOT {:.1} ms ({:.1} tok/s) | KV cache {} reserved, {} used",
        g.path,
        g.prompt_ids.len(),
        g.generated_ids.len(),
        g.stop_reason,
        g.ttft_ms,
        g.prefill_tok_s,
        g.ttft_with_alloc_ms,
        g.tpot_ms,
        g.decode_tok_s,
        human_bytes(g.kv_cache_bytes),
        human_bytes(g.kv_cache_bytes_used),
    )
}

/// `kvlab compare` / `kvlab demo`.
pub fn comparison(c: &Comparison) {
    if !c.cached.text.is_empty() {
        outln!("text: {:?}\n", c.cached.text);
    }
    outln!(
        "{:>6} {:>8} | {:>11} {:>11} | {:>11} {:>11} {:>6} | {:>12} {:>12}",
        "token",
        "context",
        "naive step",
        "cached step",
        "naive mean",
        "cached mean",
        "ratio",
        "naive total",
        "cached total"
    );
    for p in &c.checkpoints {
        outln!(
            "{:>6} {:>8} | {:>8.1} ms {:>8.1} ms | {:>8.1} ms {:>8.1} ms {:>5.1}x | {:>9.1} ms {:>9.1} ms",
            p.token,
            p.context,
            p.naive_step_ms,
            p.cached_step_ms,
            p.naive_mean_step_ms,
            p.cached_mean_step_ms,
            p.naive_mean_step_ms / p.cached_mean_step_ms,
            p.naive_cumulative_ms,
            p.cached_cumulative_ms
        );
    }
    outln!(
        "(token 1 is the prefill: its time is TTFT. mean: the mean step since the previous row; \
         ratio: naive mean / cached mean. context: tokens the step attends to.)"
    );
    let (t, naive, cached) = (&c.ttft, &c.ttft.naive, &c.ttft.cached);
    outln!(
        "TTFT, median of {} rounds after a warm-up, the paths alternating: naive {:.1} ms, cached {:.1} ms \
         | with building the decoder (reserving the KV cache): naive {:.1} ms, cached {:.1} ms",
        t.rounds,
        naive.median_ttft_ms,
        cached.median_ttft_ms,
        naive.median_ttft_with_alloc_ms,
        cached.median_ttft_with_alloc_ms,
    );
    outln!();
    outln!("{}", summary(&c.naive));
    outln!("{}", summary(&c.cached));
    outln!(
        "identical tokens: {} | speedup (naive total / cached total): {:.1}x",
        c.identical,
        c.speedup
    );
    if let Some(a) = &c.against_engine {
        let logits = match (a.first_logits_bitwise, a.first_logits_max_abs_diff) {
            (true, _) => "bitwise equal".to_string(),
            (false, Some(d)) => format!("max |engine - {}| = {d:.3e}", a.implementation),
            (false, None) => "not finite (NaN or inf)".to_string(),
        };
        let tokens = match a.first_difference {
            None => "identical".to_string(),
            Some(i) => format!("differ from token {}", i + 1),
        };
        outln!(
            "against the engine (cpu, f32 rows, cached): tokens {tokens} | first token's logits: {logits}"
        );
        outln!("kernels from: {}", a.files.join(", "));
        if !a.kernels.is_empty() {
            kernel_checks(&a.kernels);
        }
    }
}

/// `kvlab compare --impl learner`: each exercise's function against kvlab's.
pub fn kernel_checks(checks: &[KernelCheck]) {
    outln!(
        "{:<8} {:<17} {:>6} {:>12} {:>11} {:>11}  verdict",
        "exercise",
        "function",
        "calls",
        "max |diff|",
        "tolerance",
        "scale"
    );
    for k in checks {
        let diff = k
            .max_abs_diff
            .map_or("broken".to_string(), |d| format!("{d:.3e}")); // NaN, inf or a wrong length
        outln!(
            "{:<8} {:<17} {:>6} {:>12} {:>11.1e} {:>11.3}  {}",
            k.exercise,
            k.function,
            k.calls,
            diff,
            k.tolerance,
            k.max_abs_reference,
            if k.ok { "ok" } else { "WRONG" }
        );
    }
    outln!("(your function against kvlab's on the same inputs, the model's own activations: a prefill and 2 decode steps; each call gets kvlab's correct inputs, so one mistake never hides another)");
}

/// `kvlab kv-size`.
pub fn kv_size(r: &KvSizeReport) {
    let shape = &r.shape;
    outln!(
        "2 (K,V) x {} layers x {} kv heads x {} head_dim x {} bytes ({:?}) = {} bytes per token ({})",
        shape.layers,
        shape.kv_heads,
        shape.head_dim,
        shape.dtype.bytes(),
        shape.dtype,
        r.bytes_per_token,
        human_bytes(r.bytes_per_token)
    );
    outln!(
        "x {} tokens x {} sequence(s) = {} bytes ({:.2} GB, {})",
        r.seq_len,
        r.batch,
        r.bytes,
        r.bytes as f64 / 1e9,
        human_bytes(r.bytes)
    );
    if let Some(w) = &r.weights {
        outln!(
            "weights: {} params x {} bytes = {} ({:.2} GB): the cache{} holds more from {} tokens on",
            w.params,
            r.shape.dtype.bytes(),
            human_bytes(w.weight_bytes as usize),
            w.weight_bytes as f64 / 1e9,
            if r.batch > 1 { "s of all sequences" } else { "" },
            w.crossover_tokens
        );
    }
    if let Some(g) = &r.layer_groups {
        outln!(
            "local layers keep their window: {} global x {} + {} local x {} positions = {} ({:.1} % of the above)",
            g.global_layers,
            r.seq_len,
            g.local_layers,
            g.local_positions,
            human_bytes(g.bytes),
            100.0 * g.fraction_of_full
        );
    }
    if let Some(m) = &r.measured {
        outln!(
            "measured: a real cache of {} positions (f32, filled in {} passes) reserves {} and its rows hold {}: {:.1} % and {:.1} % of every layer holding every position ({})",
            m.positions,
            m.passes,
            human_bytes(m.bytes_reserved),
            human_bytes(m.bytes_used),
            100.0 * m.reserved_fraction_of_full,
            100.0 * m.used_fraction_of_full,
            human_bytes(m.full_bytes)
        );
    }
}

/// `kvlab bench-context`: one line per context.
pub fn tpot_context(r: &kvlab::lab::tpot_context::TpotContextReport) {
    outln!(
        "kvlab bench-context — {} ({} layers, {} local) on {}, median of {} steps",
        r.model,
        r.layers,
        r.local_layers,
        r.machine,
        r.reps
    );
    outln!("context  step ms  KV read      KV reserved  every position");
    for p in &r.points {
        outln!(
            "{:>7}  {:>7.2}  {:>11}  {:>11}  {:>11}",
            p.context,
            p.step_ms,
            human_bytes(p.kv_bytes_read),
            human_bytes(p.kv_bytes_reserved),
            human_bytes(p.kv_bytes_full)
        );
    }
}

/// `kvlab bench` on the CPU.
pub fn bench(r: &BenchReport) {
    outln!(
        "kvlab bench — {} ({} params, {} weights in {}) on {}",
        r.model,
        r.n_params,
        r.dtype,
        r.layout.name(),
        r.machine
    );
    outln!(
        "roofs: {:.1} GFLOP/s f32 FMA peak, {:.1} GB/s memory read ({} threads)",
        r.fma_peak_gflop_s,
        r.memory_gb_s,
        r.threads
    );
    outln!("\nprefill (预填充): the whole prompt in one pass — compute-bound");
    outln!(
        "{:>8} {:>10} {:>10} {:>9} {:>8}",
        "prompt",
        "TTFT ms",
        "tok/s",
        "GFLOP/s",
        "of peak"
    );
    for p in &r.prefill {
        outln!(
            "{:>8} {:>10.1} {:>10.1} {:>9.1} {:>7.0}%",
            p.prompt_len,
            p.ttft_ms,
            p.tok_s,
            p.gflop_s,
            100.0 * p.fraction_of_fma_peak
        );
    }
    outln!("\nper-token latency (解码 decode) at a given context: naive recompute vs KV cache");
    outln!(
        "{:>8} {:>12} {:>12} {:>9} {:>10} {:>8} {:>11}",
        "context",
        "naive ms",
        "cached ms",
        "speedup",
        "MB/token",
        "of roof",
        "roof tok/s"
    );
    for s in &r.steps {
        outln!(
            "{:>8} {:>12.1} {:>12.2} {:>8.1}x {:>10.1} {:>7.0}% {:>11.1}",
            s.context,
            s.naive_ms,
            s.cached_ms,
            s.speedup,
            s.cached_bytes_per_token / 1e6,
            100.0 * s.fraction_of_bandwidth_roof,
            s.roof_tok_s
        );
    }
    outln!(
        "\ncached decode: {:.1} tok/s, reading {:.0} MB per token = {:.1} GB/s of the {:.1} GB/s this machine reads ({:.0}% of the memory roof) — memory-bound",
        r.decode_tok_s,
        r.decode_bytes_per_token / 1e6,
        r.decode_gb_s,
        r.memory_gb_s,
        100.0 * r.decode_roofline_fraction
    );
}

/// `kvlab bench --device cuda`.
#[cfg(feature = "cuda")]
pub fn gpu_bench(r: &kvlab::lab::gpu_bench::GpuBenchReport) {
    outln!(
        "kvlab bench — {} ({} params) on {}",
        r.model,
        r.n_params,
        r.device
    );
    outln!(
        "roofs, measured on this GPU (src/cuda/roof.rs): read {:.0} GB/s (data sheet {:.0} GB/s), f32 FMA {:.1} TFLOP/s",
        r.roof.read_bytes_per_s / 1e9,
        r.datasheet_bytes_per_s / 1e9,
        r.roof.fma_flop_per_s / 1e12
    );
    outln!(
        "decode: {} greedy tokens after a prompt of `context` tokens; {:.1} MB of weights read per token (+ the KV cache); of HBM = bytes per token x tok/s / the measured read roof; of FMA = prefill FLOP/s / the measured FMA roof; launch roof = 1 / (launches per token x {:.2} µs measured per launch)",
        r.decode_tokens,
        r.weight_bytes_per_token as f64 / 1e6,
        r.launch_latency_us
    );
    outln!(
        "{:>5} {:<30} {:>7} | {:>10} {:>11} {:>7} | {:>9} {:>8} {:>12} | {:>10} {:>6} | {:>9} {:>7} | {:>8} {:>10} {:>7} | {:>9} {:>9}",
        "wts",
        "kernels",
        "context",
        "prefill",
        "prefill/s",
        "of FMA",
        "decode",
        "tok/s",
        "tok/s(argmx)",
        "naive step",
        "gap",
        "MB/token",
        "of HBM",
        "launches",
        "launch roof",
        "of roof",
        "paged",
        "int8 KV"
    );
    for row in &r.rows {
        outln!(
            "{:>5} {:<30} {:>7} | {:>7.2} ms {:>11.0} {:>6.1}% | {:>6.3} ms {:>8.1} {:>12.1} | {:>7.2} ms {:>5.0}x | {:>9.1} {:>6.1}% | {:>8.0} {:>10.0} {:>6.1}% | {:>9} {:>9}",
            row.weights.name(),
            row.kernels,
            row.context,
            row.prefill_ms,
            row.prefill_tok_s,
            row.prefill_flop_fraction * 100.0,
            row.decode_ms,
            row.decode_tok_s,
            row.decode_device_argmax_tok_s,
            row.naive_step_ms,
            row.naive_step_ms / row.decode_ms,
            row.bytes_per_token as f64 / 1e6,
            row.hbm_fraction * 100.0,
            row.launches_per_token,
            row.launch_roof_tok_s,
            row.launch_fraction * 100.0,
            row.paged_decode_ms
                .map_or("-".to_string(), |ms| format!("{ms:.3} ms")),
            row.int8_decode_ms
                .map_or("-".to_string(), |ms| format!("{ms:.3} ms"))
        );
    }
}

/// `kvlab bench-cache`.
pub fn cache_bench(r: &CacheBench) {
    outln!(
        "kvlab bench-cache — {} on {}, block size {}, median of {} reps",
        r.model,
        r.machine,
        r.block_size,
        r.reps
    );
    outln!(
        "\ndecode: one token at a given context, per cache layout\n{:>8} {:>13} {:>9} {:>8} {:>16}",
        "context",
        "layout",
        "ms",
        "tok/s",
        "vs preallocated"
    );
    for d in &r.decode {
        outln!(
            "{:>8} {:>13} {:>9.2} {:>8.1} {:>15.1}%",
            d.context,
            d.layout.name(),
            d.ms,
            d.tok_s,
            100.0 * d.vs_preallocated
        );
    }
    if let Some(p) = &r.prefix {
        outln!(
            "\nTTFT, {} shared + {} own tokens: cold {:.1} ms, prefix hit {:.1} ms ({} positions reused) = {:.1}x faster",
            p.shared_len, p.suffix_len, p.cold_ms, p.hit_ms, p.reused, p.speedup
        );
    }
}

/// `kvlab trace`: one line per layout, from its rows.
pub fn trace(rows: &[TraceRow]) {
    outln!(
        "{:>13} {:>6} {:>10} {:>12} {:>12} {:>12} {:>12}",
        "layout",
        "steps",
        "positions",
        "reserved",
        "used",
        "peak waste",
        "copied"
    );
    let mut layouts: Vec<_> = rows.iter().map(|r| r.layout).collect();
    layouts.dedup();
    for layout in layouts {
        let mine: Vec<_> = rows.iter().filter(|r| r.layout == layout).collect();
        let Some(last) = mine.last() else { continue };
        let waste = mine
            .iter()
            .map(|r| r.bytes_reserved - r.bytes_used)
            .max()
            .unwrap_or(0);
        outln!(
            "{:>13} {:>6} {:>10} {:>12} {:>12} {:>12} {:>12}",
            layout.name(),
            last.step,
            last.positions,
            human_bytes(last.bytes_reserved),
            human_bytes(last.bytes_used),
            human_bytes(waste),
            human_bytes(last.bytes_copied)
        );
    }
}

/// `kvlab capacity`.
pub fn capacity(r: &CapacityReport, max_prompt: usize, seed: u64) {
    outln!(
        "budget {} ({} bytes) of {} KV cache, {} per token; requests: prompt 16..{} tokens (mean {:.0}), output 1..{} (mean {:.0}), seed {}",
        human_bytes(r.budget_bytes),
        r.budget_bytes,
        if r.kv == "full" { "f32" } else { r.kv },
        human_bytes(r.bytes_per_token),
        max_prompt,
        r.mean_prompt_len,
        r.max_new_tokens,
        r.mean_output_len,
        seed
    );
    outln!(
        "\n{:>34} {:>9} {:>12} {:>12} {:>7}",
        "",
        "requests",
        "reserved",
        "live",
        "waste"
    );
    let mut rows = vec![(
        format!("preallocated (prompt + {})", r.max_new_tokens),
        &r.preallocated,
    )];
    if let Some(one) = &r.paged_one_table {
        rows.push((
            format!("paged, one table (blocks of {})", r.block_size),
            one,
        ));
        let name = format!("paged, {} tables per request", r.layer_groups);
        rows.push((name, &r.paged));
    } else {
        rows.push((format!("paged (blocks of {})", r.block_size), &r.paged));
    }
    for (name, f) in rows {
        outln!(
            "{:>34} {:>9} {:>12} {:>12} {:>6.1}%",
            name,
            f.requests,
            human_bytes(f.bytes_reserved),
            human_bytes(f.bytes_live),
            100.0 * f.waste
        );
    }
    outln!(
        "\npaging fits {:.2}x as many concurrent requests in the same memory",
        r.gain
    );
    if let Some(one) = &r.paged_one_table {
        outln!(
            "a block table per layer group fits {:.2}x as many as one table for every layer",
            r.paged.requests as f64 / one.requests.max(1) as f64
        );
    }
    if r.paged.requests == r.offered {
        outln!("(every offered request fit: raise --requests or lower --budget to see the limit)");
    }
}

/// `kvlab prefix`.
pub fn prefix(r: &PrefixReport) {
    outln!(
        "{:>8} | {:>28} | {:>28}",
        "request",
        "without prefix caching",
        "with prefix caching"
    );
    for (i, (a, b)) in r.without.requests.iter().zip(&r.with.requests).enumerate() {
        outln!(
            "{:>8} | TTFT {:>9.1} ms, {:>5} computed | TTFT {:>9.1} ms, {:>5} reused",
            i + 1,
            a.ttft_ms,
            a.computed,
            b.ttft_ms,
            b.reused
        );
    }
    outln!(
        "\nrequests 2..{}: mean TTFT {:.1} ms -> {:.1} ms ({:.1}x faster)",
        r.n_requests,
        r.without.later_ttft_ms,
        r.with.later_ttft_ms,
        r.ttft_speedup
    );
    outln!(
        "KV cache held by all {} requests: {} -> {} ({:.1}x less; {} block hits, {} misses)",
        r.n_requests,
        human_bytes(r.without.kv_bytes),
        human_bytes(r.with.kv_bytes),
        r.kv_ratio,
        r.with.prefix_hits,
        r.with.prefix_misses
    );
    outln!("same tokens with and without: {}", r.identical_tokens);
}
