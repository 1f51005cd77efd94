//! `kvlab eval`: what a KV policy costs in accuracy, and what it saves in memory
//! (book: kv-quantization.md, eviction.md; part "Shrinking the cache").
//!
//! The text is run through the model *teacher-forced*: at each position the model sees the
//! true text so far and predicts the next token. Two runs over the same tokens:
//!
//! - the **full cache**, the reference: one prefill of the whole text. Its logits are those
//!   of token-by-token decoding, bit for bit (the cached path's promise; `tests/eval.rs`);
//! - the **policy**: token by token, exactly as generation would feed it, so that a cache
//!   that rounds or forgets does so at every step as it would when generating.
//!
//! Per position `i` (predicting token `i + 1`), with `p` the full cache's next-token
//! distribution and `q` the policy's:
//! - perplexity `= exp(mean(-log q(x_{i+1})))` (the policy's; the full one is reported too);
//! - top-1 agreement: `argmax q == argmax p`;
//! - `KL(p || q) = Σ_v p_v (log p_v - log q_v)`, in nats: what the policy's rounding or
//!   forgetting changes in the whole distribution, not only at the true token.

use crate::cache::build::new_composed_store;
use crate::cache::{
    contiguous_full, new_policy_store, CacheKind, HybridCache, KvPolicy, KvStore,
    PreallocatedCache, RowCodes, DEFAULT_BLOCK_SIZE,
};
use crate::error::{Error, Result};
use crate::generate::forward_hidden_in_passes;
use crate::model::{KvSource, Model};
use crate::simd::WeightElem;
use ndarray::Array2;
use serde::Serialize;

// ANCHOR: report
/// What `kvlab eval` measures for one policy on one text.
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    /// The `--kv` name (`int4`), and a label with its numbers (`int4-g32`).
    pub kv: String,
    pub label: String,
    pub policy: KvPolicy,
    /// Tokens of text evaluated; `n_tokens - 1` of them are predicted.
    pub n_tokens: usize,
    /// The policy's perplexity on the text.
    pub perplexity: f64,
    /// The full cache's perplexity on the same tokens (the reference).
    pub full_perplexity: f64,
    /// Fraction of positions whose most likely next token is the full cache's.
    pub top1_agreement: f64,
    /// Mean over positions of KL(full || policy), in nats.
    pub mean_kl: f64,
    /// Largest KL(full || policy) at one position.
    pub max_kl: f64,
    /// Peak bytes the policy's cache reserved (a real allocation, for `n_tokens` positions).
    pub kv_cache_bytes: usize,
    /// The same for the full f32 cache.
    pub full_kv_cache_bytes: usize,
    /// `kv_cache_bytes / full_kv_cache_bytes`.
    pub kv_bytes_ratio: f64,
    /// True when the policy ran token by token (every policy but the full cache).
    pub token_by_token: bool,
}
// ANCHOR_END: report

/// The log-probabilities of `logits`, in f64 (log-sum-exp with the max subtracted).
fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    let log_z = max + sum.ln();
    logits.iter().map(|&x| x as f64 - log_z).collect()
}

/// Index of the largest logit (the first, on ties).
fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] {
            best = i;
        }
    }
    best
}

/// Rows whose logits one LM-head matmul computes. The head is the largest matrix (Gemma 3:
/// 262,144 x 640, 671 MB in f32): row by row, a 2,000-token text would stream it 2,000
/// times; in chunks, once per chunk. A chunk's logits, `[64, vocab]`, are 64 MiB for Gemma 3.
pub(super) const HEAD_ROWS: usize = 64;

/// The logits of the first `rows` rows of `hidden` (`[n, dim]`), a chunk of [`HEAD_ROWS`]
/// at a time: `(first row, [chunk, vocab])`. Row by row they are [`Model::logits`]'s, bit
/// for bit (row-independent kernels, `src/ops.rs`).
pub(super) fn head_chunks<'a, E: WeightElem>(
    model: &'a Model<E>,
    hidden: &'a [f32],
    rows: usize,
) -> impl Iterator<Item = (usize, Vec<f32>)> + 'a {
    let dim = model.config.hidden_size;
    (0..rows).step_by(HEAD_ROWS).map(move |first| {
        let end = (first + HEAD_ROWS).min(rows);
        (first, model.logits_rows(&hidden[first * dim..end * dim]))
    })
}

