//! `kvlab eval`'s text output (book: kv-quantization.md).

use super::human_bytes;
use kvlab::lab::eval::EvalReport;

/// One eval report: the policy's accuracy against the full cache, and its bytes.
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
    outln!("top-1 agreement: {:.2} %", 100.0 * r.top1_agreement);
    outln!(
        "mean KL:         {:.3e} nats (max {:.3e})",
        r.mean_kl,
        r.max_kl
    );
    outln!(
        "KV cache:        {} ({:.1} % of the full cache's {})",
        human_bytes(r.kv_cache_bytes),
        100.0 * r.kv_bytes_ratio,
        human_bytes(r.full_kv_cache_bytes)
    );
}
