//! `kvlab attention-map`: one head's attention probabilities on a prompt, and every
//! layer's attention on the first token (book: attention.md).

use crate::args::{JsonArgs, ModelArgs};
use crate::print;
use clap::Args;
use kvlab::error::{Error, Result};
use kvlab::lab::attention_map::{attention_map as map, AttentionMap};
use kvlab::lab::timing::machine_name;
use serde::Serialize;

#[derive(Args)]
pub struct AttentionMapArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt (plain text, no chat template: every token shows on the axes).
    #[arg(long)]
    pub prompt: String,
    #[arg(long, default_value_t = 0)]
    pub layer: usize,
    #[arg(long, default_value_t = 0)]
    pub head: usize,
    #[command(flatten)]
    pub out: JsonArgs,
}

/// The library's map with the prompt's tokens spelled out.
#[derive(Serialize)]
struct Report {
    model: String,
    machine: String,
    prompt: String,
    token_ids: Vec<u32>,
    tokens: Vec<String>,
    #[serde(flatten)]
    map: AttentionMap,
}

/// Longest prompt: a t x t map stays legible, and t x t x heads x layers stays small.
const MAX_TOKENS: usize = 256;

pub fn attention_map(args: AttentionMapArgs) -> Result<()> {
    let loaded = args.model.load(0, true)?;
    let tokenizer = loaded.tokenizer.as_ref().ok_or_else(|| {
        Error::InvalidArgument(
            "attention-map needs a tokenizer: give --model DIR, not --random-weights".into(),
        )
    })?;
    let ids = tokenizer.encode(&args.prompt)?;
    if ids.is_empty() {
        return Err(Error::EmptyPrompt);
    }
    if ids.len() > MAX_TOKENS {
        return Err(Error::InvalidArgument(format!(
            "the prompt is {} tokens: at most {MAX_TOKENS} fit a readable map. Shorten --prompt",
            ids.len()
        )));
    }
    let tokens = ids
        .iter()
        .map(|&id| tokenizer.decode(&[id]))
        .collect::<Result<Vec<_>>>()?;
    let report = Report {
        model: loaded.name.clone(),
        machine: machine_name(),
        prompt: args.prompt.clone(),
        map: map(&loaded.model, &ids, args.layer, args.head)?,
        token_ids: ids,
        tokens,
    };
    if args.out.json {
        return print::json(&report);
    }
    let m = &report.map;
    outln!(
        "layer {}, head {} of {} ({} tokens); row = query, column = key:",
        m.layer,
        m.head,
        report.model,
        report.tokens.len()
    );
    for (tok, row) in report.tokens.iter().zip(&m.probs) {
        let cells: Vec<String> = row.iter().map(|p| format!("{p:4.2}")).collect();
        outln!("{:>12} {}", format!("{tok:?}"), cells.join(" "));
    }
    outln!("mean attention on the first token, per layer:");
    for (l, mass) in m.first_token_mass.iter().enumerate() {
        outln!("  layer {l:2}: {mass:.3}");
    }
    Ok(())
}
