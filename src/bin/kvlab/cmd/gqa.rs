//! `kvlab gqa`: MHA, GQA and MQA on SmolLM2-135M's shape at a long context (book: gqa.md).

use crate::args::JsonArgs;
use crate::print;
use clap::Args;
use kvlab::error::Result;
use kvlab::lab::gqa::{self, GqaReport};
use kvlab::lab::long_context::{self, LongContextReport};

#[derive(Args)]
pub struct GqaArgs {
    /// Positions in the cache when the decode step is timed (filled with synthetic K/V).
    #[arg(long, default_value_t = 4096)]
    pub context: usize,
    /// Timed decode steps per variant (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Instead: the decode step at each of these contexts (e.g. 1,1024,2048,4096,8000),
    /// and the time a generation to each takes, the sum of its steps (§3.2, kv-size.md).
    #[arg(long, value_delimiter = ',', conflicts_with = "context")]
    pub sweep: Option<Vec<usize>>,
    #[command(flatten)]
    pub out: JsonArgs,
}

pub fn gqa(args: GqaArgs) -> Result<()> {
    if let Some(contexts) = &args.sweep {
        let report = long_context::run(contexts, args.reps)?;
        if args.out.json {
            return print::json(&report);
        }
        print_sweep(&report);
        return Ok(());
    }
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

fn print_sweep(r: &LongContextReport) {
    outln!(
        "kvlab gqa --sweep — SmolLM2-135M shape (9 query heads), random weights, f32 cache, on {}, median of {} steps",
        r.machine, r.reps
    );
    outln!();
    outln!(
        "{:>8} {:>8} {:>11} {:>9} {:>15} {:>15} {:>7}",
        "variant",
        "context",
        "KV cache",
        "step ms",
        "generation s",
        "if flat s",
        "excess"
    );
    for v in &r.variants {
        for p in &v.points {
            outln!(
                "{:>8} {:>8} {:>11} {:>9.1} {:>15.1} {:>15.1} {:>6.2}x",
                v.variant,
                p.context,
                print::human_bytes(p.kv_bytes),
                p.step_ms,
                p.generation_ms / 1e3,
                p.flat_generation_ms / 1e3,
                if p.flat_generation_ms > 0.0 {
                    p.generation_ms / p.flat_generation_ms
                } else {
                    1.0
                }
            );
        }
    }
    outln!();
    outln!("(generation: the sum of the steps from the first context to this one, the measured step time linear between contexts; if flat: every step at the first context's cost; excess: what attention's growth adds)");
}
