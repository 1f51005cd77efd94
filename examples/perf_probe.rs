//! Quick A/B probe for kernel work on a shared, noisy machine: the SmolLM2-135M
//! shape with random weights (same cost as the real model, no loading), timing
//! prefill 512 and one cached decode step at context 1 and 512. Reports the
//! *minimum* and the median of `reps` runs: on a machine other jobs share, the
//! minimum is the least disturbed run.
//!
//! `cargo run --release --example perf_probe -- [reps] [f32|bf16|roof]`, or `-- kernels`

use kvlab::bench::synthetic_prompt;
use kvlab::kv_cache::KvCache;
use kvlab::model::KvSource;
use kvlab::{Config, Model};
use std::time::Instant;

fn stats(mut ms: Vec<f64>) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    (ms[0], ms[ms.len() / 2])
}

fn time(reps: usize, mut f: impl FnMut()) -> (f64, f64) {
    f();
    stats(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect(),
    )
}

/// `perf_probe kernels`: one matmul per kernel version, minimum of many runs.
fn kernels() {
    use kvlab::attention::{causal_attention, Heads};
    use kvlab::ops::matmul_on;
    use kvlab::simd::Isa;
    let heads = Heads {
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
    };
    for (n, context) in [(1, 512), (512, 0)] {
        let q: Vec<f32> = (0..n * 576).map(|i| (i as f32 * 0.37).sin()).collect();
        let kv: Vec<f32> = (0..(n + context) * 192)
            .map(|i| (i as f32 * 0.11).cos())
            .collect();
        let (min, _) = time(20, || {
            std::hint::black_box(causal_attention(&q, &kv, &kv, context, heads));
        });
        println!(
            "attention, {n} queries over {} keys (one layer): {min:.3} ms",
            n + context
        );
    }
    for (n, d_in, d_out) in [(1, 576, 1536), (1, 576, 49152), (512, 576, 1536)] {
        let x: Vec<f32> = (0..n * d_in).map(|i| (i as f32 * 0.37).sin()).collect();
        let w: Vec<f32> = (0..d_in * d_out).map(|i| (i as f32 * 0.11).cos()).collect();
        let wb: Vec<half::bf16> = w.iter().map(|&v| half::bf16::from_f32(v)).collect();
        let mut out = vec![0.0f32; n * d_out];
        let reps = if n == 1 { 200 } else { 10 };
        for isa in Isa::available() {
            let (f32_min, _) = time(reps, || matmul_on(isa, &x, &w, &mut out, d_in, d_out));
            let (bf16_min, _) = time(reps, || matmul_on(isa, &x, &wb, &mut out, d_in, d_out));
            let gflop = 2.0 * (n * d_in * d_out) as f64 / 1e9;
            let gb = (d_in * d_out * 4) as f64 / 1e9;
            println!(
                "[{n} x {d_in}] x [{d_in} x {d_out}] {isa:?}: f32 {f32_min:.3} ms ({:.1} GFLOP/s, {:.1} GB/s), bf16 {bf16_min:.3} ms",
                gflop / f32_min * 1e3,
                gb / f32_min * 1e3
            );
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("kernels") {
        let peak = kvlab::roof::fma_peak();
        println!(
            "FMA peak {:.1} GFLOP/s ({:?}, {} threads)",
            peak.gflop_s, peak.isa, peak.threads
        );
        return kernels();
    }
    let reps: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let model = Model::random(Config::smollm2_135m(), 0).expect("valid shape");
    if args.get(2).map(String::as_str) == Some("bf16") {
        return run(&model.to_bf16(), reps);
    }
    if args.get(2).map(String::as_str) == Some("roof") {
        let peak = kvlab::roof::fma_peak();
        let bw = kvlab::bench::memory_bandwidth() / 1e9;
        println!(
            "FMA peak {:.1} GFLOP/s ({:?}, {} threads), memory {bw:.1} GB/s",
            peak.gflop_s, peak.isa, peak.threads
        );
    }
    run(&model, reps);
}

fn run<E: kvlab::simd::WeightElem>(model: &Model<E>, reps: usize) {
    let prompt = synthetic_prompt(512, model.config.vocab_size);
    let (min, med) = time(reps.div_ceil(2), || {
        let mut cache = KvCache::new(&model.config, 512);
        model.forward(&prompt, KvSource::Cache(&mut cache)).unwrap();
    });
    println!(
        "prefill 512: min {min:.0} ms ({:.0} tok/s), median {med:.0} ms ({:.0} tok/s)",
        512e3 / min,
        512e3 / med
    );
    for context in [1, 512] {
        let seq = synthetic_prompt(context + 1, model.config.vocab_size);
        let mut cache = KvCache::new(&model.config, context + 1);
        model
            .forward_hidden(&seq[..context], &mut KvSource::Cache(&mut cache))
            .unwrap();
        let (min, med) = time(reps * 4, || {
            cache.truncate(context);
            model
                .forward(&seq[context..], KvSource::Cache(&mut cache))
                .unwrap();
        });
        println!(
            "decode at {context:>3}: min {min:.2} ms ({:.1} tok/s), median {med:.2} ms ({:.1} tok/s)",
            1e3 / min,
            1e3 / med
        );
    }
}
