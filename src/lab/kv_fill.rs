//! `kvlab kv-size --measure`: the formula's bytes against a real cache's (book:
//! sliding-window-model.md). Builds the cache the cached path builds for the model
//! ([`contiguous_full`]: a ring per local layer for Gemma 3), writes `positions` rows
//! of K and V into it, pass by pass as a prefill would (zeros: the bytes do not
//! depend on the values), and counts what it reserves and what its rows hold.

use crate::cache::{contiguous_full, KvStore};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::kv_size::MeasuredKv;

/// The most bytes `--measure` may fill: enough for Gemma 3 270M at 32k (0.2 GiB) or
/// SmolLM2 at its 8k context (0.4 GiB), far from what a 2-core, 24 GiB machine holds.
pub const MAX_MEASURED_BYTES: usize = 4 << 30;

// ANCHOR: measure_kv
/// Fills the model's own cache with `positions` positions and reports its bytes next
/// to those of a cache holding every position of every layer (f32, as kvlab's CPU
/// caches).
pub fn measure_kv(config: &Config, positions: usize) -> Result<MeasuredKv> {
    let full_bytes = crate::cache::bytes_per_token(config)
        .checked_mul(positions)
        .filter(|&b| b <= MAX_MEASURED_BYTES)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "--measure fills a real cache, and {positions} positions of this model would take more than {} GiB: give a smaller --seq-len",
                MAX_MEASURED_BYTES >> 30
            ))
        })?;
    let mut cache = contiguous_full(config, positions)?;
    let kv_dim = config.n_kv_heads() * config.head_dim();
    let mut passes = 0;
    while cache.len() < positions {
        let n = (positions - cache.len()).min(cache.max_pass_tokens().max(1));
        let zeros = vec![0.0f32; n * kv_dim]; // [n, kv_dim]
        cache.prepare(&vec![0; n])?;
        for layer in 0..config.num_hidden_layers {
            cache.write(layer, &zeros, &zeros)?;
        }
        cache.advance(n);
        passes += 1;
    }
    let (reserved, used) = (cache.bytes_reserved(), cache.bytes_used());
    Ok(MeasuredKv {
        positions,
        passes,
        bytes_reserved: reserved,
        bytes_used: used,
        full_bytes,
        used_fraction_of_full: used as f64 / full_bytes.max(1) as f64,
        reserved_fraction_of_full: reserved as f64 / full_bytes.max(1) as f64,
    })
}
// ANCHOR_END: measure_kv
