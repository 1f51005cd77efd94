#![cfg(feature = "cuda")]
//! `kvlab bench --device cuda`'s measurement (src/lab/gpu_bench.rs) on a small model:
//! one row per matmul kernel and context, with figures that are finite and positive, and
//! contexts that do not fit are an error. Speed itself is only reported, never asserted
//! (scripts/gpu-check.sh runs `kvlab bench --device cuda` for the figures). Without a GPU
//! the test prints `SKIPPED (no CUDA device): <reason>` and returns.

mod common;

use common::gpu::*;

use kvlab::cuda::roof::RoofSizes;
use kvlab::cuda::{AttentionVersion, GpuModel, MatmulVersion};
use kvlab::device::GpuDtype;
use kvlab::lab::gpu_bench;

#[test]
fn gpu_bench_reports_every_kernel_and_context() {
    let Some(gpu) = gpu_or_skip("gpu_bench_reports_every_kernel_and_context") else {
        return;
    };
    let small = small_models();
    let (_, model) = &small[0];
    let mut gm = GpuModel::upload_on(gpu, model, GpuDtype::F32).unwrap();
    let contexts = [4, 9];
    let roof = gm.gpu().measure_roof(RoofSizes::SMALL).unwrap();
    let report = gpu_bench::run(&mut gm, model, "small", &contexts, 3, roof.clone()).unwrap();
    assert_eq!(report.rows.len(), gpu_bench::PLANS.len() * contexts.len());
    assert_eq!(
        (gm.matmul, gm.attention, gm.fused, gm.graphs),
        (MatmulVersion::V2, AttentionVersion::V2, false, false),
        "the model's kernels are restored"
    );
    assert!(report.launch_latency_us.is_finite() && report.launch_latency_us > 0.0);
    for row in &report.rows {
        for figure in [
            row.prefill_ms,
            row.prefill_flop_fraction,
            row.decode_ms,
            row.naive_step_ms,
            row.hbm_fraction,
            row.launch_roof_tok_s,
            row.launch_fraction,
        ] {
            assert!(figure.is_finite() && figure > 0.0, "{row:?}");
        }
        assert!(
            row.bytes_per_token > 0 && row.launches_per_token > 0.0,
            "{row:?}"
        );
        // The paged and int8 caches are timed on the unfused plans, which can run them.
        for other in [row.paged_decode_ms, row.int8_decode_ms] {
            match other {
                Some(ms) => assert!(!row.fused && ms.is_finite() && ms > 0.0, "{row:?}"),
                None => assert!(row.fused, "{row:?}"),
            }
        }
        if row.graphs {
            assert_eq!(
                row.launches_per_token, 1.0,
                "a graph replay is one launch: {row:?}"
            );
        }
    }
    println!("{}", serde_json::to_string(&report).unwrap());
    let max = model.config.max_position_embeddings;
    assert!(gpu_bench::run(&mut gm, model, "small", &[max], 3, roof.clone()).is_err());
    assert!(gpu_bench::run(&mut gm, model, "small", &[0], 3, roof).is_err());
}

/// Runs on every machine: the bench's size check needs no GPU. A context that leaves no
/// room for the decoded tokens (8160 + 32 + 1 > 8192 for SmolLM2) is an error naming the
/// largest one that fits, never a panic deep in the forward pass.
#[test]
fn bench_sizes_are_checked_without_a_gpu() {
    let max = kvlab::Config::smollm2_135m().max_position_embeddings; // 8192
    assert!(gpu_bench::check_sizes(max, 8159, 32).is_ok());
    let err = gpu_bench::check_sizes(max, 8160, 32)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("context 8160") && err.contains("1 to 8159"),
        "{err}"
    );
    assert!(
        gpu_bench::check_sizes(max, 0, 32).is_err(),
        "an empty prompt"
    );
    assert!(
        gpu_bench::check_sizes(max, 100, 0).is_err(),
        "no decoded tokens"
    );
    assert!(
        gpu_bench::check_sizes(max, usize::MAX, 32).is_err(),
        "an overflowing size is an error, not a wrap-around"
    );
}
