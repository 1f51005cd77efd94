//! `kvlab llamacpp-table`: the side-by-side run of `scripts/llamacpp-side-by-side.sh` as one
//! Markdown table (book: roofline.md, "Side by side with llama.cpp").

use clap::Args;
use kvlab::error::{Error, Result};
use kvlab::limits::{read_text_capped, MAX_PROMPT_BYTES};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Args)]
pub struct LlamacppTableArgs {
    /// The script's measurements, one JSON object per line.
    #[arg(long, default_value = "book/src/figures/data/llamacpp.jsonl")]
    pub data: PathBuf,
}

/// One measurement: a tool, a weight format, a round, a test, its tokens/s.
#[derive(Deserialize)]
struct Measurement {
    tool: String,
    dtype: String,
    round: usize,
    test: String,
    tok_s: f64,
    /// kvlab's lines only: the read roof of that run, and the machine.
    roof_gb_s: Option<f64>,
    machine: Option<String>,
}

const TESTS: [&str; 3] = [
    "prefill 512 (empty)",
    "decode (empty)",
    "decode @ 512 cached",
];

pub fn llamacpp_table(args: LlamacppTableArgs) -> Result<()> {
    let text = read_text_capped(&args.data, MAX_PROMPT_BYTES, "side-by-side measurements")?;
    let bad = |msg: String| Error::InvalidFile {
        path: args.data.clone(),
        msg,
    };
    let runs = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).map_err(|e| bad(format!("a line is not a measurement: {e}")))
        })
        .collect::<Result<Vec<Measurement>>>()?;
    let is_llama = |m: &Measurement| m.tool.starts_with("llama.cpp");
    let tool = |llama: bool| {
        runs.iter()
            .find(|m| is_llama(m) == llama)
            .map(|m| m.tool.as_str())
    };
    let (Some(llama), Some(kvlab)) = (tool(true), tool(false)) else {
        return Err(bad(
            "needs both llama.cpp's and kvlab's measurements: run scripts/llamacpp-side-by-side.sh"
                .into(),
        ));
    };
    let tok_s = |llama: bool, dtype: &str, test: &str| -> Vec<f64> {
        runs.iter()
            .filter(|m| is_llama(m) == llama && m.dtype == dtype && m.test == test)
            .map(|m| m.tok_s)
            .collect()
    };
    outln!("| weights | test | {llama} tok/s | {kvlab} tok/s | kvlab / llama.cpp |");
    outln!("|---|---|---:|---:|---:|");
    // kvlab's w8a8 (int8 activations) runs llama.cpp's own Q8_0 arithmetic: it is set
    // against the same llama.cpp Q8_0 measurement as kvlab's int8 (f32 activations); its
    // bf16a (bf16 activations, `vdpbf16ps`) against the same BF16 one as its bf16.
    for (dtype, llama_dtype, name) in [
        ("f32", "f32", "f32"),
        ("bf16", "bf16", "bf16"),
        ("int8", "int8", "int8 / Q8_0"),
        ("w8a8", "int8", "w8a8 / Q8_0"),
        ("bf16a", "bf16", "bf16a / BF16"),
    ] {
        for test in TESTS {
            let (l, k) = (tok_s(true, llama_dtype, test), tok_s(false, dtype, test));
            if l.is_empty() || k.is_empty() {
                continue;
            }
            outln!(
                "| {name} | {test} | {} | {} | {:.2}x |",
                span(&l),
                span(&k),
                mean(&k) / mean(&l)
            );
        }
    }
    let roofs: Vec<f64> = runs.iter().filter_map(|m| m.roof_gb_s).collect();
    let rounds = runs.iter().map(|m| m.round).max().unwrap_or(0);
    let machine = runs
        .iter()
        .find_map(|m| m.machine.as_deref())
        .unwrap_or("?");
    outln!(
        "\n{rounds} interleaved rounds on {machine} (a range is the rounds' lowest and highest); kvlab's measured read roof {}-{} GB/s. llama.cpp keeps its KV cache in f16, kvlab in f32.",
        fmt1(roofs.iter().copied().fold(f64::INFINITY, f64::min)),
        fmt1(roofs.iter().copied().fold(0.0, f64::max)),
    );
    Ok(())
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// "58.5" for one round, "56.9-58.5" for several.
fn span(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    if v.len() == 1 || fmt1(lo) == fmt1(hi) {
        fmt1(lo)
    } else {
        format!("{}-{}", fmt1(lo), fmt1(hi))
    }
}

fn fmt1(v: f64) -> String {
    format!("{v:.1}")
}
