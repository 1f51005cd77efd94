//! What kvlab refuses before it allocates: the bounds on everything a file or a user sizes.
//!
//! A `config.json` is a few numbers, and each one multiplies memory: 2^40 layers,
//! a 2^40-wide hidden state or a 2^40-token context are one typo (or one hostile
//! file) away, and trusting them means an abort deep inside an allocation with no
//! hint of which number was wrong. So every size from a file passes through here
//! *first*:
//!
//! - [`check_shape`]: each dimension against a generous bound that no real
//!   Llama-family model comes near (Llama 3.1 405B has 126 layers, 128 heads,
//!   hidden 16384, FFN 53248, vocab 128256);
//! - [`min_weight_bytes`]: the parameters the shape implies, in checked arithmetic,
//!   so the loader can compare them with what the weight files can actually hold
//!   before reading a byte;
//! - [`read_capped`]: files are read only when they are regular files whose size is
//!   known and below a cap (never `/dev/zero`, a pipe or a folder), into a buffer
//!   reserved fallibly;
//! - [`try_vec`]: an allocation sized by input that fails with a clear error
//!   instead of aborting the process.
//!
//! Not in the book: this is the plumbing that lets the chapters trust their inputs.

use crate::config::Config;
use crate::error::{Error, Result};
use std::io::Read;
use std::path::Path;

/// Transformer blocks (Llama 3.1 405B: 126).
pub const MAX_LAYERS: usize = 1024;
/// Query heads, and so also KV heads (405B: 128).
pub const MAX_HEADS: usize = 1024;
/// Size of one head (Llama: 128; Gemma: 256).
pub const MAX_HEAD_DIM: usize = 1024;
/// Width of the residual stream (405B: 16384).
pub const MAX_HIDDEN: usize = 1 << 17;
/// Width of the MLP (405B: 53248).
pub const MAX_INTERMEDIATE: usize = 1 << 20;
/// Vocabulary (Gemma: 256000); token ids are u32.
pub const MAX_VOCAB: usize = 1 << 22;
/// Context in positions (the longest published: 10M).
pub const MAX_CONTEXT: usize = 1 << 24;

/// `config.json`, `tokenizer_config.json`, `model.safetensors.index.json`: a few KB in practice.
pub const MAX_JSON_BYTES: u64 = 16 << 20;
/// `tokenizer.json` (Gemma's, the largest common one, is 34 MB).
pub const MAX_TOKENIZER_BYTES: u64 = 512 << 20;
/// A prompt file: far more text than any context holds.
pub const MAX_PROMPT_BYTES: u64 = 64 << 20;
/// A GGUF file is read whole; this bounds it to what an f32 135M..8B model needs.
pub const MAX_GGUF_BYTES: u64 = 64 << 30;
/// A safetensors header (the JSON directory before the data); the `safetensors`
/// crate refuses more than 100 MB too.
pub const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;

/// minijinja fuel for one chat-template render. One unit pays for one instruction
/// or for 64 bytes of values built or written (minijinja's `UNITS_PER_FUEL`), so
/// this bounds a render to ~2M instructions and ~128 MB of strings. A real template
/// spends a few hundred units per message (plus its text / 64); an endless loop or
/// a string doubled 64 times runs dry in well under a second.
pub const TEMPLATE_FUEL: u64 = 2_000_000;
/// The rendered conversation, in bytes: at ~4 bytes a token, 4x the largest context kvlab takes.
pub const MAX_TEMPLATE_OUTPUT: usize = 16 << 20;

// ANCHOR: check_shape
/// Checks every dimension of `c` against kvlab's bounds. Runs before any other
/// check multiplies two of them, so nothing after it can overflow.
pub fn check_shape(c: &Config) -> Result<()> {
    let bounds = [
        ("num_hidden_layers", c.num_hidden_layers, MAX_LAYERS),
        ("num_attention_heads", c.num_attention_heads, MAX_HEADS),
        ("num_key_value_heads", c.n_kv_heads(), MAX_HEADS),
        ("hidden_size", c.hidden_size, MAX_HIDDEN),
        ("intermediate_size", c.intermediate_size, MAX_INTERMEDIATE),
        ("vocab_size", c.vocab_size, MAX_VOCAB),
        (
            "max_position_embeddings",
            c.max_position_embeddings,
            MAX_CONTEXT,
        ),
        // Last: when absent it derives from hidden_size, which is then the one to name.
        ("head_dim", c.head_dim(), MAX_HEAD_DIM),
    ];
    for (name, value, max) in bounds {
        if value > max {
            return Err(Error::InvalidConfig(format!(
                "{name} is {value}, above kvlab's limit of {max} (far beyond any Llama-family model): the config is corrupt"
            )));
        }
    }
    Ok(())
}
// ANCHOR_END: check_shape

