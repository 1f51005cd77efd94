//! The GPU's other KV caches against their plain twins.
//!
//! - Paged (`--device cuda --cache paged`, src/cuda/paged_cache.rs): the contiguous GPU
//!   cache (bit for bit: attention_paged is attention v2 with another address), the CPU's
//!   paged cache (the same block tables, the same tokens), and itself after a rollback.
//! - Int8 (`--device cuda --kv int8`, src/cuda/int8_cache.rs): the CPU's `--kv int8` cache
//!   (the same codes and scales, logits within the f32 tolerance, the same tokens).
//!
//! Runs on a real GPU, or under kvlab's CPU emulator of one (scripts/test-cuda-cpu.sh); each
//! test prints which.
#![cfg(feature = "cuda")]

mod common;

use common::gpu::*;
use kvlab::backend::{Backend, CacheLayout};
use kvlab::cache::paged::PagedSeq;
use kvlab::cache::{CacheKind, KvPolicy, KvStore};
use kvlab::cuda::{
    AttentionVersion, GpuKvSource, GpuModel, GpuPagedCache, MatmulVersion, RunState,
};
use kvlab::device::GpuDtype;
use kvlab::error::Error;
use kvlab::generate::{Decoder, GenerateOptions, Generation, PathKind};
use kvlab::lab::compare::compare_with;
use kvlab::model::KvSource;
use kvlab::sampler::SamplerConfig;
use kvlab::Model;

/// Logits of `prompt` fed in passes of `chunk` tokens, then of each token of
/// `continuation`, on the GPU's paged cache of `block_size`; with the cache at the end.
fn gpu_paged_logits(
    gm: &GpuModel,
    block_size: usize,
    chunk: usize,
    prompt: &[u32],
    continuation: &[u32],
) -> (Vec<Vec<f32>>, GpuPagedCache) {
    let capacity = prompt.len() + continuation.len();
    let mut st = RunState::new(gm.gpu(), &gm.config, capacity).unwrap();
    let mut cache = GpuPagedCache::new(gm.gpu(), &gm.config, block_size, capacity).unwrap();
    let mut last = Vec::new();
    for pass in prompt.chunks(chunk) {
        last = gm
            .forward_logits(pass, GpuKvSource::Paged(&mut cache), &mut st)
            .unwrap();
    }
    let mut all = vec![last];
    for &t in continuation {
        all.push(
            gm.forward_logits(&[t], GpuKvSource::Paged(&mut cache), &mut st)
                .unwrap(),
        );
    }
    (all, cache)
}

#[test]
fn gpu_paged_equals_contiguous_bitwise() {
    let Some(gpu) = gpu_or_skip("gpu_paged_equals_contiguous_bitwise") else {
        return;
    };
    // attention_paged is attention v2's body reading row j at block_table[j / bs]: on the
    // same rows it gives v2's bits, and every other kernel is shared and row-independent.
    // So the paged cache equals the contiguous one bit for bit, whatever the block size
    // (1: every position its own block; 3: blocks that do not divide the prompt; 64: one
    // block) and however the prompt is split into passes (a pass that crosses blocks).
    for (seed, (name, model)) in small_models().iter().enumerate() {
        let prompt = random_tokens(11, model.config.vocab_size, 60 + seed as u64);
        let continuation = random_tokens(6, model.config.vocab_size, 70 + seed as u64);
        for dtype in [GpuDtype::F32, GpuDtype::Bf16] {
            let gm = GpuModel::upload_on(gpu.clone(), model, dtype)
                .unwrap()
                .with_kernels(MatmulVersion::V2, AttentionVersion::V2);
            let contiguous = gpu_cached_logits(&gm, &prompt, &continuation);
            for (block_size, chunk) in [(1, 11), (3, 4), (4, 5), (64, 11)] {
                let (paged, _) = gpu_paged_logits(&gm, block_size, chunk, &prompt, &continuation);
                for (step, (a, b)) in contiguous.iter().zip(&paged).enumerate() {
                    assert_eq!(
                        bits(a),
                        bits(b),
                        "{name} {dtype:?}, block size {block_size}, passes of {chunk}: step {step}"
                    );
                }
            }
            eprintln!("  {name}, {dtype:?}: paged == contiguous bitwise, 4 block sizes x passes");
        }
    }
}

