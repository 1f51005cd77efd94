//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod cli;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod matmul;
pub mod server;

use kvlab::cache::{KvStore, PreallocatedCache};
use kvlab::model::KvSource;
use kvlab::simd::WeightElem;
use kvlab::{Config, Model};
use std::path::Path;

/// The real model's folder, as `bash scripts/fetch-smollm2.sh` (run by the README's test
/// command) leaves it.
pub const MODEL_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/smollm2-135m-instruct");

/// Whether a real-model test can run: `true` when the model is there; `false`, with a
/// visible SKIPPED line, only when `KVLAB_ALLOW_MISSING_MODEL=1` asks for it; otherwise
/// the test fails and says how to fetch the model (a missing model must not pass silently).
pub fn real_model_present() -> bool {
    if Path::new(MODEL_DIR).join("config.json").exists() {
        return true;
    }
    if std::env::var("KVLAB_ALLOW_MISSING_MODEL").as_deref() == Ok("1") {
        eprintln!("SKIPPED: {MODEL_DIR} missing and KVLAB_ALLOW_MISSING_MODEL=1");
        return false;
    }
    panic!("{MODEL_DIR} is missing: run `bash scripts/fetch-smollm2.sh` first (the README's test command does)");
}

/// Gemma 3 270M, imported by `bash scripts/fetch-gemma3.sh`.
pub const GEMMA_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/gemma-3-270m");

/// [`real_model_present`] for Gemma 3 270M.
pub fn gemma_present() -> bool {
    if Path::new(GEMMA_DIR).join("config.json").exists() {
        return true;
    }
    if std::env::var("KVLAB_ALLOW_MISSING_MODEL").as_deref() == Ok("1") {
        eprintln!("SKIPPED: {GEMMA_DIR} missing and KVLAB_ALLOW_MISSING_MODEL=1");
        return false;
    }
    panic!("{GEMMA_DIR} is missing: run `bash scripts/fetch-gemma3.sh` first (the README's test command does)");
}

/// A small Llama-shaped config.
pub fn tiny_config(
    layers: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    vocab: usize,
) -> Config {
    Config {
        hidden_size: n_heads * head_dim,
        intermediate_size: 3 * n_heads * head_dim,
        num_hidden_layers: layers,
        num_attention_heads: n_heads,
        num_key_value_heads: Some(n_kv_heads),
        head_dim: None,
        vocab_size: vocab,
        max_position_embeddings: 256,
        tie_word_embeddings: true,
        ..Config::smollm2_135m()
    }
}

/// A small Gemma-3-shaped config: `tiny_config`'s sizes, GeGLU, QK-norm, sandwich norms,
/// a scaled embedding, and `layer_types` (true = local, with `window` positions).
pub fn tiny_gemma_config(
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    vocab: usize,
    window: usize,
    local: &[bool],
) -> Config {
    let mut c = tiny_config(local.len(), n_heads, n_kv_heads, head_dim, vocab);
    c.head_dim = Some(head_dim);
    c.model_type = kvlab::config::GEMMA3.into();
    c.rope_theta = 1_000_000.0;
    c.gemma = kvlab::config::GemmaSettings {
        hidden_activation: Some("gelu_pytorch_tanh".into()),
        query_pre_attn_scalar: Some(head_dim as f64),
        sliding_window: Some(window),
        layer_types: Some(
            local
                .iter()
                .map(|&l| {
                    if l {
                        kvlab::config::SLIDING
                    } else {
                        kvlab::config::FULL
                    }
                    .to_string()
                })
                .collect(),
        ),
        rope_local_base_freq: Some(10_000.0),
        ..Default::default()
    };
    c.validate().unwrap();
    c
}

/// Logits after each prefix `prompt + continuation[..i]`, i = 0..=len, on the cached path:
/// one prefill, then one token per step.
pub fn cached_step_logits<E: WeightElem>(
    model: &Model<E>,
    prompt: &[u32],
    continuation: &[u32],
) -> Vec<Vec<f32>> {
    let mut cache =
        PreallocatedCache::new(&model.config, prompt.len() + continuation.len()).unwrap();
    step_logits_on(model, &mut cache, prompt, continuation)
}

/// The same on any cache: the prompt in one pass, then each continuation token alone.
pub fn step_logits_on<E: WeightElem>(
    model: &Model<E>,
    cache: &mut dyn KvStore,
    prompt: &[u32],
    continuation: &[u32],
) -> Vec<Vec<f32>> {
    let mut all = vec![model.forward(prompt, KvSource::Cache(cache)).unwrap()];
    for &t in continuation {
        all.push(model.forward(&[t], KvSource::Cache(cache)).unwrap());
    }
    all
}

