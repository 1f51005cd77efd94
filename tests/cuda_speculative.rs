#![cfg(feature = "cuda")]
//! Greedy speculative decoding on the GPU (src/cuda/speculative.rs): the n-gram drafter
//! proposing, the GPU verifying several rows over its KV cache and rolling it back, must
//! emit exactly GPU plain greedy decoding's tokens, for every draft length, with and
//! without an end-of-sequence id. Without a GPU every test prints
//! `SKIPPED (no CUDA device): <reason>` and returns.

mod common;

use common::gpu::*;

use kvlab::backend::{Backend, CacheLayout};
use kvlab::cuda::speculative::generate_speculative_ngram;
use kvlab::cuda::GpuModel;
use kvlab::device::GpuDtype;
use kvlab::generate::{generate_with, GenerateOptions, PathKind, StopReason};
use kvlab::sampler::SamplerConfig;

/// GPU plain greedy decoding through the CLI's own loop (Backend + generate_with).
fn plain_greedy(backend: &Backend, prompt: &[u32], max_new: usize, eos: &[u32]) -> Vec<u32> {
    let opts = GenerateOptions {
        max_new_tokens: max_new,
        path: PathKind::Cached,
        sampler: SamplerConfig::default(),
        eos_ids: eos.to_vec(),
    };
    let mut decoder = backend
        .decoder(
            PathKind::Cached,
            CacheLayout::default(),
            prompt.len(),
            max_new,
        )
        .unwrap();
    generate_with(decoder.as_mut(), prompt, &opts, |_| {})
        .unwrap()
        .generated_ids
}

#[test]
fn gpu_speculative_greedy_equals_gpu_plain_greedy() {
    let Some(gpu) = gpu_or_skip("gpu_speculative_greedy_equals_gpu_plain_greedy") else {
        return;
    };
    let mut accepted_somewhere = false;
    for (name, model) in small_models() {
        for dtype in [GpuDtype::F32, GpuDtype::Bf16] {
            let backend = Backend::Cuda(GpuModel::upload_on(gpu.clone(), &model, dtype).unwrap());
            let Backend::Cuda(gm) = &backend else {
                unreachable!()
            };
            // A prompt that repeats itself, so the n-gram drafter finds matches and
            // both accepted and rejected drafts happen.
            let mut prompt = random_tokens(6, model.config.vocab_size, 90);
            prompt.extend_from_within(..);
            let max_new = 20;
            let plain = plain_greedy(&backend, &prompt, max_new, &[]);
            assert_eq!(plain.len(), max_new);
            for k in 1..=5 {
                let spec = generate_speculative_ngram(gm, &prompt, max_new, k, 3, &[]).unwrap();
                eprintln!(
                    "  {name} {dtype:?} k = {k}: {} passes, {}/{} drafts accepted",
                    spec.target_forwards, spec.accepted, spec.drafted
                );
                assert_eq!(
                    spec.generated_ids, plain,
                    "{name} {dtype:?} k = {k}: speculative tokens differ from plain greedy"
                );
                assert_eq!(spec.stop_reason, StopReason::MaxNewTokens);
                assert!(spec.target_forwards <= max_new);
                accepted_somewhere |= spec.accepted > 0;

                // Stopping at an end-of-sequence id mid-round: the token plain decoding
                // emits at step 8 (its first occurrence) ends both generations there.
                let eos = plain[7];
                let until = plain.iter().position(|&t| t == eos).unwrap() + 1;
                let plain_eos = plain_greedy(&backend, &prompt, max_new, &[eos]);
                assert_eq!(plain_eos, plain[..until]);
                let spec_eos =
                    generate_speculative_ngram(gm, &prompt, max_new, k, 3, &[eos]).unwrap();
                assert_eq!(
                    spec_eos.generated_ids, plain_eos,
                    "{name} {dtype:?} k = {k}"
                );
                assert_eq!(spec_eos.stop_reason, StopReason::Eos);
            }
        }
    }
    // Random models tend to repeat themselves: the drafter must have been right sometimes,
    // or this test would not exercise acceptance (rejection and rollback happen whenever
    // a round accepts fewer than all its drafts).
    assert!(accepted_somewhere, "no draft was ever accepted");
}

#[test]
fn gpu_speculative_bad_requests_are_errors() {
    let Some(gpu) = gpu_or_skip("gpu_speculative_bad_requests_are_errors") else {
        return;
    };
    let (_, model) = small_models().remove(0);
    let gm = GpuModel::upload_on(gpu, &model, GpuDtype::F32).unwrap();
    assert!(generate_speculative_ngram(&gm, &[], 4, 2, 3, &[]).is_err());
    assert!(generate_speculative_ngram(&gm, &[1, 2], 0, 2, 3, &[]).is_err());
    assert!(generate_speculative_ngram(&gm, &[1, 2], 4, 0, 3, &[]).is_err());
    let too_long = model.config.max_position_embeddings;
    assert!(generate_speculative_ngram(&gm, &[1, 2], too_long, 2, 3, &[]).is_err());
}
