//! `kvlab eval` (src/lab/eval.rs): the full-cache reference is a prefill, which must give the
//! logits of token-by-token decoding bit for bit; the metrics behave (a policy identical to
//! the full cache scores KL 0 and agreement 1); and the full cache's perplexity on SmolLM2
//! is the one Hugging Face transformers computes on the same weights and tokens.
//!
//! The transformers figure is pinned in tests/fixtures/eval/apache-2.0-head.hf.json, made by
//! `python scripts/hf_perplexity.py --ids-json tests/fixtures/eval/apache-2.0-head.kvlab-ids.json`
//! (torch 2.15.0, transformers 5.24.0, float32, eager attention, CPU; a venv outside the repo).

mod common;

use common::{bits, real_model_present, tiny_config, MODEL_DIR};
use kvlab::cache::{KvPolicy, PreallocatedCache};
use kvlab::lab::eval::eval;
use kvlab::model::KvSource;
use kvlab::tokenizer::Tokenizer;
use kvlab::{loader, Model};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(30))]

    /// The reference's shortcut: one prefill's logits at every position (final norm and LM
    /// head applied to each row of the hidden states) are those of feeding the text one
    /// token at a time, bit for bit.
    #[test]
    fn prefill_logits_equal_token_by_token(
        layers in 1usize..=2,
        n_kv_heads in 1usize..=3,
        group in 1usize..=3,
        seed in 0u64..1000,
        text in prop::collection::vec(0u32..32, 2..40),
    ) {
        let config = tiny_config(layers, n_kv_heads * group, n_kv_heads, 8, 32);
        let model = Model::random(config.clone(), seed).unwrap();
        let mut cache = PreallocatedCache::new(&config, text.len()).unwrap();
        let hidden = model.forward_hidden(&text, &mut KvSource::Cache(&mut cache)).unwrap();
        let prefill: Vec<Vec<f32>> = (0..text.len())
            .map(|i| model.logits(hidden.row(i).as_slice().unwrap()))
            .collect();
        let mut cache = PreallocatedCache::new(&config, text.len()).unwrap();
        let stepwise: Vec<Vec<f32>> = text
            .iter()
            .map(|&t| model.forward(&[t], KvSource::Cache(&mut cache)).unwrap())
            .collect();
        prop_assert_eq!(bits(&prefill), bits(&stepwise));
    }
}

/// The full cache scores itself: KL 0, agreement 1, its own perplexity; a quantized cache
/// scores a KL above 0, and fewer bytes.
#[test]
fn metrics_of_the_full_cache_and_of_int8() {
    let config = tiny_config(2, 4, 2, 16, 64);
    let model = Model::random(config, 3).unwrap();
    let text: Vec<u32> = (0..48).map(|i| (i * 7 + 3) % 64).collect();
    let full = eval(&model, &text, KvPolicy::Full).unwrap();
    assert_eq!(
        (full.n_tokens, full.top1_agreement, full.mean_kl),
        (48, 1.0, 0.0)
    );
    assert_eq!(full.perplexity, full.full_perplexity);
    assert!(!full.token_by_token);
    let int8 = eval(&model, &text, KvPolicy::Int8).unwrap();
    assert!(int8.token_by_token);
    assert_eq!(int8.full_perplexity, full.perplexity);
    assert!(int8.mean_kl > 0.0 && int8.mean_kl < 1e-2, "{int8:?}");
    assert!(int8.kv_cache_bytes < full.kv_cache_bytes / 3, "{int8:?}");
}

#[test]
fn a_text_of_one_token_is_refused() {
    let model = Model::random(tiny_config(1, 2, 1, 8, 32), 0).unwrap();
    let err = eval(&model, &[5], KvPolicy::Full).unwrap_err().to_string();
    assert!(err.contains("at least 2"), "{err}");
}

/// SmolLM2 on 80 lines of the Apache-2.0 licence: kvlab's tokens are the pinned ones, and its
/// full-cache perplexity is transformers' on those tokens, to 1e-5 relative.
///
/// Why 1e-5: both compute every logit in f32, in different summation orders (kvlab: fixed
/// 16-lane chains; PyTorch: its BLAS), so logits differ by a few ulps, ~1e-6 relative; the
/// mean log-probability over 872 predictions then differs by ~1e-6 absolute, which moves
/// the perplexity by ~1e-6 relative. Observed: 13.7997686 vs 13.7997737, 3.7e-7. A bug (a
/// wrong RoPE, norm epsilon, off-by-one in the shift) moves it by percents.
///
/// transformers' *own* tokenizer splits this text into 876 tokens, not 873: the Python
/// `tokenizers` runs the pre-tokenizer regex with Oniguruma, kvlab's Rust build with
/// fancy-regex, and they split runs of spaces before a digit differently ("\n\n   1.").
/// The fixture's `hf_tokens` records that figure too; the model comparison uses the same ids.
#[test]
fn full_cache_perplexity_matches_transformers() {
    if !real_model_present() {
        return;
    }
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/eval");
    let text = std::fs::read_to_string(format!("{dir}/apache-2.0-head.txt")).unwrap();
    let pinned_ids: Vec<u32> = serde_json::from_str(
        &std::fs::read_to_string(format!("{dir}/apache-2.0-head.kvlab-ids.json")).unwrap(),
    )
    .unwrap();
    let hf: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{dir}/apache-2.0-head.hf.json")).unwrap(),
    )
    .unwrap();
    let tokenizer = Tokenizer::from_dir(std::path::Path::new(MODEL_DIR)).unwrap();
    let ids = tokenizer.encode(&text).unwrap();
    assert_eq!(
        ids, pinned_ids,
        "kvlab's tokenization of the fixture changed"
    );
    let model = loader::load_model(std::path::Path::new(MODEL_DIR)).unwrap();
    let report = eval(&model, &ids, KvPolicy::Full).unwrap();
    let expected = hf["given_ids"]["perplexity"].as_f64().unwrap();
    assert_eq!(
        hf["given_ids"]["n_tokens"].as_u64().unwrap() as usize,
        report.n_tokens
    );
    let relative = (report.perplexity - expected).abs() / expected;
    assert!(
        relative < 1e-5,
        "kvlab {} vs transformers {expected}: {relative:e} relative",
        report.perplexity
    );
}