/// The weights `c` needs (embedding, every layer's projections and norms, the final
/// norm, and the LM head unless tied), in checked arithmetic. Biases are optional and
/// not counted: this is a lower bound on what the weight files must hold.
pub fn min_params(c: &Config) -> Result<u64> {
    let overflow = || {
        Error::InvalidConfig(format!(
            "the shape in config.json ({} layers, hidden {}, vocab {}) overflows a parameter count",
            c.num_hidden_layers, c.hidden_size, c.vocab_size
        ))
    };
    let m = |a: usize, b: usize| (a as u64).checked_mul(b as u64).ok_or_else(overflow);
    let dim = c.hidden_size;
    let q_dim = c
        .num_attention_heads
        .checked_mul(c.head_dim())
        .ok_or_else(overflow)?;
    let kv_dim = c
        .n_kv_heads()
        .checked_mul(c.head_dim())
        .ok_or_else(overflow)?;
    let per_layer = [
        m(2, dim)?,                                   // two RMSNorm weights
        m(dim, q_dim)?,                               // W_q
        m(2, m(dim, kv_dim)? as usize)?,              // W_k, W_v
        m(q_dim, dim)?,                               // W_o
        m(3, m(dim, c.intermediate_size)? as usize)?, // gate, up, down
    ]
    .into_iter()
    .try_fold(0u64, |acc, x| acc.checked_add(x))
    .ok_or_else(overflow)?;
    let embed = m(c.vocab_size, dim)?;
    let heads = if c.tie_word_embeddings { 0 } else { embed };
    per_layer
        .checked_mul(c.num_hidden_layers as u64)
        .and_then(|x| x.checked_add(embed))
        .and_then(|x| x.checked_add(heads))
        .and_then(|x| x.checked_add(dim as u64))
        .ok_or_else(overflow)
}

/// The fewest bytes of tensor data that can hold `c`'s weights: kvlab reads
/// F32, BF16 and F16, so at least 2 bytes a parameter.
pub fn min_weight_bytes(c: &Config) -> Result<u64> {
    min_params(c)?
        .checked_mul(2)
        .ok_or_else(|| Error::InvalidConfig("the parameter count overflows".into()))
}

/// The size of `path` if it is a regular file (symlinks followed), else a clear error.
/// Devices (`/dev/zero`), pipes and folders have no size to check a cap against.
pub fn regular_file_len(path: &Path, what: &str) -> Result<u64> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if meta.is_dir() {
        return Err(Error::InvalidFile {
            path: path.to_path_buf(),
            msg: format!("is a folder, but the {what} must be a file"),
        });
    }
    if !meta.is_file() {
        return Err(Error::InvalidFile {
            path: path.to_path_buf(),
            msg: format!(
                "is not a regular file (a device, pipe or socket): kvlab reads the {what} only from a regular file"
            ),
        });
    }
    Ok(meta.len())
}

// ANCHOR: read_capped
/// Reads the regular file `path` whole, refusing it up front if it is larger than
/// `cap` bytes. The buffer is reserved once, fallibly, for the size the file
/// declares, and the read never goes past that size.
pub fn read_capped(path: &Path, cap: u64, what: &str) -> Result<Vec<u8>> {
    let len = regular_file_len(path, what)?;
    if len > cap {
        return Err(Error::InvalidFile {
            path: path.to_path_buf(),
            msg: format!(
                "{len} bytes is more than kvlab accepts for the {what} ({cap} bytes): is this the right file?"
            ),
        });
    }
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut bytes = try_vec::<u8>(len as usize, what)?;
    file.take(len)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 != len {
        return Err(Error::InvalidFile {
            path: path.to_path_buf(),
            msg: format!(
                "the file shrank from {len} to {} bytes while it was read",
                bytes.len()
            ),
        });
    }
    Ok(bytes)
}
// ANCHOR_END: read_capped

/// [`read_capped`], as UTF-8 text.
pub fn read_text_capped(path: &Path, cap: u64, what: &str) -> Result<String> {
    let bytes = read_capped(path, cap, what)?;
    String::from_utf8(bytes).map_err(|e| Error::InvalidFile {
        path: path.to_path_buf(),
        msg: format!(
            "the {what} is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ),
    })
}

/// An empty vector with room for `n` items, or [`Error::OutOfMemory`] naming `what`
/// when the allocator (or the address space) cannot give that much.
pub fn try_vec<T>(n: usize, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        what: what.to_string(),
        bytes: n as u128 * std::mem::size_of::<T>() as u128,
    })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smollm2_is_inside_every_bound_and_its_size_is_exact() {
        let c = Config::smollm2_135m();
        check_shape(&c).unwrap();
        // 134,515,008 parameters (Hugging Face's count for SmolLM2-135M, tied head).
        assert_eq!(min_params(&c).unwrap(), 134_515_008);
    }

    #[test]
    fn one_dimension_past_its_bound_is_named() {
        let mut c = Config::smollm2_135m();
        c.num_hidden_layers = 1 << 40;
        let err = check_shape(&c).unwrap_err().to_string();
        assert!(err.contains("num_hidden_layers is 1099511627776"), "{err}");
    }

    #[test]
    fn impossible_allocations_fail_cleanly() {
        let err = try_vec::<f32>(usize::MAX / 2, "a test").unwrap_err();
        assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
    }
}
