//! `kvlab gqa`: MHA, GQA and MQA on SmolLM2-135M's shape at a long context (book: gqa.md).

use crate::args::JsonArgs;
use crate::print;
use clap::Args;
use kvlab::error::Result;
use kvlab::lab::gqa::{self, GqaReport};

#[derive(Args)]
pub struct GqaArgs {
    /// Positions in the cache when the decode step is timed (filled with synthetic K/V).
    #[arg(long, default_value_t = 4096)]
    pub context: usize,
    /// Timed decode steps per variant (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    #[command(flatten)]
    pub out: JsonArgs,
}

pub fn gqa(args: GqaArgs) -> Result<()> {
    let report = gqa::run(args.context, args.reps)?;
    if args.out.json {
        return print::json(&report);
    }
    print_report(&report);
    Ok(())
}

fn print_report(r: &GqaReport) {
    outln!(
        "kvlab gqa — SmolLM2-135M shape (9 query heads), random weights, f32, context {} on {}, median of {} steps",
        r.context, r.machine, r.reps
    );
    outln!();
    outln!(
        "{:>8} {:>9} {:>13} {:>11} {:>10} {:>8} {:>13} {:>10}",
        "variant",
        "kv heads",
        "KV per token",
        "KV in all",
        "decode ms",
        "tok/s",
        "attention ms",
        "attn share"
    );
    for row in &r.rows {
        outln!(
            "{:>8} {:>9} {:>13} {:>11} {:>10.1} {:>8.1} {:>13.1} {:>9.0}%",
            row.variant,
            row.n_kv_heads,
            print::human_bytes(row.kv_bytes_per_token),
            print::human_bytes(row.kv_bytes),
            row.decode_ms,
            row.tok_s,
            row.attention_ms,
            100.0 * row.attention_share
        );
    }
    if let (Some(mha), Some(mqa)) = (r.rows.first(), r.rows.last()) {
        outln!();
        outln!(
            "{} -> {}: {:.0}x less KV cache, decode step {:.2}x as fast (attention alone {:.2}x)",
            mha.variant,
            mqa.variant,
            mha.kv_bytes as f64 / mqa.kv_bytes as f64,
            mha.decode_ms / mqa.decode_ms,
            mha.attention_ms / mqa.attention_ms
        );
    }
}
