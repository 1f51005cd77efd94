//! One generation loop for both paths, with the timings the course measures (book: prefill-decode.md):
//! TTFT (首token延迟: prefill + first token), each decode step's latency, TPOT
//! (time per output token), tokens/s, and the KV cache's bytes.

use crate::cache::{KvBytes, KvStore, PreallocatedCache};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::limits::try_vec;
use crate::model::{KvSource, Model};
use crate::sampler::{Sampler, SamplerConfig};
use crate::simd::WeightElem;
use ndarray::Array2;
use serde::Serialize;
use std::time::Instant;

/// Which forward path generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PathKind {
    /// Prefill once into a KV cache, then one token per step.
    Cached,
    /// Recompute the whole sequence at every step (`use_cache=False`).
    Naive,
}

// ANCHOR: paths
/// The state a path keeps between steps, behind the two verbs generation needs.
/// The CPU paths are below; the CUDA paths (`--features cuda`) implement it too;
/// `src/backend.rs` builds the right one for a device, path and cache layout.
pub trait Decoder {
    /// Processes the prompt; returns the logits for the first new token, `[vocab]`.
    fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>>;
    /// Feeds the token just produced; returns the logits for the next one.
    fn step(&mut self, token: u32) -> Result<Vec<f32>>;
    /// KV cache bytes: reserved, and holding live positions.
    fn kv_bytes(&self) -> KvBytes;
}

/// The naive path keeps the token ids, nothing else: every step is a prefill of
/// the whole sequence. Step `t` costs about as much as a prompt of `t` tokens,
/// and its attention is O(t²): O(N³) over a generation (book: naive-vs-cached.md).
/// `E` is the weights' element type (f32, or bf16: `Model::to_bf16`).
pub struct Naive<'a, E: WeightElem = f32> {
    pub model: &'a Model<E>,
    pub seq: Vec<u32>,
}

impl<E: WeightElem> Decoder for Naive<'_, E> {
    fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>> {
        self.seq = prompt.to_vec();
        self.model.forward(&self.seq, KvSource::ThisPass)
    }
    fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        self.seq.push(token);
        self.model.forward(&self.seq, KvSource::ThisPass)
    }
    fn kv_bytes(&self) -> KvBytes {
        KvBytes::default()
    }
}

/// The cached path keeps every layer's K and V: each step runs one token.
/// `C` is the cache layout: preallocated [`PreallocatedCache`] unless told otherwise (`src/cache/`).
pub struct Cached<'a, C: KvStore = PreallocatedCache, E: WeightElem = f32> {
    pub model: &'a Model<E>,
    pub cache: C,
}

impl<C: KvStore, E: WeightElem> Decoder for Cached<'_, C, E> {
    fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>> {
        prefill_in_passes(self.model, &mut self.cache, prompt)
    }
    fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        self.model
            .forward(&[token], KvSource::Cache(&mut self.cache))
    }
    fn kv_bytes(&self) -> KvBytes {
        KvBytes::of(&self.cache)
    }
}

// ANCHOR_END: paths

/// Runs `tokens` through `cache` in one pass, unless the cache takes fewer tokens at once
/// (a window or H2O: book eviction.md; a local layer's ring: `cache/hybrid.rs`); then in
/// passes of what it takes. Returns the final hidden states of the tokens from `keep_from`
/// on, `[tokens.len() - keep_from, dim]`: passes change no row's arithmetic (row-independent
/// kernels), so row for row they are those of one pass.
pub fn forward_hidden_in_passes<E: WeightElem>(
    model: &Model<E>,
    cache: &mut dyn KvStore,
    tokens: &[u32],
    keep_from: usize,
) -> Result<Array2<f32>> {
    if tokens.is_empty() {
        return Err(Error::EmptyPrompt);
    }
    let dim = model.config.hidden_size;
    let keep_from = keep_from.min(tokens.len());
    let mut kept = Vec::new(); // [tokens.len() - keep_from, dim], filled pass by pass
    let mut done = 0;
    while done < tokens.len() {
        let n = (tokens.len() - done).min(cache.max_pass_tokens().max(1));
        let hidden =
            model.forward_hidden(&tokens[done..done + n], &mut KvSource::Cache(&mut *cache))?; // [n, dim]
        let hidden = hidden.as_slice().expect("arrays in kvlab are contiguous");
        let skip = keep_from.saturating_sub(done).min(n);
        kept.extend_from_slice(&hidden[skip * dim..]);
        done += n;
    }
    let rows = tokens.len() - keep_from;
    Ok(Array2::from_shape_vec((rows, dim), kept).expect("every pass gives dim values per row"))
}

