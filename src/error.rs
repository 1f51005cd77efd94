//! Every way kvlab can fail, each with a message that names the problem and what to do.
//!
//! Bad input (a missing weight file, a wrong shape, a prompt longer than the
//! context, a full cache...) must never panic: it becomes one of these variants,
//! and the CLI prints it and exits non-zero.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("model folder {0}: not found. Fetch SmolLM2 with `bash scripts/fetch-smollm2.sh`, or point --model at a folder holding config.json, *.safetensors and tokenizer.json")]
    ModelFolderMissing(PathBuf),

    #[error("{path}: not a valid config.json: {}", one_line(msg))]
    Config { path: PathBuf, msg: String },

    #[error("invalid model config: {0}")]
    InvalidConfig(String),

    #[error("{path}: not a readable safetensors file ({}). It may be truncated or still downloading: fetch or convert it again", one_line(msg))]
    Safetensors { path: PathBuf, msg: String },

    #[error("tensor `{name}` is missing from the weights. Is this a Llama-family checkpoint with Hugging Face names (model.layers.N.self_attn.q_proj.weight ...)?")]
    MissingTensor { name: String },

    #[error("tensor `{name}` has shape {got:?}, but config.json implies {expected:?}: the weights and config.json do not belong together")]
    TensorShape {
        name: String,
        expected: Vec<usize>,
        got: Vec<usize>,
    },

    #[error("tensor `{name}` is stored as {dtype}; kvlab reads F32, BF16 and F16 weights (convert the checkpoint first)")]
    TensorDtype { name: String, dtype: String },

    #[error("tokenizer: {0}")]
    Tokenizer(String),

    #[error("chat template: {0}")]
    ChatTemplate(String),

    #[error("the prompt is empty: give at least one token of text")]
    EmptyPrompt,

    #[error("the prompt has {prompt_len} tokens but the model's context is {max_seq_len}: shorten the prompt")]
    PromptTooLong {
        prompt_len: usize,
        max_seq_len: usize,
    },

    #[error("prompt ({prompt_len} tokens) + max_new_tokens ({max_new_tokens}) = {} exceeds the model's context of {max_seq_len} tokens: {}", prompt_len.saturating_add(*max_new_tokens), context_advice(*prompt_len, *max_seq_len))]
    ContextOverflow {
        prompt_len: usize,
        max_new_tokens: usize,
        max_seq_len: usize,
    },

    #[error("KV cache full: it holds {capacity} positions, and writing {requested} more after {used} would overflow it. Allocate it for prompt + max_new_tokens")]
    CacheFull {
        capacity: usize,
        used: usize,
        requested: usize,
    },

    #[error("paged KV cache out of blocks: the memory budget of {budget_bytes} bytes holds {n_blocks} blocks of {block_size} positions, {free} of them free or reusable, and this step needs {needed}. The pool is sized for fewer positions than its sequences need: free other sequences, or size the pool for more")]
    BlockBudgetExhausted {
        budget_bytes: usize,
        n_blocks: usize,
        block_size: usize,
        free: usize,
        needed: usize,
    },

    #[error("token id {id} is outside the vocabulary (size {vocab_size})")]
    TokenOutOfRange { id: u32, vocab_size: usize },

    #[error("{path}: cannot import this GGUF file: {}", one_line(msg))]
    Gguf { path: PathBuf, msg: String },

    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// Two computations that must agree did not (naive vs cached tokens, with vs without
    /// prefix caching): a bug in kvlab, never bad input.
    #[error("{0}: this is a bug in kvlab, please report it")]
    Mismatch(String),

    /// An internal invariant was broken (e.g. a cache written before `prepare`): a bug in
    /// kvlab, never bad input.
    #[error("internal error: {0}: this is a bug in kvlab, please report it")]
    Internal(String),

    #[error("CUDA: {0}")]
    Cuda(String),

    #[error("{path}: {}", one_line(msg))]
    InvalidFile { path: PathBuf, msg: String },

    /// A fallible allocation the allocator refused (or a size that overflowed): every
    /// buffer sized by input is allocated this way, so a request too large for this machine
    /// is an error, not an abort.
    #[error("cannot allocate {bytes} bytes for {what}: the input asks for more memory than this machine can give: ask for fewer positions (a shorter prompt or context, fewer new tokens, a smaller budget) or use a smaller model")]
    OutOfMemory { what: String, bytes: u128 },

    #[error("{0}")]
    NonFinite(String),
    /// A second implementation of the pass (`--impl textbook|learner`) did not give the
    /// engine's tokens.
    #[error("{0}")]
    Differs(String),
}

/// What to do when a prompt and its new tokens overflow the context: fewer new tokens if
/// the prompt leaves room for any, else a shorter prompt (never "at most 0").
fn context_advice(prompt_len: usize, max_seq_len: usize) -> String {
    match max_seq_len.saturating_sub(prompt_len) {
        0 => "the prompt alone fills the context: shorten the prompt".into(),
        room => format!("lower --max-new-tokens to at most {room}"),
    }
}

impl Error {
    /// Wraps an I/O error with the path it happened on, so the message says which file.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// `text` with its control characters escaped (`\n` → `\\n`): messages quote names and
/// strings read from files, and a crafted file must not turn a one-line error into several
/// (or into terminal escape sequences).
fn one_line(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by `scripts/fuzz.sh`: a GGUF metadata key holding a newline made the import
    /// error two lines long.
    #[test]
    fn messages_quoting_file_content_stay_on_one_line() {
        let err = Error::Gguf {
            path: PathBuf::from("f.gguf"),
            msg: "metadata `llam\n\0a.feed`: unknown value type 7".into(),
        };
        let text = err.to_string();
        assert!(!text.contains('\n') && !text.contains('\0'), "{text:?}");
        assert!(text.contains("llam\\n\\u{0}a.feed"), "{text:?}");
    }
}
