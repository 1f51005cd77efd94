//! `kvlab chat`: a conversation that keeps its KV cache between turns (book: multi-turn.md).

use crate::args::{CacheArgs, DtypeArgs, SamplingArgs, DEFAULT_MODEL};
use crate::checks::at_least;
use crate::print;
use clap::Args;
use kvlab::backend::new_layout_store;
use kvlab::cache::CacheKind;
use kvlab::chat::ChatSession;
use kvlab::error::{Error, Result};
use kvlab::generate::{GenerateOptions, PathKind};
use kvlab::simd::WeightElem;
use kvlab::tokenizer::{Message, TextStream, Tokenizer};
use kvlab::weights::{CpuWeights, OnWeights};
use kvlab::{loader, Model};
use serde::Serialize;
use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;

#[derive(Args)]
pub struct ChatArgs {
    /// Model folder (a chat needs the real tokenizer: no random weights here).
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub model: PathBuf,
    /// System message (else the template's default).
    #[arg(long)]
    pub system: Option<String>,
    #[arg(long, default_value_t = 128)]
    pub max_new_tokens: usize,
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Positions the conversation may reach (the preallocated layout reserves them all).
    #[arg(long, default_value_t = 2048)]
    pub max_context: usize,
    /// Recompute the whole conversation every turn (to feel the difference).
    #[arg(long)]
    pub no_reuse: bool,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub weights: DtypeArgs,
    /// One JSON object per turn, one per line, instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One turn of `kvlab chat --json`.
#[derive(Serialize)]
struct ChatTurnReport {
    turn: usize,
    prompt_tokens: usize,
    reused: usize,
    computed: usize,
    ttft_ms: f64,
    tpot_ms: f64,
    generated_tokens: usize,
    reply: String,
    kv_bytes_reserved: usize,
    kv_bytes_used: usize,
}

pub fn chat(args: ChatArgs) -> Result<()> {
    at_least("--max-new-tokens", args.max_new_tokens, 1)?;
    at_least("--max-context", args.max_context, 2)?;
    if !args.model.is_dir() {
        return Err(loader::not_a_folder(&args.model));
    }
    let tokenizer = Tokenizer::from_dir(&args.model)?;
    if !tokenizer.has_chat_template() {
        return Err(Error::InvalidArgument(format!(
            "{}: this model has no chat template (tokenizer_config.json), and kvlab chat renders every turn with it: point --model at an instruct model",
            args.model.display()
        )));
    }
    let model = loader::load_model(&args.model)?;
    let weights = CpuWeights::convert(&model, args.weights.dtype(), args.weights.layout()?, false)?;
    weights.run(Converse {
        args: &args,
        tokenizer: &tokenizer,
    })
}

/// `converse` on whatever weights `--dtype` and `--layout` made.
struct Converse<'a> {
    args: &'a ChatArgs,
    tokenizer: &'a Tokenizer,
}

impl OnWeights for Converse<'_> {
    type Out = Result<()>;
    fn run<E: WeightElem>(self, model: &Model<E>) -> Result<()> {
        converse(self.args, self.tokenizer, model)
    }
}

/// The conversation loop, on weights of element type `E` (`--dtype`).
fn converse<E: WeightElem>(args: &ChatArgs, tokenizer: &Tokenizer, model: &Model<E>) -> Result<()> {
    let capacity = args.max_context.min(model.config.max_position_embeddings);
    let layout = args.cache.layout()?;
    let new_cache = || new_layout_store(&model.config, layout, capacity);
    let mut session = ChatSession::new(model, new_cache()?);
    let opts = GenerateOptions {
        max_new_tokens: args.max_new_tokens,
        path: PathKind::Cached,
        sampler: args.sampling.config(),
        eos_ids: model.config.eos_ids(),
    };
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(Message::new("system", system));
    }
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    if interactive {
        eprintln!(
            "kvlab chat — {} cache{}; one message per line, Ctrl-D to end",
            CacheKind::from(args.cache.cache).name(),
            if args.no_reuse {
                ", recomputed every turn"
            } else {
                ", kept between turns"
            }
        );
    }
    let mut turn_no = 0;
    let mut line = String::new();
    loop {
        if interactive {
            eprint!("\nyou> ");
        }
        line.clear();
        if stdin
            .lock()
            .read_line(&mut line)
            .map_err(|e| Error::io("stdin", e))?
            == 0
        {
            break;
        }
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        turn_no += 1;
        messages.push(Message::new("user", text));
        let ids = tokenizer.encode(&tokenizer.apply_chat_template(&messages)?)?;
        if ids.len().saturating_add(args.max_new_tokens) > capacity {
            let fix = if capacity < args.max_context {
                format!("over the model's context of {capacity}: lower --max-new-tokens or start a new chat")
            } else {
                format!("over --max-context {capacity}: raise --max-context (the model takes {}), lower --max-new-tokens or start a new chat", model.config.max_position_embeddings)
            };
            return Err(Error::InvalidArgument(format!(
                "the conversation is {} tokens, and {} more may come: {fix}",
                ids.len(),
                args.max_new_tokens
            )));
        }
        if args.no_reuse {
            session = ChatSession::new(model, new_cache()?);
        }
        if interactive {
            eprint!("assistant> ");
        }
        let mut stream = TextStream::new(tokenizer);
        let turn = session.turn(&ids, &opts, |token| {
            if args.json || opts.eos_ids.contains(&token) {
                return;
            }
            if let Some(text) = stream.push(token) {
                out!("{text}");
            }
        })?;
        let g = &turn.generation;
        let reply_ids: Vec<u32> = g
            .generated_ids
            .iter()
            .copied()
            .filter(|t| !opts.eos_ids.contains(t))
            .collect();
        let reply = tokenizer.decode(&reply_ids)?;
        messages.push(Message::new("assistant", &reply));
        let bytes = session.kv_bytes();
        if args.json {
            let report = ChatTurnReport {
                turn: turn_no,
                prompt_tokens: turn.prompt_tokens,
                reused: turn.reused,
                computed: turn.computed,
                ttft_ms: g.ttft_ms,
                tpot_ms: g.tpot_ms,
                generated_tokens: g.generated_ids.len(),
                reply,
                kv_bytes_reserved: bytes.reserved,
                kv_bytes_used: bytes.used,
            };
            outln!("{}", print::to_json(&report, false)?);
        } else {
            outln!();
            eprintln!(
                "[turn {turn_no}] TTFT {:.1} ms | prompt {} tokens: {} reused from the cache, {} computed | {} new tokens, {:.1} tok/s | KV cache {} reserved, {} used",
                g.ttft_ms,
                turn.prompt_tokens,
                turn.reused,
                turn.computed,
                g.generated_ids.len(),
                g.decode_tok_s,
                print::human_bytes(bytes.reserved),
                print::human_bytes(bytes.used)
            );
        }
    }
    Ok(())
}
