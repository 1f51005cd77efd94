//! `kvlab eval`'s text output (book: kv-quantization.md).

use super::human_bytes;
use kvlab::lab::eval::EvalReport;
use kvlab::lab::eval_weights::WeightsEvalReport;
use kvlab::lab::kv_bench::KvBench;

/// One eval report: the policy's accuracy against the full cache, and its bytes.
/// How far two runs' next-token distributions agree: top-1, and KL(reference || run).
fn agreement(top1: f64, mean_kl: f64, max_kl: f64) {
    outln!("top-1 agreement: {:.2} %", 100.0 * top1);
    outln!("mean KL:         {:.3e} nats (max {:.3e})", mean_kl, max_kl);
}

/// `kvlab eval --model-window N`.
pub fn eval_window(r: &kvlab::lab::eval::WindowEvalReport) {
    outln!(
        "window:          {} positions in {} of {} layers, against the {} it was trained with ({} tokens, {} predicted, one prefill each)",
        r.window,
        r.local_layers,
        r.layers,
        r.trained_window,
        r.n_tokens,
        r.n_tokens - 1
    );
    outln!(
        "perplexity:      {:.4} (as trained: {:.4})",
        r.perplexity,
        r.trained_perplexity
    );
    agreement(r.top1_agreement, r.mean_kl, r.max_kl);
    outln!(
        "KV cache:        {} (as trained: {})",
        human_bytes(r.kv_cache_bytes),
        human_bytes(r.trained_kv_cache_bytes)
    );
}

/// `kvlab eval --dtype D`.
pub fn eval_weights(r: &WeightsEvalReport) {
    outln!(
        "weights:         {} against f32 ({} tokens, {} predicted, one prefill each)",
        r.dtype,
        r.n_tokens,
        r.n_tokens - 1
    );
    outln!(
        "perplexity:      {:.4} (f32: {:.4})",
        r.perplexity,
        r.f32_perplexity
    );
    agreement(r.top1_agreement, r.mean_kl, r.max_kl);
}

pub fn eval(r: &EvalReport) {
    outln!(
        "policy:          {} ({} tokens, {} predicted{})",
        r.label,
        r.n_tokens,
        r.n_tokens - 1,
        if r.token_by_token {
            ", token by token"
        } else {
            ", one prefill"
        }
    );
    outln!(
        "perplexity:      {:.4} (full cache: {:.4})",
        r.perplexity,
        r.full_perplexity
    );
    agreement(r.top1_agreement, r.mean_kl, r.max_kl);
    outln!(
        "KV cache:        {} ({:.1} % of the full cache's {})",
        human_bytes(r.kv_cache_bytes),
        100.0 * r.kv_bytes_ratio,
        human_bytes(r.full_kv_cache_bytes)
    );
}

/// `kvlab bench-kv`: one row per policy and context.
pub fn kv_bench(r: &KvBench) {
    outln!("{} | {} | median of {} steps", r.machine, r.model, r.reps);
    outln!(
        "{:>8} {:<18} {:>10} {:>9} {:>8} {:>12}",
        "context",
        "kv",
        "ms/step",
        "tok/s",
        "vs full",
        "KV bytes"
    );
    for row in &r.rows {
        outln!(
            "{:>8} {:<18} {:>10.2} {:>9.2} {:>7.2}x {:>12}",
            row.context,
            row.label,
            row.ms,
            row.tok_s,
            row.vs_full,
            human_bytes(row.kv_cache_bytes)
        );
    }
}
