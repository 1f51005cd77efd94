//! The speculative-decoding tables: a generation's drafter figures, plain vs speculative,
//! the verify pass's cost by draft length, and the drafter x draft-length sweep
//! (book: speculative.md).

use super::human_bytes;
use kvlab::lab::spec_sweep::SweepReport;
use kvlab::lab::speculative::SpecExperiment;
use kvlab::lab::verify_cost::VerifyCostReport;
use kvlab::speculative::SpecGeneration;

/// A speculative generation's figures on one line (`generate --speculative`).
pub fn spec_summary(g: &SpecGeneration) -> String {
    format!(
        "[speculative {}, k = {}] prompt {} tokens, generated {} ({:?}) | TTFT {:.1} ms | TPOT {:.1} ms ({:.1} tok/s) | acceptance {:.2} ({} of {} drafts), {:.2} accepted per pass | {} target forwards, {:.2} tokens/forward | KV cache {} reserved, {} used",
        g.drafter,
        g.draft_len,
        g.prompt_ids.len(),
        g.generated_ids.len(),
        g.stop_reason,
        g.ttft_ms,
        g.tpot_ms,
        g.decode_tok_s,
        g.acceptance_rate,
        g.draft_accepted,
        g.draft_proposed,
        g.mean_accepted_len,
        g.target_forwards,
        g.tokens_per_forward,
        human_bytes(g.kv_cache_bytes),
        human_bytes(g.kv_cache_bytes_used),
    )
}

/// `kvlab compare --speculative`.
pub fn spec_comparison(e: &SpecExperiment) {
    if !e.speculative.text.is_empty() {
        outln!("text: {:?}\n", e.speculative.text);
    }
    outln!(
        "[plain cached] prompt {} tokens, generated {} | TTFT {:.1} ms | TPOT {:.1} ms ({:.1} tok/s) | total {:.1} ms",
        e.prompt_tokens,
        e.new_tokens,
        e.plain_ttft_ms,
        e.plain_tpot_ms,
        e.plain_decode_tok_s,
        e.plain_total_ms
    );
    outln!(
        "{} | total {:.1} ms",
        spec_summary(&e.speculative),
        e.speculative.total_ms
    );
    outln!(
        "draft cost c = {:.3}x a decode step per drafted token | verify pass = {:.2}x a decode step",
        e.draft_cost_ratio, e.verify_cost_ratio
    );
    outln!(
        "identical tokens: {} | speedup (plain total / speculative total): {:.2}x (decode: {:.2}x) | predicted {:.2}x (with the measured verify cost: {:.2}x)",
        e.tokens_identical,
        e.speedup_total,
        e.speedup_decode,
        e.predicted_speedup,
        e.predicted_speedup_measured_verify
    );
}

/// `kvlab bench-verify`.
pub fn verify_cost(r: &VerifyCostReport) {
    outln!(
        "kvlab bench-verify — {} on {}: one verify pass over k drafts (k + 1 rows) on {} cached positions, vs one decode step ({:.2} ms); medians of {} interleaved repetitions",
        r.model, r.machine, r.context, r.decode_step_ms, r.reps
    );
    outln!(
        "{:>3} {:>5} {:>10} {:>14} {:>12}",
        "k",
        "rows",
        "verify ms",
        "decode steps",
        "per row"
    );
    for row in &r.rows {
        outln!(
            "{:>3} {:>5} {:>10.2} {:>13.2}x {:>11.2}x",
            row.k,
            row.rows,
            row.verify_ms,
            row.ratio,
            row.ratio_per_row
        );
    }
    outln!("(decode steps = verify ms / decode step ms: 1.0 if the extra rows were free, k + 1 if each row cost a step)");
}

/// `kvlab spec-sweep`.
pub fn spec_sweep(r: &SweepReport) {
    outln!(
        "kvlab spec-sweep — {} on {}: prompt {} tokens, {} new, cache {}, plain TPOT {:.1} ms",
        r.model,
        r.machine,
        r.prompt_tokens,
        r.new_tokens,
        r.cache.name(),
        r.plain_tpot_ms
    );
    outln!(
        "{:>14} {:>3} | {:>6} {:>8} | {:>7} {:>7} | {:>8} {:>8} | {:>9} {:>9} | {:>9}",
        "drafter",
        "k",
        "accept",
        "tok/fwd",
        "c",
        "verify",
        "speedup",
        "decode",
        "predicted",
        "pred(ver)",
        "identical"
    );
    for c in &r.cells {
        outln!(
            "{:>14} {:>3} | {:>6.2} {:>8.2} | {:>6.3}x {:>6.2}x | {:>7.2}x {:>7.2}x | {:>8.2}x {:>8.2}x | {:>9}",
            c.drafter,
            c.k,
            c.acceptance_rate,
            c.tokens_per_forward,
            c.draft_cost_ratio,
            c.verify_cost_ratio,
            c.speedup_total,
            c.speedup_decode,
            c.predicted_speedup,
            c.predicted_speedup_measured_verify,
            c.tokens_identical
        );
    }
    outln!("(c: drafting cost per drafted token and verify: one verify pass, both in plain decode steps; speedup: plain total / speculative total; decode: after the first token; predicted: Leviathan et al. with verify = 1 step; pred(ver): with the measured verify cost)");
}
