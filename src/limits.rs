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
    fn impossible_allocations_fail_cleanly() {
        let err = try_vec::<f32>(usize::MAX / 2, "a test").unwrap_err();
        assert!(matches!(err, Error::OutOfMemory { .. }), "{err}");
    }
}