#[test]
fn gpu_paged_blocks_are_the_cpu_pools() {
    let Some(gpu) = gpu_or_skip("gpu_paged_blocks_are_the_cpu_pools") else {
        return;
    };
    // The GPU asks the CPU's pool logic where each position goes: after the same passes
    // and the same rollback, its block table is the CPU paged cache's, block for block,
    // and its bytes in use are the CPU's.
    let (name, model) = &small_models()[0];
    let config = &model.config;
    let gm = GpuModel::upload_on(gpu, model, GpuDtype::F32).unwrap();
    let prompt = random_tokens(10, config.vocab_size, 90);
    let (bs, capacity) = (4, 16);
    let mut st = RunState::new(gm.gpu(), config, capacity).unwrap();
    let mut dev = GpuPagedCache::new(gm.gpu(), config, bs, capacity).unwrap();
    let mut cpu = PagedSeq::single(config, bs, capacity.div_ceil(bs), false).unwrap();
    for (i, pass) in [&prompt[..3], &prompt[3..9], &prompt[9..]]
        .into_iter()
        .enumerate()
    {
        gm.forward_logits(pass, GpuKvSource::Paged(&mut dev), &mut st)
            .unwrap();
        model.forward(pass, KvSource::Cache(&mut cpu)).unwrap();
        let table = cpu.cache().block_table(cpu.id()).unwrap();
        assert_eq!(dev.block_table(), table, "{name}: pass {i}");
        assert_eq!(dev.len(), cpu.len());
        let bytes = |c: &dyn KvStore| (c.bytes_reserved(), c.bytes_used());
        assert_eq!(
            (dev.bytes_reserved(), dev.bytes_used()),
            bytes(&cpu),
            "{name}: pass {i}"
        );
    }
    // A rollback into the second block gives the third back, on both.
    dev.truncate(5);
    cpu.truncate(5);
    assert_eq!(
        dev.block_table(),
        cpu.cache().block_table(cpu.id()).unwrap()
    );
    assert_eq!(dev.block_table().len(), 2);
    eprintln!("  {name}: block tables equal after 3 passes and a rollback");
}

#[test]
fn gpu_paged_rollback_replays_the_same_bits() {
    let Some(gpu) = gpu_or_skip("gpu_paged_rollback_replays_the_same_bits") else {
        return;
    };
    // Speculative decoding's rollback: forget positions past `keep`, feed the same tokens
    // again, and every logit comes back bit for bit (the freed blocks are taken again and
    // overwritten; nothing stale is read).
    let (name, model) = &small_models()[1];
    let gm = GpuModel::upload_on(gpu, model, GpuDtype::F32)
        .unwrap()
        .with_kernels(MatmulVersion::V2, AttentionVersion::V2);
    let prompt = random_tokens(6, model.config.vocab_size, 91);
    let continuation = random_tokens(7, model.config.vocab_size, 92);
    let (first, mut cache) = gpu_paged_logits(&gm, 3, 6, &prompt, &continuation);
    let keep = prompt.len() + 2; // inside the third block: its tail is written again
    cache.truncate(keep);
    let mut st = RunState::new(gm.gpu(), &gm.config, 13).unwrap();
    for (i, &t) in continuation[2..].iter().enumerate() {
        let again = gm
            .forward_logits(&[t], GpuKvSource::Paged(&mut cache), &mut st)
            .unwrap();
        assert_eq!(bits(&again), bits(&first[3 + i]), "{name}: step {}", 3 + i);
    }
    eprintln!("  {name}: 5 steps after a rollback to {keep} bitwise equal");
}

#[test]
fn gpu_paged_tokens_equal_the_cpus_paged_cache() {
    let Some(gpu) = gpu_or_skip("gpu_paged_tokens_equal_the_cpus_paged_cache") else {
        return;
    };
    // Through the CLI's own code (`kvlab generate --device cuda --cache paged`): greedy
    // tokens equal the CPU's with `--cache paged`, and the KV bytes reserved and used are
    // the CPU pool's (a pool sized for the request, whole blocks in use).
    let opts = GenerateOptions {
        max_new_tokens: 12,
        path: PathKind::Cached,
        sampler: SamplerConfig::default(),
        eos_ids: vec![],
    };
    let layout = CacheLayout {
        kind: CacheKind::Paged,
        block_size: 4,
        policy: KvPolicy::Full,
    };
    let small = small_models();
    for &(name, model) in &with_smollm2(&small) {
        let prompt = random_tokens(9, model.config.vocab_size, 93);
        let cpu_backend = Backend::Cpu(model);
        let cpu = compare_with(
            |path| cpu_backend.decoder(path, layout, prompt.len(), opts.max_new_tokens),
            &prompt,
            &opts,
            1,
        )
        .unwrap()
        .cached;
        let backend =
            Backend::Cuda(GpuModel::upload_on(gpu.clone(), model, GpuDtype::F32).unwrap());
        let cmp = compare_with(
            |path| backend.decoder(path, layout, prompt.len(), opts.max_new_tokens),
            &prompt,
            &opts,
            1,
        )
        .unwrap();
        assert!(cmp.identical, "{name}: GPU naive and paged tokens differ");
        assert_eq!(cmp.cached.generated_ids, cpu.generated_ids, "{name}");
        assert_eq!(
            (cmp.cached.kv_cache_bytes, cmp.cached.kv_cache_bytes_used),
            (cpu.kv_cache_bytes, cpu.kv_cache_bytes_used),
            "{name}: KV bytes"
        );
        eprintln!("  {name}: {:?} on both devices", cpu.generated_ids);
    }
}

