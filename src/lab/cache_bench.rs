//! `kvlab bench-cache`: what each layout costs in time.
//!
//! - Decode at a given context, per layout: one token through the model with `context`
//!   positions cached. Paged attention reads rows through a block table (a division
//!   and one more indirection per row); decode is dominated by streaming the weights,
//!   so the layouts should be within a few percent. Steps of the layouts are
//!   interleaved, rep by rep, so that a slow moment of the machine hits all of them.
//! - TTFT of a request whose long shared prefix is cached vs the same request cold.

use super::timing::{machine_name, median, ms_since, synthetic_prompt};
use crate::cache::paged::blocks_for_sequence;
use crate::cache::{new_store, CacheKind, KvStore, PagedCache};
use crate::error::{Error, Result};
use crate::model::{KvSource, Model};
use crate::ops::argmax;
use serde::Serialize;
use std::time::Instant;

#[derive(Debug, Clone, Serialize)]
pub struct DecodeAt {
    pub layout: CacheKind,
    pub context: usize,
    /// Median step time.
    pub ms: f64,
    pub tok_s: f64,
    /// tok/s relative to the preallocated cache at the same context.
    pub vs_preallocated: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PrefixTtft {
    pub shared_len: usize,
    pub suffix_len: usize,
    /// Median TTFT with nothing cached.
    pub cold_ms: f64,
    /// Median TTFT when the shared prefix's blocks are cached.
    pub hit_ms: f64,
    pub reused: usize,
    pub speedup: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CacheBench {
    pub machine: String,
    pub model: String,
    pub block_size: usize,
    pub reps: usize,
    pub decode: Vec<DecodeAt>,
    pub prefix: Option<PrefixTtft>,
}

/// Decode step time of every layout at each context.
pub fn decode(
    model: &Model,
    contexts: &[usize],
    block_size: usize,
    reps: usize,
) -> Result<Vec<DecodeAt>> {
    let mut out = Vec::new();
    for &context in contexts {
        let seq = synthetic_prompt(context + 1, model.config.vocab_size, 0);
        let mut caches = Vec::new();
        for kind in CacheKind::ALL {
            let mut cache = new_store(&model.config, kind, context + 1, block_size)?;
            model.forward_hidden(&seq[..context], &mut KvSource::Cache(&mut cache))?;
            caches.push((kind, cache, Vec::new()));
        }
        // One warm-up step each, then `reps` rounds, layouts interleaved.
        for round in 0..=reps {
            for (_, cache, times) in caches.iter_mut() {
                cache.truncate(context);
                let t = Instant::now();
                model.forward(&seq[context..], KvSource::Cache(&mut **cache))?;
                if round > 0 {
                    times.push(ms_since(t));
                }
            }
        }
        let base = median(caches[0].2.clone());
        for (kind, _, times) in caches {
            let ms = median(times);
            out.push(DecodeAt {
                layout: kind,
                context,
                ms,
                tok_s: 1e3 / ms,
                vs_preallocated: base / ms,
            });
        }
    }
    Ok(out)
}

/// TTFT of `shared + suffix` cold, and with `shared` already in the prefix cache.
pub fn prefix_ttft(
    model: &Model,
    shared_len: usize,
    suffix_len: usize,
    block_size: usize,
    reps: usize,
) -> Result<PrefixTtft> {
    let vocab = model.config.vocab_size;
    let shared = synthetic_prompt(shared_len, vocab, 0);
    // A different suffix for every request, so only the shared part can hit.
    let prompt = |r: usize| -> Vec<u32> {
        [&shared[..], &synthetic_prompt(suffix_len, vocab, r + 1)].concat()
    };
    let blocks = 2 * blocks_for_sequence(&model.config, shared_len + suffix_len + 1, block_size);
    let ttft = |cache: &mut PagedCache, prompt: &[u32]| -> Result<(f64, usize)> {
        let t = Instant::now();
        let (id, reused) = cache.add_sequence_with_prefix(prompt);
        let logits = model.forward(&prompt[reused..], KvSource::Cache(&mut cache.seq(id)?))?;
        std::hint::black_box(argmax(&logits));
        let ms = ms_since(t);
        cache.free(id)?;
        Ok((ms, reused))
    };
    let mut warm = PagedCache::new(&model.config, block_size, blocks, true)?;
    ttft(&mut warm, &prompt(0))?; // fills the prefix cache (and warms up)
    let (mut cold, mut hit, mut reused) = (Vec::new(), Vec::new(), 0);
    for r in 1..=reps {
        let mut fresh = PagedCache::new(&model.config, block_size, blocks, true)?;
        cold.push(ttft(&mut fresh, &prompt(r))?.0);
        let (ms, n) = ttft(&mut warm, &prompt(r))?;
        hit.push(ms);
        reused = n;
    }
    let (cold_ms, hit_ms) = (median(cold), median(hit));
    Ok(PrefixTtft {
        shared_len,
        suffix_len,
        cold_ms,
        hit_ms,
        reused,
        speedup: cold_ms / hit_ms,
    })
}

pub fn run(
    model: &Model,
    model_name: &str,
    contexts: &[usize],
    block_size: usize,
    reps: usize,
    prefix: Option<(usize, usize)>,
) -> Result<CacheBench> {
    let max = model.config.max_position_embeddings;
    if let Some(&c) = contexts.iter().find(|&&c| c == 0 || c >= max) {
        return Err(Error::InvalidArgument(format!(
            "context {c}: contexts must be between 1 and {}",
            max - 1
        )));
    }
    if let Some((shared_len, suffix_len)) = prefix {
        if suffix_len == 0 || shared_len.checked_add(suffix_len).is_none_or(|n| n > max) {
            return Err(Error::InvalidArgument(format!(
                "--shared-len + --suffix-len must fit the context of {max}, with --suffix-len at least 1"
            )));
        }
    }
    let reps = reps.max(1);
    Ok(CacheBench {
        machine: machine_name(),
        model: model_name.to_string(),
        block_size,
        reps,
        decode: decode(model, contexts, block_size, reps)?,
        prefix: prefix
            .map(|(shared, suffix)| prefix_ttft(model, shared, suffix, block_size, reps))
            .transpose()?,
    })
}