/// Runs a prompt through `cache` ([`forward_hidden_in_passes`]) and returns the logits of
/// its last token.
pub fn prefill_in_passes<E: WeightElem>(
    model: &Model<E>,
    cache: &mut dyn KvStore,
    tokens: &[u32],
) -> Result<Vec<f32>> {
    let last = tokens.len().saturating_sub(1);
    let hidden = forward_hidden_in_passes(model, cache, tokens, last)?; // [1, dim]
    Ok(model.logits(hidden.as_slice().expect("contiguous")))
}

#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    pub path: PathKind,
    pub sampler: SamplerConfig,
    /// Token ids that end generation (emitted, then stop).
    pub eos_ids: Vec<u32>,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    Eos,
    MaxNewTokens,
}

/// What a generation produced and how long each part took.
#[derive(Debug, Clone, Serialize)]
pub struct Generation {
    pub path: PathKind,
    pub prompt_ids: Vec<u32>,
    pub generated_ids: Vec<u32>,
    /// Filled in by the caller, who holds the tokenizer.
    pub text: String,
    pub stop_reason: StopReason,
    /// Prefill plus sampling the first token. The clock starts when the decoder exists:
    /// its KV cache is already reserved (see `alloc_ms`).
    pub ttft_ms: f64,
    /// Building the decoder before the prompt: reserving, and zero-filling, the KV cache
    /// for prompt + max_new_tokens (book: cache-layouts.md, §3.3). 0 unless the caller
    /// timed it ([`Generation::with_alloc_ms`]).
    pub alloc_ms: f64,
    /// `alloc_ms + ttft_ms`: the first token as the request sees it.
    pub ttft_with_alloc_ms: f64,
    /// Latency of every token: `[ttft, step 2, step 3, ...]`.
    pub token_ms: Vec<f64>,
    /// Mean latency of the decode steps (tokens after the first).
    pub tpot_ms: f64,
    pub total_ms: f64,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    /// KV cache bytes reserved (0 for the naive path: it keeps nothing between steps).
    pub kv_cache_bytes: usize,
    /// KV cache bytes holding live positions at the end.
    pub kv_cache_bytes_used: usize,
    /// KV cache bytes holding live positions after each token (`kvlab trace`, book: cache-layouts.md).
    pub token_kv_bytes_used: Vec<usize>,
    /// KV cache bytes reserved after each token: flat when preallocated, steps when
    /// growable, a staircase of blocks when paged (`kvlab trace`).
    pub token_kv_bytes_reserved: Vec<usize>,
}

impl Generation {
    /// Adds the time the caller took to build the decoder (and so to reserve its cache).
    pub fn with_alloc_ms(mut self, alloc_ms: f64) -> Generation {
        self.alloc_ms = alloc_ms;
        self.ttft_with_alloc_ms = alloc_ms + self.ttft_ms;
        self
    }
}

/// `make()`, and how long it took in milliseconds: a decoder's construction, which
/// reserves its KV cache, is timed with this.
pub fn timed<T>(make: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let start = Instant::now();
    let made = make()?;
    Ok((made, start.elapsed().as_secs_f64() * 1e3))
}

