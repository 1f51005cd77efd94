//! `kvlab prefix`: N requests that share a long system prompt, with and without prefix
//! caching (book: prefix-caching.md: "a common system prompt is computed and stored once").
//!
//! Without prefix caching every request prefills the whole system prompt again and
//! stores its own copy of its K and V. With it, the first request computes the shared
//! blocks; every later one finds them by name, takes them (reference count + 1) and
//! prefills only its own part: its TTFT drops by roughly the ratio of prompt lengths,
//! and the pool holds the shared K and V once. The tokens must not change: the report
//! says whether both runs generated the same ones.

use super::timing::{ms_since, synthetic_prompt};
use crate::cache::{KvStore, PagedCache};
use crate::error::{Error, Result};
use crate::model::{KvSource, Model};
use crate::ops::argmax;
use serde::Serialize;
use std::time::Instant;

/// One request's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRun {
    pub prompt_tokens: usize,
    /// Positions found in the prefix cache.
    pub reused: usize,
    /// Positions prefilled.
    pub computed: usize,
    pub ttft_ms: f64,
    pub generated_ids: Vec<u32>,
}

/// All requests of one run, kept alive together (as concurrent requests would be).
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub prefix_caching: bool,
    pub requests: Vec<RequestRun>,
    pub first_ttft_ms: f64,
    /// Mean TTFT of requests 2..N: the ones that can hit.
    pub later_ttft_ms: f64,
    /// Bytes of blocks held by the live requests (shared blocks count once).
    pub kv_bytes: usize,
    /// Sum of what each request's block table covers (shared blocks once per request).
    pub kv_bytes_if_unshared: usize,
    pub prefix_hits: usize,
    pub prefix_misses: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct PrefixReport {
    pub shared_len: usize,
    pub suffix_len: usize,
    pub n_requests: usize,
    pub block_size: usize,
    pub max_new_tokens: usize,
    pub without: Run,
    pub with: Run,
    /// Later requests' TTFT without / with prefix caching.
    pub ttft_speedup: f64,
    /// KV bytes without / with.
    pub kv_ratio: f64,
    pub identical_tokens: bool,
}

/// `n_requests` synthetic prompts of `shared_len` shared tokens followed by `suffix_len`
/// tokens of their own, each run greedy for `max_new_tokens`, without and then with
/// prefix caching. Fails with [`Error::Mismatch`] if the two runs generate different tokens.
pub fn run(
    model: &Model,
    n_requests: usize,
    shared_len: usize,
    suffix_len: usize,
    max_new_tokens: usize,
    block_size: usize,
) -> Result<PrefixReport> {
    if n_requests == 0 || max_new_tokens == 0 || suffix_len == 0 {
        return Err(Error::InvalidArgument(
            "--requests, --suffix-len and --max-new-tokens must be at least 1".into(),
        ));
    }
    let max_seq_len = model.config.max_position_embeddings;
    let prompt_len = shared_len.saturating_add(suffix_len);
    if prompt_len
        .checked_add(max_new_tokens)
        .is_none_or(|n| n > max_seq_len)
    {
        return Err(Error::ContextOverflow {
            prompt_len,
            max_new_tokens,
            max_seq_len,
        });
    }
    let vocab = model.config.vocab_size;
    let shared = synthetic_prompt(shared_len, vocab, 0);
    // Stream r + 1: every request's own part differs, so only the shared part can hit.
    let suffixes: Vec<Vec<u32>> = (0..n_requests)
        .map(|r| synthetic_prompt(suffix_len, vocab, r + 1))
        .collect();
    let (shared, suffixes) = (&shared[..], &suffixes[..]);
    let without = run_once(model, shared, suffixes, max_new_tokens, block_size, false)?;
    let with = run_once(model, shared, suffixes, max_new_tokens, block_size, true)?;
    let identical_tokens = without
        .requests
        .iter()
        .zip(&with.requests)
        .all(|(a, b)| a.generated_ids == b.generated_ids);
    Ok(PrefixReport {
        shared_len: shared.len(),
        suffix_len: suffixes.first().map_or(0, Vec::len),
        n_requests: suffixes.len(),
        block_size,
        max_new_tokens,
        ttft_speedup: without.later_ttft_ms / with.later_ttft_ms,
        kv_ratio: without.kv_bytes as f64 / with.kv_bytes.max(1) as f64,
        identical_tokens,
        without,
        with,
    })
}

impl PrefixReport {
    /// [`Error::Mismatch`] unless both runs generated the same tokens: prefix caching
    /// must change where K and V come from, never what the model computes.
    pub fn check(&self) -> Result<()> {
        if self.identical_tokens {
            Ok(())
        } else {
            Err(Error::Mismatch(
                "prefix caching changed the generated tokens".into(),
            ))
        }
    }
}

fn run_once(
    model: &Model,
    shared: &[u32],
    suffixes: &[Vec<u32>],
    max_new_tokens: usize,
    block_size: usize,
    prefix_caching: bool,
) -> Result<Run> {
    let longest = suffixes.iter().map(Vec::len).max().unwrap_or(0);
    let blocks_each = (shared.len() + longest + max_new_tokens).div_ceil(block_size.max(1));
    let mut cache = PagedCache::new(
        &model.config,
        block_size,
        blocks_each * suffixes.len(),
        prefix_caching,
    )?;
    let mut requests = Vec::new();
    let mut unshared = 0;
    for suffix in suffixes {
        let prompt = [shared, suffix].concat();
        // ANCHOR: prefix_request
        let start = Instant::now();
        let (id, reused) = cache.add_sequence_with_prefix(&prompt);
        let mut seq = cache.seq(id)?;
        let logits = model.forward(&prompt[reused..], KvSource::Cache(&mut seq))?;
        let mut token = argmax(&logits) as u32;
        let ttft_ms = ms_since(start);
        // ANCHOR_END: prefix_request
        let mut generated_ids = vec![token];
        while generated_ids.len() < max_new_tokens {
            token = argmax(&model.forward(&[token], KvSource::Cache(&mut seq))?) as u32;
            generated_ids.push(token);
        }
        unshared += seq.bytes_reserved();
        requests.push(RequestRun {
            prompt_tokens: prompt.len(),
            reused,
            computed: prompt.len() - reused,
            ttft_ms,
            generated_ids,
        });
    }
    let later: Vec<f64> = requests.iter().skip(1).map(|r| r.ttft_ms).collect();
    let stats = cache.stats();
    Ok(Run {
        prefix_caching,
        first_ttft_ms: requests.first().map_or(0.0, |r| r.ttft_ms),
        later_ttft_ms: later.iter().sum::<f64>() / later.len().max(1) as f64,
        kv_bytes: cache.bytes_in_use(),
        kv_bytes_if_unshared: unshared,
        prefix_hits: stats.prefix_hits,
        prefix_misses: stats.prefix_misses,
        requests,
    })
}
