//! `kvlab eval`: a text through the model, teacher-forced, with a KV policy against the full
//! cache: perplexity, top-1 agreement, KL, KV bytes (book: kv-quantization.md).

use crate::args::{JsonArgs, KvArgs, ModelArgs, WeightDtypeArg};
use crate::checks::at_least;
use crate::print;
use clap::Args;
use kvlab::device::WeightDtype;
use kvlab::error::{Error, Result};
use kvlab::lab::eval::{eval as eval_text, eval_model_window};
use kvlab::lab::eval_weights::eval_weights;
use kvlab::limits::{read_text_capped, MAX_PROMPT_BYTES};
use std::path::PathBuf;

#[derive(Args)]
pub struct EvalArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The text to score (UTF-8).
    #[arg(long)]
    pub text_file: PathBuf,
    #[command(flatten)]
    pub kv: KvArgs,
    /// Score only the first N tokens of the text.
    #[arg(long)]
    pub max_tokens: Option<usize>,
    /// Instead of a --kv policy: run a model with local layers (Gemma 3, trained with a
    /// window of 512) with their window set to N positions, against the model as trained
    /// (one as long as the text removes the window).
    #[arg(long, value_name = "N")]
    pub model_window: Option<usize>,
    /// Instead of a --kv policy: score the model with its weights in this format (bf16,
    /// int8, w8a8: int8 weights and activations, or bf16a: bf16 weights and activations)
    /// against the f32 model, both in one prefill (book: weight-formats.md).
    #[arg(long, value_enum)]
    pub dtype: Option<WeightDtypeArg>,
    #[command(flatten)]
    pub out: JsonArgs,
}

pub fn eval(args: EvalArgs) -> Result<()> {
    // The policy first: a misspelt --kv fails before the model loads.
    let policy = args.kv.policy()?;
    if args.max_tokens == Some(0) {
        return Err(Error::InvalidArgument(
            "--max-tokens 0 leaves nothing to score: give at least 2".into(),
        ));
    }
    let text = read_text_capped(&args.text_file, MAX_PROMPT_BYTES, "text file")?;
    if text.trim().is_empty() {
        return Err(Error::InvalidFile {
            path: args.text_file.clone(),
            msg: "the text file is empty: give a text of at least 2 tokens".into(),
        });
    }
    if args.model.random_weights {
        return Err(Error::InvalidArgument(
            "kvlab eval scores a text and needs the model's tokenizer: drop --random-weights and give --model DIR".into(),
        ));
    }
    let loaded = args.model.load(0, true)?;
    let tokenizer = loaded
        .tokenizer
        .as_ref()
        .expect("loaded with its tokenizer");
    let mut ids = tokenizer.encode(&text)?;
    if let Some(max) = args.max_tokens {
        ids.truncate(max);
    }
    if let Some(dtype) = args.dtype {
        if !policy.is_exact() || args.model_window.is_some() {
            return Err(Error::InvalidArgument(
                "--dtype compares weight formats on the full cache: drop --kv and --model-window"
                    .into(),
            ));
        }
        let report = eval_weights(&loaded.model, WeightDtype::from(dtype), &ids)?;
        if args.out.json {
            return print::json(&report);
        }
        print::eval_weights(&report);
        return Ok(());
    }
    if let Some(window) = args.model_window {
        if !policy.is_exact() {
            return Err(Error::InvalidArgument(
                "--model-window compares the model with another window, on its own cache: drop --kv".into(),
            ));
        }
        at_least("--model-window", window, 1)?;
        let report = eval_model_window(&loaded.model, &ids, window)?;
        if args.out.json {
            return print::json(&report);
        }
        print::eval_window(&report);
        return Ok(());
    }
    let report = eval_text(&loaded.model, &ids, policy)?;
    if args.out.json {
        print::json(&report)
    } else {
        print::eval(&report);
        Ok(())
    }
}