/// Accumulates the per-position figures.
#[derive(Default)]
pub(super) struct Totals {
    pub nll: f64,
    pub full_nll: f64,
    pub agree: usize,
    pub kl: f64,
    pub max_kl: f64,
    pub n: usize,
}

impl Totals {
    /// One position: the full cache's logits, the policy's, and the true next token.
    pub fn add(&mut self, full: &[f32], policy: &[f32], next: u32) -> Result<()> {
        let (log_p, log_q) = (log_softmax(full), log_softmax(policy));
        let next = next as usize;
        let kl: f64 = log_p
            .iter()
            .zip(&log_q)
            .map(|(&lp, &lq)| lp.exp() * (lp - lq))
            .sum();
        if !kl.is_finite() || !log_q[next].is_finite() {
            return Err(Error::NonFinite(format!(
                "position {}: the logits are not finite (KL {kl}): the model or cache produced NaN/inf",
                self.n
            )));
        }
        self.nll -= log_q[next];
        self.full_nll -= log_p[next];
        self.agree += usize::from(argmax(full) == argmax(policy));
        self.kl += kl;
        self.max_kl = self.max_kl.max(kl);
        self.n += 1;
        Ok(())
    }
}

// ANCHOR: eval
/// Evaluates `policy` on `ids` (teacher-forced), against the full cache.
pub fn eval<E: WeightElem>(model: &Model<E>, ids: &[u32], policy: KvPolicy) -> Result<EvalReport> {
    let n = ids.len();
    if n < 2 {
        return Err(Error::InvalidArgument(format!(
            "the text is {n} token(s) long: perplexity needs at least 2 (one to read, one to predict); give a longer text"
        )));
    }
    let context = model.config.max_position_embeddings;
    if n > context {
        return Err(Error::PromptTooLong {
            prompt_len: n,
            max_seq_len: context,
        });
    }
    // The reference: the whole text in one prefill, the hidden state of every position.
    let mut full_cache = PreallocatedCache::new(&model.config, n)?;
    let hidden = model.forward_hidden(ids, &mut KvSource::Cache(&mut full_cache))?; // [n, dim]
    let hidden = hidden.as_slice().expect("arrays in kvlab are contiguous");

    // The policy: token by token, as generation feeds it (the full cache needs no second run).
    let mut store = match policy {
        KvPolicy::Full => None,
        // One token per pass: a window per query needs a ring of `window` slots, no
        // room for a longer pass (the `window - 1` before the token, and the token).
        KvPolicy::Sliding {
            codes: RowCodes::F32,
            ..
        } => {
            let window = policy.window().expect("a sliding policy has a window");
            let ring = HybridCache::sliding(&model.config, n, 1, window)?;
            Some(Box::new(ring) as Box<dyn KvStore>)
        }
        // Quantized rows under a window: paged blocks of codes that go back to the pool
        // as the window slides, so the bytes measured are the window's, not the text's.
        KvPolicy::Sliding { .. } => Some(new_composed_store(
            &model.config,
            CacheKind::Paged,
            policy,
            n,
            DEFAULT_BLOCK_SIZE,
        )?),
        _ => Some(new_policy_store(&model.config, policy, n)?),
    };
    let mut totals = Totals::default();
    let mut peak_bytes = store.as_ref().map_or(0, |s| s.bytes_reserved());
    for (first, full_rows) in head_chunks(model, hidden, n - 1) {
        for (r, full) in full_rows.chunks_exact(model.config.vocab_size).enumerate() {
            let i = first + r;
            let policy_logits = match store.as_mut() {
                Some(store) => {
                    let logits = model.forward(&ids[i..=i], KvSource::Cache(store.as_mut()))?;
                    peak_bytes = peak_bytes.max(store.bytes_reserved());
                    Some(logits)
                }
                None => None,
            };
            totals.add(full, policy_logits.as_deref().unwrap_or(full), ids[i + 1])?;
        }
    }
    let full_bytes = full_cache.bytes_reserved();
    let kv_cache_bytes = if store.is_some() {
        peak_bytes
    } else {
        full_bytes
    };
    let count = totals.n as f64;
    Ok(EvalReport {
        kv: policy.name().into(),
        label: policy.label(),
        policy,
        n_tokens: n,
        perplexity: (totals.nll / count).exp(),
        full_perplexity: (totals.full_nll / count).exp(),
        top1_agreement: totals.agree as f64 / count,
        mean_kl: totals.kl / count,
        max_kl: totals.max_kl,
        kv_cache_bytes,
        full_kv_cache_bytes: full_bytes,
        kv_bytes_ratio: kv_cache_bytes as f64 / full_bytes as f64,
        token_by_token: store.is_some(),
    })
}
// ANCHOR_END: eval