/// The same logits on the naive path: the whole prefix, recomputed every time.
pub fn naive_step_logits<E: WeightElem>(
    model: &Model<E>,
    prompt: &[u32],
    continuation: &[u32],
) -> Vec<Vec<f32>> {
    let mut seq = prompt.to_vec();
    let mut all = vec![model.forward(&seq, KvSource::ThisPass).unwrap()];
    for &t in continuation {
        seq.push(t);
        all.push(model.forward(&seq, KvSource::ThisPass).unwrap());
    }
    all
}

/// The batched twin test (tests/batch.rs, tests/gemma_paths.rs): `seqs` advance through one
/// paged pool (prefix-cached or not) in random groups of random chunks drawn from `rng`,
/// and every chunk's last-row logits must be, bit for bit, what the sequence gets alone at
/// that position; the pool's invariants hold after every pass.
pub fn batched_equals_solo<E: WeightElem>(
    model: &Model<E>,
    seqs: &[Vec<u32>],
    block_size: usize,
    prefix_caching: bool,
    rng: &mut kvlab::rng::Rng,
) -> Result<(), proptest::test_runner::TestCaseError> {
    use kvlab::cache::source::PagedBatch;
    use kvlab::cache::{PagedCache, SeqId};
    use proptest::test_runner::TestCaseError;
    let solo: Vec<Vec<Vec<f32>>> = seqs
        .iter()
        .map(|t| cached_step_logits(model, &t[..1], &t[1..]))
        .collect();
    let total: usize = seqs.iter().map(Vec::len).sum();
    // A run of blocks per layer group's table (a model with local layers has several).
    let blocks = kvlab::cache::paged::blocks_for_sequence(&model.config, total, block_size) + 12;
    let mut cache = PagedCache::new(&model.config, block_size, blocks, prefix_caching).unwrap();
    let ids: Vec<SeqId> = seqs
        .iter()
        .map(|t| cache.add_sequence_with_prefix(t).0)
        .collect();
    let mut done: Vec<usize> = ids.iter().map(|&id| cache.seq_len(id).unwrap()).collect();
    while done.iter().zip(seqs).any(|(&d, t)| d < t.len()) {
        let (mut group, mut chunks) = (Vec::new(), Vec::<&[u32]>::new());
        for (i, t) in seqs.iter().enumerate() {
            let left = t.len() - done[i];
            if left == 0 || rng.next_u64().is_multiple_of(3) {
                continue;
            }
            let rows = 1 + rng.next_u64() as usize % left;
            group.push(i);
            chunks.push(&t[done[i]..done[i] + rows]);
        }
        if group.is_empty() {
            continue;
        }
        let want = vec![true; group.len()];
        let mut batch = PagedBatch {
            cache: &mut cache,
            seqs: group.iter().map(|&i| ids[i]).collect(),
        };
        let logits = model.forward_batch(&chunks, &mut batch, &want).unwrap();
        for ((&i, chunk), logits) in group.iter().zip(&chunks).zip(logits) {
            done[i] += chunk.len();
            let (got, want) = (
                bits(&[logits.unwrap()]),
                bits(&solo[i][done[i] - 1..done[i]]),
            );
            if got != want {
                return Err(TestCaseError::fail(format!(
                    "sequence {i}: batched logits at position {} differ from its solo run",
                    done[i] - 1
                )));
            }
        }
        cache.check_invariants().map_err(TestCaseError::fail)?;
    }
    Ok(())
}

/// Bit patterns, so that comparisons are exact (and -0.0 != 0.0, NaN == NaN).
pub fn bits(rows: &[Vec<f32>]) -> Vec<Vec<u32>> {
    rows.iter()
        .map(|r| r.iter().map(|v| v.to_bits()).collect())
        .collect()
}

/// Token ids from a JSON array (the reference fixtures, `kvlab ... --json`).
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of token ids")
        .iter()
        .map(|x| x.as_u64().expect("a token id") as u32)
        .collect()
}

/// Shapes whose every matrix splits into int8 blocks: the hidden size and the MLP's a
/// multiple of 32 (a block's inputs), every output width a multiple of 16 (its columns).
pub fn block_config_strategy() -> impl proptest::strategy::Strategy<Value = kvlab::Config> {
    use proptest::prelude::*;
    (
        1usize..=2,
        1usize..=3,
        1usize..=3,
        1usize..=2,
        2usize..=20,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(layers, n_kv_heads, group, half_head, vocab_blocks, tied, bias)| {
                let head_dim = 16 * half_head;
                // hidden = n_heads x head_dim must be a multiple of 32.
                let group = if (n_kv_heads * group * half_head) % 2 == 1 {
                    2 * group
                } else {
                    group
                };
                let mut c = tiny_config(
                    layers,
                    n_kv_heads * group,
                    n_kv_heads,
                    head_dim,
                    16 * vocab_blocks,
                );
                c.tie_word_embeddings = tied;
                c.attention_bias = bias;
                c
            },
        )
}
