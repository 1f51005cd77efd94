//! `kvlab evict-speed` and `kvlab eval-table`'s text output (book: eviction.md).

use super::human_bytes;
use crate::plot::pareto::ParetoRow;
use kvlab::lab::evict_speed::EvictSpeedReport;

/// A decode step at each context, per cache.
pub fn evict_speed(r: &EvictSpeedReport) {
    outln!("{} ({} timed steps per point, median)", r.machine, r.reps);
    outln!(
        "{:>16} {:>8} {:>6} {:>10} {:>9} {:>11}",
        "cache",
        "context",
        "rows",
        "ms/step",
        "tokens/s",
        "KV cache"
    );
    for p in &r.points {
        outln!(
            "{:>16} {:>8} {:>6} {:>10.2} {:>9.1} {:>11}",
            p.cache,
            p.context,
            p.rows_attended,
            p.step_ms,
            p.tokens_per_s,
            human_bytes(p.kv_cache_bytes)
        );
    }
}

// ANCHOR: eval_table
/// Every policy's bytes and accuracy against the full cache, as a Markdown table.
pub fn eval_table(rows: &[ParetoRow]) {
    outln!(
        "| policy | KV cache | of full | perplexity | vs full | top-1 agreement | mean KL (nats) |"
    );
    outln!("|---|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        outln!(
            "| {} | {} | {:.1} % | {:.3} | {:+.1} % | {:.1} % | {:.4} |",
            r.label,
            human_bytes(r.kv_cache_bytes),
            100.0 * r.kv_bytes_ratio,
            r.perplexity,
            100.0 * (r.perplexity / r.full_perplexity - 1.0),
            100.0 * r.top1_agreement,
            r.mean_kl
        );
    }
    if let Some(r) = rows.first() {
        outln!(
            "\n{} tokens, {} predicted; full cache perplexity {:.3}.",
            r.n_tokens,
            r.n_tokens - 1,
            r.full_perplexity
        );
    }
}
// ANCHOR_END: eval_table