/// Checks a request against the model's context before any work is done.
pub fn check_request(config: &Config, prompt: &[u32], max_new_tokens: usize) -> Result<()> {
    let max_seq_len = config.max_position_embeddings;
    if prompt.is_empty() {
        return Err(Error::EmptyPrompt);
    }
    if prompt.len() > max_seq_len {
        return Err(Error::PromptTooLong {
            prompt_len: prompt.len(),
            max_seq_len,
        });
    }
    // checked_add: a max_new_tokens near usize::MAX must not wrap into a small sum.
    if prompt
        .len()
        .checked_add(max_new_tokens)
        .is_none_or(|total| total > max_seq_len)
    {
        return Err(Error::ContextOverflow {
            prompt_len: prompt.len(),
            max_new_tokens,
            max_seq_len,
        });
    }
    if max_new_tokens == 0 {
        return Err(Error::InvalidArgument(
            "max_new_tokens must be at least 1".into(),
        ));
    }
    Ok(())
}

// ANCHOR: generate
/// The generation loop, for any decoder (CPU or GPU, naive or cached).
pub fn generate_with(
    decoder: &mut dyn Decoder,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut on_token: impl FnMut(u32),
) -> Result<Generation> {
    opts.sampler.validate()?;
    if prompt.is_empty() {
        return Err(Error::EmptyPrompt);
    }
    let mut sampler = Sampler::new(opts.sampler);
    // Sized by the request: reserved fallibly (a decoder that skipped
    // `check_request` could be asked for a billion tokens).
    let n = opts.max_new_tokens;
    let mut generated = try_vec(n, "the generated token ids")?;
    let mut token_ms = try_vec(n, "the per-token timings")?;
    let mut token_kv_bytes_used = try_vec(n, "the per-token KV trace")?;
    let mut token_kv_bytes_reserved = try_vec(n, "the per-token KV trace")?;

    // Prefill: the whole prompt in one pass. Its end is the first token: TTFT.
    let start = Instant::now();
    let logits = decoder.prefill(prompt)?;
    let mut token = sampler.sample(&logits)?;
    token_ms.push(start.elapsed().as_secs_f64() * 1e3);
    let bytes = decoder.kv_bytes();
    token_kv_bytes_used.push(bytes.used);
    token_kv_bytes_reserved.push(bytes.reserved);
    generated.push(token);
    on_token(token);

    // Decode: one token per step, each fed back in.
    let mut stop_reason = StopReason::MaxNewTokens;
    loop {
        if opts.eos_ids.contains(&token) {
            stop_reason = StopReason::Eos;
            break;
        }
        if generated.len() == opts.max_new_tokens {
            break;
        }
        let step_start = Instant::now();
        let logits = decoder.step(token)?;
        token = sampler.sample(&logits)?;
        token_ms.push(step_start.elapsed().as_secs_f64() * 1e3);
        let bytes = decoder.kv_bytes();
        token_kv_bytes_used.push(bytes.used);
        token_kv_bytes_reserved.push(bytes.reserved);
        generated.push(token);
        on_token(token);
    }
    let total_ms = start.elapsed().as_secs_f64() * 1e3;
    // ANCHOR_END: generate

    let ttft_ms = token_ms[0];
    let decode_ms: f64 = token_ms[1..].iter().sum();
    let n_decode = token_ms.len() - 1;
    let KvBytes {
        reserved: kv_cache_bytes,
        used: kv_cache_bytes_used,
    } = decoder.kv_bytes();
    Ok(Generation {
        path: opts.path,
        prompt_ids: prompt.to_vec(),
        generated_ids: generated,
        text: String::new(),
        stop_reason,
        ttft_ms,
        alloc_ms: 0.0,
        ttft_with_alloc_ms: ttft_ms,
        tpot_ms: if n_decode > 0 {
            decode_ms / n_decode as f64
        } else {
            0.0
        },
        total_ms,
        prefill_tok_s: prompt.len() as f64 / (ttft_ms / 1e3),
        decode_tok_s: if n_decode > 0 {
            n_decode as f64 / (decode_ms / 1e3)
        } else {
            0.0
        },
        token_ms,
        kv_cache_bytes,
        kv_cache_bytes_used,
        token_kv_bytes_used,
        token_kv_bytes_reserved,
    })
}
