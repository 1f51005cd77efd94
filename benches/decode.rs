//! `cargo bench`: the seed's experiments (§4.1) as criterion benchmarks on the
//! SmolLM2-135M-shaped random model (same shapes as the real one, so the same
//! cost): per-token latency of the naive and the cached path at context 32,
//! 128 and 512, and prefill throughput at 128 and 512 tokens. Then a summary a
//! learner can read (JSON), with the speedups and the memory roofline.
//!
//! Then the same with the f32 weights in panels (the CLI's default layout; the first
//! groups read them in rows, as loaded), with bf16 and with int8 weights, and the prefill
//! figures as fractions of the measured FMA peak (`kvlab::roof`).
//!
//! `cargo bench -- --quick` for a fast pass; `KVLAB_BENCH_SUMMARY=0` skips the summary.

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use kvlab::lab::bench::{self, StepBench};
use kvlab::lab::timing::synthetic_prompt;
use kvlab::{Config, Model};
use std::hint::black_box;
use std::time::Duration;

fn model() -> Model {
    Model::random(Config::smollm2_135m(), 0).expect("SmolLM2's shape is valid")
}

fn per_token(c: &mut Criterion) {
    let model = model();
    let mut group = c.benchmark_group("per_token");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500));
    for context in [32, 128, 512] {
        let mut b = StepBench::new(&model, context).unwrap();
        group.bench_with_input(BenchmarkId::new("cached", context), &context, |bench, _| {
            bench.iter(|| black_box(b.cached_step().unwrap()))
        });
        group.measurement_time(Duration::from_secs(if context >= 512 { 20 } else { 5 }));
        group.bench_with_input(BenchmarkId::new("naive", context), &context, |bench, _| {
            bench.iter(|| black_box(b.naive_step().unwrap()))
        });
    }
    group.finish();
}

fn prefill(c: &mut Criterion) {
    let model = model();
    let mut group = c.benchmark_group("prefill");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for n in [128, 512] {
        let prompt = synthetic_prompt(n, model.config.vocab_size, 0);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |bench, _| {
            bench.iter(|| {
                let mut cache = kvlab::cache::PreallocatedCache::new(&model.config, n).unwrap();
                black_box(
                    model
                        .forward(&prompt, kvlab::model::KvSource::Cache(&mut cache))
                        .unwrap(),
                )
            })
        });
    }
    group.finish();
}

fn summary() {
    if std::env::var("KVLAB_BENCH_SUMMARY").as_deref() == Ok("0") {
        return;
    }
    let model = model();
    let report = bench::run(
        &model,
        "SmolLM2-135M shape, random weights",
        &[128, 512],
        &[32, 128, 512],
        3,
    )
    .expect("bench runs on a valid model");
    // The same report `kvlab bench --random-weights --json` prints (`kvlab bench` draws it
    // as tables: the library returns reports, the binary prints them).
    println!();
    println!(
        "{}",
        serde_json::to_string_pretty(&report).expect("the report serialises")
    );
    // The compute roof for prefill (src/lab/roof.rs), as the memory roof is for decode.
    let peak = kvlab::lab::roof::fma_peak();
    println!(
        "f32 FMA peak: {:.1} GFLOP/s ({:?}, {} threads)",
        peak.gflop_s, peak.isa, peak.threads
    );
    for p in &report.prefill {
        println!(
            "prefill {}: {:.1} GFLOP/s = {:.0}% of the FMA peak",
            p.prompt_len,
            p.gflop_s,
            100.0 * p.gflop_s / peak.gflop_s
        );
    }
}

/// The same decode step and prefill with the f32 weights laid out in panels
/// (`Model::to_panels`, the CLI's default layout): the same bytes, read in order.
fn f32_panels(c: &mut Criterion) {
    in_format(c, "f32-panels", &model().to_panels().unwrap());
}

/// With bf16 weights (`Model::to_bf16`, in panels as the CLI runs them): half the bytes
/// per weight, the same f32 arithmetic.
fn bf16(c: &mut Criterion) {
    in_format(c, "bf16-panels", &model().to_bf16().to_panels().unwrap());
}

/// And with int8 blocks (`Model::to_int8`, Q8_0): 1.125 bytes per weight, each an exact
/// f32 value, the same f32 arithmetic.
fn int8(c: &mut Criterion) {
    in_format(c, "int8", &model().to_int8().unwrap());
}

/// A cached decode step at contexts 1 and 512, and a prefill of 512, with weights in `E`.
fn in_format<E: kvlab::simd::WeightElem>(c: &mut Criterion, name: &str, model: &Model<E>) {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    for context in [1, 512] {
        let seq = kvlab::lab::timing::synthetic_prompt(context + 1, model.config.vocab_size, 0);
        let mut cache = kvlab::cache::PreallocatedCache::new(&model.config, context + 1).unwrap();
        model
            .forward_hidden(
                &seq[..context],
                &mut kvlab::model::KvSource::Cache(&mut cache),
            )
            .unwrap();
        group.bench_with_input(BenchmarkId::new("cached", context), &context, |b, _| {
            b.iter(|| {
                cache.truncate(context);
                black_box(
                    model
                        .forward(&seq[context..], kvlab::model::KvSource::Cache(&mut cache))
                        .unwrap(),
                )
            })
        });
    }
    let prompt = kvlab::lab::timing::synthetic_prompt(512, model.config.vocab_size, 0);
    group.throughput(Throughput::Elements(512));
    group.bench_function("prefill/512", |b| {
        b.iter(|| {
            let mut cache = kvlab::cache::PreallocatedCache::new(&model.config, 512).unwrap();
            black_box(
                model
                    .forward(&prompt, kvlab::model::KvSource::Cache(&mut cache))
                    .unwrap(),
            )
        })
    });
    group.finish();
}

criterion_group!(benches, per_token, prefill, f32_panels, bf16, int8);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    summary();
}