#[test]
fn gpu_paged_bad_requests_are_errors() {
    let Some(gpu) = gpu_or_skip("gpu_paged_bad_requests_are_errors") else {
        return;
    };
    let model = Model::random(small_configs()[0].1.clone(), 0).unwrap();
    let config = &model.config;
    let gm = GpuModel::upload_on(gpu.clone(), &model, GpuDtype::F32).unwrap();
    // A block size of 0: one line naming the fix.
    let err = GpuPagedCache::new(&gpu, config, 0, 8).err().unwrap();
    assert!(err.to_string().contains("--block-size"), "{err}");
    // A pool of 2 blocks of 4 is full after 8 positions: the pool's budget error, and the
    // sequence is left as it was.
    let mut st = RunState::new(&gpu, config, 9).unwrap();
    let mut cache = GpuPagedCache::new(&gpu, config, 4, 8).unwrap();
    gm.forward_logits(&[1; 8], GpuKvSource::Paged(&mut cache), &mut st)
        .unwrap();
    let err = gm
        .forward_logits(&[1], GpuKvSource::Paged(&mut cache), &mut st)
        .err()
        .unwrap();
    assert!(matches!(err, Error::BlockBudgetExhausted { .. }), "{err}");
    assert_eq!((cache.len(), cache.block_table().len()), (8, 2));
    // The fused kernels write a contiguous cache: refused, not run.
    let fused = GpuModel::upload_on(gpu.clone(), &model, GpuDtype::F32)
        .unwrap()
        .with_plan(true, false)
        .unwrap();
    let mut cache = GpuPagedCache::new(&gpu, config, 4, 8).unwrap();
    let err = fused
        .forward_logits(&[1, 2], GpuKvSource::Paged(&mut cache), &mut st)
        .err()
        .unwrap();
    assert!(err.to_string().contains("paged"), "{err}");
    // --kv policies stay on the CPU, with the reason.
    let backend = Backend::Cuda(gm);
    let layout = CacheLayout {
        kind: CacheKind::Paged,
        block_size: 4,
        policy: KvPolicy::Int8,
    };
    let err = backend
        .decoder(PathKind::Cached, layout, 3, 2)
        .err()
        .unwrap();
    assert!(err.to_string().contains("--device cpu"), "{err}");
    // An int8 cache that is full: CacheFull, and nothing written.
    let mut int8 = backend_int8_decoder(&backend, 4);
    int8.prefill(&[1, 2, 3, 4]).unwrap();
    let err = int8.step(5).err().unwrap();
    assert!(
        matches!(
            err,
            Error::CacheFull {
                capacity: 4,
                used: 4,
                requested: 1
            }
        ),
        "{err}"
    );
}

fn backend_int8_decoder<'a>(backend: &'a Backend<'a>, capacity: usize) -> Box<dyn Decoder + 'a> {
    let layout = CacheLayout {
        policy: KvPolicy::Int8,
        ..CacheLayout::default()
    };
    backend
        .decoder(PathKind::Cached, layout, capacity, 0)
        .unwrap()
}

/// The int8 cache on the GPU and on the CPU (`backends`, one model): the logits of `prompt`
/// (fed in two passes) and of each token of `continuation`, each within the f32 tolerance
/// (the largest error is returned); then a greedy run of `max_new_tokens` on each through
/// the CLI's own code.
fn int8_against_cpu(
    name: &str,
    (gpu, cpu): (&Backend, &Backend),
    prompt: &[u32],
    continuation: &[u32],
    max_new_tokens: usize,
) -> (f32, Generation, Generation) {
    let layout = CacheLayout {
        policy: KvPolicy::Int8,
        ..CacheLayout::default()
    };
    let steps = |b: &Backend| {
        let mut d = b
            .decoder(PathKind::Cached, layout, prompt.len(), continuation.len())
            .unwrap();
        d.prefill(&prompt[..4]).unwrap();
        let mut all = vec![d.prefill(&prompt[4..]).unwrap()];
        all.extend(continuation.iter().map(|&t| d.step(t).unwrap()));
        all
    };
    let mut worst = 0.0f32;
    for (step, (g, c)) in steps(gpu).iter().zip(&steps(cpu)).enumerate() {
        let (err, tol) = (max_err(g, c), f32_tolerance(c));
        assert!(
            err <= tol,
            "{name}: step {step}: max |GPU - CPU| = {err} > {tol}"
        );
        worst = worst.max(err);
    }
    let opts = GenerateOptions {
        max_new_tokens,
        path: PathKind::Cached,
        sampler: SamplerConfig::default(),
        eos_ids: vec![],
    };
    let greedy = |b: &Backend| {
        compare_with(
            |path| b.decoder(path, layout, prompt.len(), max_new_tokens),
            prompt,
            &opts,
            1,
        )
        .unwrap()
        .cached
    };
    (worst, greedy(gpu), greedy(cpu))
}

