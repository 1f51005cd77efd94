//! `kvlab kv-size --measure`: the formula's bytes against a real cache's (book:
//! sliding-window-model.md). Builds the cache the cached path builds for the model
//! ([`contiguous_full`]: a ring per local layer for Gemma 3), writes `positions` rows
//! of K and V into it, pass by pass as a prefill would (zeros: the bytes do not
//! depend on the values), and counts what it reserves and what its rows hold.

use crate::cache::{contiguous_full, KvStore};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::kv_size::MeasuredKv;
use crate::rng::Rng;

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
    let passes = fill(&mut *cache, config, positions, None)?;
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

// ANCHOR: fill
/// Writes positions `len..positions` into `cache` pass by pass, as a prefill would:
/// each pass as many positions as the cache takes at once, every layer, K and V
/// random in [-1, 1) from `rng` (zeros without one: bytes do not depend on values,
/// and a decode step's time depends on how many rows it reads, not what they hold).
/// Returns the passes it took.
pub fn fill(
    cache: &mut dyn KvStore,
    config: &Config,
    positions: usize,
    mut rng: Option<&mut Rng>,
) -> Result<usize> {
    let kv_dim = config.n_kv_heads() * config.head_dim();
    let mut passes = 0;
    while cache.len() < positions {
        let n = (positions - cache.len()).min(cache.max_pass_tokens().max(1));
        cache.prepare(&vec![0; n])?;
        let mut k = vec![0.0f32; n * kv_dim]; // [n, kv_dim]
        let mut v = vec![0.0f32; n * kv_dim];
        for layer in 0..config.num_hidden_layers {
            if let Some(rng) = rng.as_deref_mut() {
                k.iter_mut().for_each(|x| *x = rng.symmetric(1.0));
                v.iter_mut().for_each(|x| *x = rng.symmetric(1.0));
            }
            cache.write(layer, &k, &v)?;
        }
        cache.advance(n);
        passes += 1;
    }
    Ok(passes)
}
// ANCHOR_END: fill