// ANCHOR: window_report
/// What `kvlab eval --model-window N` measures: a model with local layers (Gemma 3) run
/// with their window set to `N`, against the same weights with the window they were
/// trained with, both teacher-forced on one text.
#[derive(Debug, Clone, Serialize)]
pub struct WindowEvalReport {
    pub n_tokens: usize,
    /// The local layers' window in config.json (Gemma 3 270M: 512).
    pub trained_window: usize,
    /// The window they ran with instead (one at least as long as the text removes it).
    pub window: usize,
    pub local_layers: usize,
    pub layers: usize,
    pub perplexity: f64,
    /// The model as trained, on the same tokens (the reference).
    pub trained_perplexity: f64,
    pub top1_agreement: f64,
    /// Mean and largest KL(trained || with `window`), in nats.
    pub mean_kl: f64,
    pub max_kl: f64,
    /// Bytes each run's own cache reserved for the text (a ring per local layer).
    pub kv_cache_bytes: usize,
    pub trained_kv_cache_bytes: usize,
}
// ANCHOR_END: window_report

// ANCHOR: eval_window
/// Runs `ids` through `model` as trained and with its local layers' window set to
/// `window`, each in one prefill on its own cache (`cache/hybrid.rs`: a ring per local
/// layer, fed in passes), and compares the next-token distributions position by position.
pub fn eval_model_window(model: &Model, ids: &[u32], window: usize) -> Result<WindowEvalReport> {
    let config = &model.config;
    let layers = config.num_hidden_layers;
    let local_layers = config.local_layers();
    let Some(trained_window) = config.gemma.sliding_window.filter(|_| local_layers > 0) else {
        return Err(Error::InvalidArgument(
            "--model-window sets the window of a model's local layers, and this model has none: impose a window on every layer with --kv window".into(),
        ));
    };
    let n = ids.len();
    if n < 2 || n > config.max_position_embeddings {
        return Err(Error::InvalidArgument(format!(
            "the text is {n} tokens: --model-window needs 2 to {} (the model's context)",
            config.max_position_embeddings
        )));
    }
    let mut changed = config.clone();
    changed.gemma.sliding_window = Some(window);
    let windowed = model.with_config(changed)?;
    // One prefill each, in the passes its cache takes: the hidden state of every position.
    let run = |m: &Model| -> Result<(Array2<f32>, usize)> {
        let mut cache = contiguous_full(&m.config, n)?;
        let hidden = forward_hidden_in_passes(m, &mut *cache, ids, 0)?; // [n, dim]
        Ok((hidden, cache.bytes_reserved()))
    };
    let (trained, trained_bytes) = run(model)?;
    let (other, bytes) = run(&windowed)?;
    let contiguous = "arrays in kvlab are contiguous";
    let trained_chunks = head_chunks(model, trained.as_slice().expect(contiguous), n - 1);
    let other_chunks = head_chunks(&windowed, other.as_slice().expect(contiguous), n - 1);
    let vocab = config.vocab_size;
    let mut totals = Totals::default();
    for ((first, p), (_, q)) in trained_chunks.zip(other_chunks) {
        let rows = p.chunks_exact(vocab).zip(q.chunks_exact(vocab));
        for (r, (p, q)) in rows.enumerate() {
            totals.add(p, q, ids[first + r + 1])?;
        }
    }
    let count = totals.n as f64;
    Ok(WindowEvalReport {
        n_tokens: n,
        trained_window,
        window,
        local_layers,
        layers,
        perplexity: (totals.nll / count).exp(),
        trained_perplexity: (totals.full_nll / count).exp(),
        top1_agreement: totals.agree as f64 / count,
        mean_kl: totals.kl / count,
        max_kl: totals.max_kl,
        kv_cache_bytes: bytes,
        trained_kv_cache_bytes: trained_bytes,
    })
}
// ANCHOR_END: eval_window