/// The f32 tolerance of tests/cuda_paths.rs (`1e-3 * max(1, max |logit|)`), for the same
/// reason: the int8 cache holds the CPU's very codes and scales (checked bit for bit in
/// tests/cuda_quant.rs), so what differs is only the order of attention's sums and CUDA's
/// expf, a few ulps per operation carried through the layers.
fn f32_tolerance(cpu_logits: &[f32]) -> f32 {
    1e-3 * cpu_logits.iter().fold(1.0f32, |m, v| m.max(v.abs()))
}

#[test]
fn gpu_int8_cache_matches_the_cpus() {
    let Some(gpu) = gpu_or_skip("gpu_int8_cache_matches_the_cpus") else {
        return;
    };
    // Logits at every step within the f32 tolerance of the CPU's `--kv int8` cache (a pass
    // split in two included), then the CLI's greedy tokens and KV bytes equal.
    let small = small_models();
    for &(name, model) in &with_smollm2(&small) {
        let prompt = random_tokens(9, model.config.vocab_size, 94);
        let continuation = random_tokens(5, model.config.vocab_size, 95);
        let backend =
            Backend::Cuda(GpuModel::upload_on(gpu.clone(), model, GpuDtype::F32).unwrap());
        let cpu_backend = Backend::Cpu(model);
        let (worst, g, c) =
            int8_against_cpu(name, (&backend, &cpu_backend), &prompt, &continuation, 12);
        assert_eq!(g.generated_ids, c.generated_ids, "{name}: int8 tokens");
        assert_eq!(
            (g.kv_cache_bytes, g.kv_cache_bytes_used),
            (c.kv_cache_bytes, c.kv_cache_bytes_used),
            "{name}: KV bytes"
        );
        eprintln!(
            "  {name}: int8 cache, max |GPU - CPU| = {worst:.2e}; tokens {:?} on both",
            g.generated_ids
        );
    }
}

/// Gemma 3's local layers through the GPU's other caches. Paged: one block table for every
/// layer (`PagedSeq::single_counting`; the CPU's table per layer group is not on the GPU),
/// each local layer reading its window through attention_paged's mask: equal to the
/// contiguous GPU cache bit for bit, whatever the block size and the passes. Int8: the
/// window in attention_int8, within the f32 tolerance of the CPU's `--kv int8` cache, and
/// the same greedy tokens. (The codes are the CPU's only where the GPU's K and V are the
/// CPU's: a value an ulp away that sits on a rounding boundary takes the next code, a step
/// of its head's scale. That is still inside the tolerance, which is why it is the f32 one.)
#[test]
fn gpu_gemma3_paged_and_int8_caches_match_their_twins() {
    let Some(gpu) = gpu_or_skip("gpu_gemma3_paged_and_int8_caches_match_their_twins") else {
        return;
    };
    for (name, model) in gemma_models() {
        let prompt = random_tokens(11, model.config.vocab_size, 96);
        let continuation = random_tokens(6, model.config.vocab_size, 97);
        let gm = GpuModel::upload_on(gpu.clone(), &model, GpuDtype::F32)
            .unwrap()
            .with_kernels(MatmulVersion::V2, AttentionVersion::V2);
        let contiguous = gpu_cached_logits(&gm, &prompt, &continuation);
        for (block_size, chunk) in [(1, 11), (3, 4), (4, 5)] {
            let (paged, _) = gpu_paged_logits(&gm, block_size, chunk, &prompt, &continuation);
            for (step, (a, b)) in contiguous.iter().zip(&paged).enumerate() {
                assert_eq!(
                    bits(a),
                    bits(b),
                    "{name}, block size {block_size}, passes of {chunk}: step {step}"
                );
            }
        }
        let backend = Backend::Cuda(gm);
        let cpu_backend = Backend::Cpu(&model);
        let (worst, g, c) =
            int8_against_cpu(name, (&backend, &cpu_backend), &prompt, &continuation, 10);
        assert_eq!(g.generated_ids, c.generated_ids, "{name}: int8 tokens");
        eprintln!("  {name}: paged == contiguous bitwise (3 block sizes x passes); int8 max |GPU - CPU| = {worst:.2e}, same tokens");
    }
}
