#![cfg(feature = "cuda")]
//! The CUDA kernels, checked two ways (run with `--nocapture --test-threads=1` to see every
//! kernel's error and timing; scripts/gpu-check.sh does):
//!
//! 1. **The kernels compile** (no GPU needed): every `kernels/*.cu` through NVRTC for
//!    compute_80 and compute_90. A real check on any machine: it FAILS unless NVRTC is set
//!    up (`bash scripts/setup-nvrtc.sh`, then its `export LD_LIBRARY_PATH=...`), unless
//!    `KVLAB_SKIP_NVRTC=1`.
//! 2. **Each kernel against its CPU twin**, the llm.c dev/cuda way: validate at several
//!    sizes (including ones that are not multiples of the block or tile size), and only
//!    then time the largest.
//!
//! Without a GPU every test of kind 2 prints `SKIPPED (no CUDA device): <reason>` and
//! returns. The forward pass is checked in tests/cuda_paths.rs, the speed in
//! tests/cuda_bench.rs and `kvlab bench --device cuda`.

mod common;

use common::gpu::*;

use kvlab::attention::{attention_observed, attention_over, causal_attention, Heads};
use kvlab::backend::Backend;
use kvlab::cache::rows::{Contiguous, Evicted, Paged};
use kvlab::cache::PreallocatedCache;
use kvlab::cuda::weights::{GpuMatrix, RopeTables};
use kvlab::cuda::{nvrtc, AttentionVersion, GpuKvCache, MatmulVersion};
use kvlab::device::{Device, GpuDtype};
use kvlab::error::Error;
use kvlab::mask::Window;
use kvlab::{ops, Model};

// =============================================================================================
// 1. The kernels compile (no GPU needed)
// =============================================================================================

#[test]
fn kernels_compile_with_nvrtc() {
    if let Err(e) = nvrtc::check_nvrtc() {
        if std::env::var("KVLAB_SKIP_NVRTC").as_deref() == Ok("1") {
            eprintln!("kernels_compile_with_nvrtc: SKIPPED (KVLAB_SKIP_NVRTC=1): {e}");
            return;
        }
        panic!("{e}\n(set KVLAB_SKIP_NVRTC=1 to skip this check on a machine without NVRTC)");
    }
    let (major, minor) = nvrtc::nvrtc_version().unwrap();
    eprintln!(
        "NVRTC {major}.{minor}, CUDA headers from {:?}",
        nvrtc::cuda_include_dir()
    );
    let mut failures = Vec::new();
    for kernel in nvrtc::KERNELS {
        for arch in ["compute_80", "compute_90"] {
            match nvrtc::compile(kernel, arch) {
                Ok(ptx) => {
                    let text = ptx.to_src();
                    for f in kernel.functions {
                        if !text.contains(&format!(".entry {f}(")) {
                            failures.push(format!(
                                "kernels/{} ({arch}): no entry point `{f}` in the PTX",
                                kernel.file
                            ));
                        }
                    }
                    eprintln!(
                        "  kernels/{:<13} {arch}: ok, {:>6} bytes of PTX, {:?}",
                        kernel.file,
                        text.len(),
                        kernel.functions
                    );
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
    }
    // The fallback when NVRTC is newer than the driver: machine code for one GPU.
    for kernel in nvrtc::KERNELS {
        for sm in ["sm_80", "sm_90"] {
            match nvrtc::compile_cubin(kernel, sm) {
                Ok(cubin) => {
                    assert_eq!(&cubin[..4], b"\x7fELF", "a CUBIN is an ELF file");
                    eprintln!(
                        "  kernels/{:<13} {sm}: ok, {:>6} bytes of CUBIN",
                        kernel.file,
                        cubin.len()
                    );
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_kernel_file_is_compiled() {
    // A new kernels/*.cu must be added to nvrtc::KERNELS, or it is never compiled or tested.
    // From the repository root (where scripts/gpu-check.sh runs a carried test binary), or
    // from the source tree this binary was built from.
    let dir = [
        std::path::PathBuf::from("kernels"),
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels"),
    ]
    .into_iter()
    .find(|d| d.is_dir())
    .expect("no kernels/ folder: run from the repository root");
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".cu"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = nvrtc::KERNELS.iter().map(|k| k.file.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "kernels/*.cu and nvrtc::KERNELS disagree");
}

#[test]
fn no_gpu_is_an_error_not_a_panic() {
    // Runs everywhere. With a GPU, uploading works; without one, it is an Error::Cuda whose
    // message says what to do (and the CLI prints it and exits 1).
    let model = Model::random(small_configs()[0].1.clone(), 0).unwrap();
    match Backend::new(Device::Cuda, &model, GpuDtype::F32) {
        Ok(backend) => eprintln!("GPU present: {}", backend.describe()),
        Err(Error::Cuda(msg)) => {
            eprintln!("no_gpu_is_an_error_not_a_panic: SKIPPED (no CUDA device): {msg}");
            assert!(
                msg.contains("--device cpu") || msg.contains("setup-nvrtc.sh"),
                "the error must say what to do: {msg}"
            );
        }
        Err(other) => panic!("expected Error::Cuda, got {other}"),
    }
}

// =============================================================================================
// 2. Each kernel against its CPU twin: validate at every size, then time
// =============================================================================================

#[test]
fn gpu_embedding_matches_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_embedding_matches_cpu") else {
        return;
    };
    let sizes = [(97, 48, 5), (1000, 576, 33), (49152, 576, 128)]; // (vocab, dim, n)
    for (vocab, dim, n) in sizes {
        let table = random(vocab * dim, 1.0, 1);
        let mut tokens = random_tokens(n, vocab, 2);
        tokens[0] = 0;
        tokens[n - 1] = vocab as u32 - 1; // both ends of the table
        for dtype in [GpuDtype::F32, GpuDtype::Bf16] {
            let expect_table = if dtype == GpuDtype::Bf16 {
                round_bf16(&table)
            } else {
                table.clone()
            };
            let cpu: Vec<f32> = tokens
                .iter()
                .flat_map(|&t| expect_table[t as usize * dim..][..dim].to_vec())
                .collect();
            let t = GpuMatrix::from_host(&gpu, &table, vocab, dim, dtype).unwrap();
            let mut out = gpu.zeros::<f32>(n * dim).unwrap();
            let mut ids = gpu.zeros::<u32>(n).unwrap();
            gpu.embedding(&mut out.as_view_mut(), &t, &tokens, &mut ids.as_view_mut())
                .unwrap();
            let got = gpu.download(&out).unwrap();
            eprintln!("  embedding {dtype:?} vocab {vocab} dim {dim} n {n}: exact");
            assert_eq!(bits(&got), bits(&cpu), "a copy must be exact");
            // Gemma's √dim scale: one f32 product per element, the CPU's, so exact too.
            let scale = (dim as f32).sqrt();
            gpu.embedding_ids(&mut out.as_view_mut(), &t, &ids.as_view(), scale)
                .unwrap();
            let scaled: Vec<f32> = cpu.iter().map(|v| v * scale).collect();
            assert_eq!(bits(&gpu.download(&out).unwrap()), bits(&scaled));
            // An id outside the table is refused before anything runs.
            let err = gpu.embedding(
                &mut out.as_view_mut(),
                &t,
                &[vocab as u32],
                &mut ids.as_view_mut(),
            );
            assert!(matches!(err, Err(Error::TokenOutOfRange { .. })));
        }
    }
    if !timing_wanted() {
        return;
    }
    let (vocab, dim, n) = sizes[2];
    let t = GpuMatrix::from_host(
        &gpu,
        &random(vocab * dim, 1.0, 1),
        vocab,
        dim,
        GpuDtype::F32,
    )
    .unwrap();
    let tokens = random_tokens(n, vocab, 2);
    let mut out = gpu.zeros::<f32>(n * dim).unwrap();
    let mut ids = gpu.zeros::<u32>(n).unwrap();
    let us = time_us(&gpu, || {
        gpu.embedding(&mut out.as_view_mut(), &t, &tokens, &mut ids.as_view_mut())
            .unwrap()
    });
    eprintln!("  embedding n {n} dim {dim}: {us:.1} µs");
}

#[test]
fn gpu_rmsnorm_matches_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_rmsnorm_matches_cpu") else {
        return;
    };
    // Tolerance: the sum of squares is added in another order (~dim * 2^-24 relative in the
    // worst case, far less in practice), then one sqrt and two products: 1e-5 relative.
    let sizes = [(1, 7), (3, 64), (5, 257), (33, 576), (128, 4096)]; // (n, dim)
    for (n, dim) in sizes {
        let x = random(n * dim, 3.0, 3);
        let w = random(dim, 1.0, 4)
            .iter()
            .map(|v| 1.0 + v * 0.2)
            .collect::<Vec<_>>();
        let mut cpu = vec![0.0; n * dim];
        ops::rmsnorm(&x, &w, 1e-5, &mut cpu);
        let (xd, wd) = (gpu.upload(&x).unwrap(), gpu.upload(&w).unwrap());
        let mut out = gpu.zeros::<f32>(n * dim).unwrap();
        gpu.rmsnorm(
            &mut out.as_view_mut(),
            &xd.as_view(),
            &wd.as_view(),
            1e-5,
            n,
        )
        .unwrap();
        let got = gpu.download(&out).unwrap();
        assert_close(&format!("rmsnorm n {n} dim {dim}"), &got, &cpu, 1e-5);
        // In place (Gemma 3's QK-norm): the same body, so the same bits.
        let mut inplace = gpu.upload(&x).unwrap();
        gpu.rmsnorm_inplace(&mut inplace.as_view_mut(), &wd.as_view(), 1e-5, n)
            .unwrap();
        assert_eq!(
            bits(&gpu.download(&inplace).unwrap()),
            bits(&got),
            "rmsnorm_inplace n {n} dim {dim}"
        );
    }
    if !timing_wanted() {
        return;
    }
    let (n, dim) = sizes[4];
    let (xd, wd) = (
        gpu.upload(&random(n * dim, 3.0, 3)).unwrap(),
        gpu.upload(&random(dim, 1.0, 4)).unwrap(),
    );
    let mut out = gpu.zeros::<f32>(n * dim).unwrap();
    let us = time_us(&gpu, || {
        gpu.rmsnorm(
            &mut out.as_view_mut(),
            &xd.as_view(),
            &wd.as_view(),
            1e-5,
            n,
        )
        .unwrap()
    });
    eprintln!(
        "  rmsnorm n {n} dim {dim}: {us:.1} µs, {:.0} GB/s",
        (2 * n * dim * 4) as f64 / us / 1e3
    );
}

#[test]
fn gpu_matmul_matches_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_matmul_matches_cpu") else {
        return;
    };
    // Both devices compute each output as the chain acc = fma(x_k, w_k, acc), k = 0, 1, ...,
    // so they should agree bit for bit; the test reports whether they do. What it asserts is
    // the rigorous bound any in-order sum meets: within γ_d = d·u/(1 - d·u) · Σ_k |x_k·w_k| of
    // the exact sum (Higham, "Accuracy and Stability of Numerical Algorithms", §3.1;
    // u = 2^-24), so within twice that of each other whatever the compiler fuses.
    let sizes = [
        (1, 1, 1),
        (1, 576, 576),
        (1, 576, 1536),
        (1, 1536, 576),
        (3, 17, 33),
        (17, 100, 70),
        (33, 576, 192),
        (128, 576, 1536),
        (1, 576, 49152),
    ]; // (n, d_in, d_out)
    let u = 2f64.powi(-24);
    for (n, d_in, d_out) in sizes {
        let x = random(n * d_in, 1.0, 5);
        let w = random(d_in * d_out, 1.0 / (d_in as f32).sqrt(), 6);
        for dtype in [GpuDtype::F32, GpuDtype::Bf16] {
            // With bf16 weights the GPU multiplies by the rounded values, exactly.
            let w_used = if dtype == GpuDtype::Bf16 {
                round_bf16(&w)
            } else {
                w.clone()
            };
            let mut cpu = vec![0.0; n * d_out];
            ops::matmul(&x, &w_used, &mut cpu, d_in, d_out);
            let abs = |v: &[f32]| v.iter().map(|a| a.abs()).collect::<Vec<_>>();
            let mut magnitude = vec![0.0; n * d_out]; // Σ_k |x_k · w_k| per output
            ops::matmul(&abs(&x), &abs(&w_used), &mut magnitude, d_in, d_out);
            let gamma = d_in as f64 * u / (1.0 - d_in as f64 * u);
            // v3 sums each slice in order, then the 32 slice sums in order: every product
            // passes through at most ceil(d_in / 32) + 32 <= d_in + 32 roundings, so its bound
            // is γ for that many terms (Higham §3.1 again, for any order of summation).
            let terms_v3 = (d_in.div_ceil(32) + 32) as f64;
            let gamma_v3 = terms_v3 * u / (1.0 - terms_v3 * u);

            let xd = gpu.upload(&x).unwrap();
            let wd = GpuMatrix::from_host(&gpu, &w, d_in, d_out, dtype).unwrap();
            let mut results = Vec::new();
            for version in [MatmulVersion::V1, MatmulVersion::V2, MatmulVersion::V3] {
                let mut out = gpu.zeros::<f32>(n * d_out).unwrap();
                gpu.matmul(&mut out.as_view_mut(), &xd.as_view(), &wd, n, version)
                    .unwrap();
                let got = gpu.download(&out).unwrap();
                let worst = got
                    .iter()
                    .zip(&cpu)
                    .zip(&magnitude)
                    .map(|((g, c), m)| {
                        // Each result is within its own γ·Σ|x·w| of the exact sum, so within the
                        // sum of the two bounds of each other.
                        let own = if version == MatmulVersion::V3 {
                            gamma_v3
                        } else {
                            gamma
                        };
                        (g - c).abs() as f64 / ((gamma + own) * *m as f64 + 1e-30)
                    })
                    .fold(0.0, f64::max);
                eprintln!(
                    "  matmul {version:?} {dtype:?} n {n} d_in {d_in} d_out {d_out}: error {:.2e}, {worst:.3} of the bound (γ_cpu + γ_gpu)·Σ|x·w|",
                    max_err(&got, &cpu)
                );
                assert!(
                    worst <= 1.0,
                    "matmul {version:?}: outside the rounding-error bound"
                );
                results.push(got);
            }
            eprintln!(
                "    bitwise equal: v1 and v2 {}, v2 and the CPU {}, v3 and the CPU {}",
                bits(&results[0]) == bits(&results[1]),
                bits(&results[1]) == bits(&cpu),
                bits(&results[2]) == bits(&cpu)
            );

            // Row independence: a row's result must not depend on the rows launched with it.
            if n > 1 {
                let r = n / 2;
                let xr = gpu.upload(&x[r * d_in..(r + 1) * d_in]).unwrap();
                for (i, version) in [MatmulVersion::V1, MatmulVersion::V2, MatmulVersion::V3]
                    .into_iter()
                    .enumerate()
                {
                    let mut out = gpu.zeros::<f32>(d_out).unwrap();
                    gpu.matmul(&mut out.as_view_mut(), &xr.as_view(), &wd, 1, version)
                        .unwrap();
                    assert_eq!(
                        bits(&gpu.download(&out).unwrap()),
                        bits(&results[i][r * d_out..(r + 1) * d_out]),
                        "matmul {version:?}: row {r} alone differs from row {r} among {n}"
                    );
                }
            }
        }
    }
    if !timing_wanted() {
        return;
    }
    for (n, d_in, d_out) in [(1, 576, 1536), (1, 576, 49152), (128, 576, 1536)] {
        for dtype in [GpuDtype::F32, GpuDtype::Bf16] {
            let xd = gpu.upload(&random(n * d_in, 1.0, 5)).unwrap();
            let wd = GpuMatrix::from_host(&gpu, &random(d_in * d_out, 0.05, 6), d_in, d_out, dtype)
                .unwrap();
            let mut out = gpu.zeros::<f32>(n * d_out).unwrap();
            for version in [MatmulVersion::V1, MatmulVersion::V2, MatmulVersion::V3] {
                let us = time_us(&gpu, || {
                    gpu.matmul(&mut out.as_view_mut(), &xd.as_view(), &wd, n, version)
                        .unwrap()
                });
                eprintln!(
                    "  matmul {version:?} {dtype:?} n {n:>3} {d_in}x{d_out}: {us:8.1} µs, {:7.1} GFLOP/s, weights at {:6.0} GB/s",
                    2.0 * (n * d_in * d_out) as f64 / us / 1e3,
                    wd.bytes() as f64 / us / 1e3
                );
            }
        }
    }
}

#[test]
fn gpu_rope_matches_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_rope_matches_cpu") else {
        return;
    };
    // Tolerance: each output is a·cos - b·sin from the same tables; the GPU may fuse one
    // product into the subtraction, so ~2 ulp: 1e-6 relative.
    let theta = 100000.0;
    let cases = [
        (1, 1, 1, 2, 0),
        (3, 9, 3, 64, 0),
        (5, 4, 2, 6, 100),
        (17, 9, 3, 64, 8000),
        (2, 8, 2, 128, 4000),
    ];
    for (n, n_heads, n_kv_heads, head_dim, start_pos) in cases {
        let heads = Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        };
        let tables = RopeTables::new(&gpu, 8192, head_dim, theta).unwrap();
        let q = random(n * n_heads * head_dim, 1.0, 7);
        let k = random(n * n_kv_heads * head_dim, 1.0, 8);
        let (mut q_cpu, mut k_cpu) = (q.clone(), k.clone());
        for i in 0..n {
            let (cos, sin) = ops::rope_cos_sin(start_pos + i, head_dim, theta);
            ops::apply_rope(
                &mut q_cpu[i * n_heads * head_dim..][..n_heads * head_dim],
                head_dim,
                &cos,
                &sin,
            );
            ops::apply_rope(
                &mut k_cpu[i * n_kv_heads * head_dim..][..n_kv_heads * head_dim],
                head_dim,
                &cos,
                &sin,
            );
        }
        let (mut qd, mut kd) = (gpu.upload(&q).unwrap(), gpu.upload(&k).unwrap());
        gpu.rope(
            &mut qd.as_view_mut(),
            &mut kd.as_view_mut(),
            &tables,
            n,
            heads,
            start_pos,
        )
        .unwrap();
        let what = format!(
            "rope n {n} heads {n_heads}/{n_kv_heads} head_dim {head_dim} from position {start_pos}"
        );
        assert_close(
            &format!("{what} q"),
            &gpu.download(&qd).unwrap(),
            &q_cpu,
            1e-6,
        );
        assert_close(
            &format!("{what} k"),
            &gpu.download(&kd).unwrap(),
            &k_cpu,
            1e-6,
        );
    }
    // Asking past the tables is an error, not an out-of-bounds read.
    let tables = RopeTables::new(&gpu, 16, 8, theta).unwrap();
    let (mut qd, mut kd) = (gpu.zeros::<f32>(8).unwrap(), gpu.zeros::<f32>(8).unwrap());
    let heads = Heads {
        n_heads: 1,
        n_kv_heads: 1,
        head_dim: 8,
    };
    assert!(gpu
        .rope(
            &mut qd.as_view_mut(),
            &mut kd.as_view_mut(),
            &tables,
            1,
            heads,
            16
        )
        .is_err());

    if !timing_wanted() {
        return;
    }
    let (n, heads) = (
        128,
        Heads {
            n_heads: 9,
            n_kv_heads: 3,
            head_dim: 64,
        },
    );
    let tables = RopeTables::new(&gpu, 8192, 64, theta).unwrap();
    let (mut qd, mut kd) = (
        gpu.zeros::<f32>(n * 9 * 64).unwrap(),
        gpu.zeros::<f32>(n * 3 * 64).unwrap(),
    );
    let us = time_us(&gpu, || {
        gpu.rope(
            &mut qd.as_view_mut(),
            &mut kd.as_view_mut(),
            &tables,
            n,
            heads,
            0,
        )
        .unwrap()
    });
    eprintln!("  rope n {n} 9+3 heads of 64: {us:.1} µs");
}

#[test]
fn gpu_swiglu_matches_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_swiglu_matches_cpu") else {
        return;
    };
    // Tolerance: CUDA's expf is within 2 ulp, then one add, one divide, one multiply: 2e-6.
    for count in [1, 1000, 1536 * 33 + 7] {
        let (gate, up) = (random(count, 8.0, 9), random(count, 2.0, 10));
        let mut cpu = gate.clone();
        ops::swiglu(&mut cpu, &up);
        let (mut gd, ud) = (gpu.upload(&gate).unwrap(), gpu.upload(&up).unwrap());
        gpu.swiglu(&mut gd.as_view_mut(), &ud.as_view(), count)
            .unwrap();
        assert_close(
            &format!("swiglu count {count}"),
            &gpu.download(&gd).unwrap(),
            &cpu,
            2e-6,
        );
    }
    if !timing_wanted() {
        return;
    }
    let count = 128 * 1536;
    let (mut gd, ud) = (
        gpu.upload(&random(count, 8.0, 9)).unwrap(),
        gpu.upload(&random(count, 2.0, 10)).unwrap(),
    );
    let us = time_us(&gpu, || {
        gpu.swiglu(&mut gd.as_view_mut(), &ud.as_view(), count)
            .unwrap()
    });
    eprintln!(
        "  swiglu {count}: {us:.1} µs, {:.0} GB/s",
        (3 * count * 4) as f64 / us / 1e3
    );
}

#[test]
fn gpu_geglu_matches_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_geglu_matches_cpu") else {
        return;
    };
    // Gemma's GeGLU (GELU, tanh approximation). Tolerance: CUDA's tanhf is within 2 ulp,
    // then a handful of products and one add, on values up to 8 x 2: 2e-6 relative.
    for count in [1, 1000, 2048 * 17 + 3] {
        let (gate, up) = (random(count, 8.0, 11), random(count, 2.0, 12));
        let mut cpu = gate.clone();
        ops::geglu(&mut cpu, &up);
        let (mut gd, ud) = (gpu.upload(&gate).unwrap(), gpu.upload(&up).unwrap());
        gpu.gated(
            kvlab::config::Activation::GeluTanh,
            &mut gd.as_view_mut(),
            &ud.as_view(),
            count,
        )
        .unwrap();
        assert_close(
            &format!("geglu count {count}"),
            &gpu.download(&gd).unwrap(),
            &cpu,
            2e-6,
        );
    }
}

#[test]
fn gpu_residual_adds_match_cpu_exactly() {
    let Some(gpu) = gpu_or_skip("gpu_residual_adds_match_cpu_exactly") else {
        return;
    };
    // One f32 addition per element on both devices: bitwise equal.
    for (rows, width) in [(1, 1), (3, 48), (33, 576), (7, 1000)] {
        let (x, y, bias) = (
            random(rows * width, 2.0, 11),
            random(rows * width, 2.0, 12),
            random(width, 1.0, 13),
        );
        let mut cpu = x.clone();
        ops::add_inplace(&mut cpu, &y);
        let (mut xd, yd) = (gpu.upload(&x).unwrap(), gpu.upload(&y).unwrap());
        gpu.add_inplace(&mut xd.as_view_mut(), &yd.as_view(), rows * width)
            .unwrap();
        assert_eq!(
            bits(&gpu.download(&xd).unwrap()),
            bits(&cpu),
            "add_inplace {rows}x{width}"
        );

        let mut cpu = x.clone();
        ops::add_bias(&mut cpu, &bias);
        let (mut xd, bd) = (gpu.upload(&x).unwrap(), gpu.upload(&bias).unwrap());
        gpu.add_bias(&mut xd.as_view_mut(), &bd.as_view(), rows)
            .unwrap();
        assert_eq!(
            bits(&gpu.download(&xd).unwrap()),
            bits(&cpu),
            "add_bias {rows}x{width}"
        );
        eprintln!("  add_inplace, add_bias {rows}x{width}: exact");
    }
}

#[test]
fn gpu_attention_matches_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_attention_matches_cpu") else {
        return;
    };
    // Tolerance: scores differ by the dot products' summation order (~head_dim ulps of
    // Σ|q·k|), softmax by expf's 2 ulp; the output is a weighted mean of values in ±1: 2e-5.
    let cases = [
        (1, 0, 1, 1, 2),     // the smallest: one query, one key
        (7, 0, 9, 3, 64),    // naive path: a whole sequence, SmolLM2's GQA heads
        (1, 100, 9, 3, 64),  // cached decode step over 101 keys
        (5, 37, 8, 2, 6),    // 5 new tokens meet a warm cache: the rectangular mask; tiny head
        (3, 10, 4, 4, 128),  // MHA
        (2, 5, 6, 1, 40),    // MQA, head_dim off a multiple of 32
        (1, 1000, 9, 3, 64), // a long context
        (1, 3, 2, 1, 256),   // the largest head the kernels take
    ]; // (n, start_pos, n_heads, n_kv_heads, head_dim)
    for (n, start_pos, n_heads, n_kv_heads, head_dim) in cases {
        let heads = Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        };
        let kv_dim = n_kv_heads * head_dim;
        let used = start_pos + n;
        let q = random(n * n_heads * head_dim, 1.0, 14);
        let (keys, values) = (
            random(used * kv_dim, 1.0, 15),
            random(used * kv_dim, 1.0, 16),
        );
        // On the GPU the keys sit in a bigger buffer, as in a cache of capacity > used, and
        // the rows past `used` are NaN: a kernel that reads past the mask would return NaN.
        let pad = |v: &[f32]| [v, &vec![f32::NAN; 3 * kv_dim]].concat();
        let (qd, kd, vd) = (
            gpu.upload(&q).unwrap(),
            gpu.upload(&pad(&keys)).unwrap(),
            gpu.upload(&pad(&values)).unwrap(),
        );
        // Every layer's mask, and a local layer's window (Gemma 3) shorter than the context:
        // a window of 3 sees 3 keys at most, whatever the position.
        let versions = [AttentionVersion::V1, AttentionVersion::V2];
        for (window, version) in [None, Some(3)]
            .into_iter()
            .flat_map(|w| versions.map(|v| (w, v)))
        {
            let rows = Contiguous::new(&keys, &values, kv_dim);
            let mask = window.map(Window::plain);
            let cpu = attention_observed(&rows, &q, start_pos, heads, mask, false).0;
            if window.is_none() {
                assert_eq!(cpu, causal_attention(&q, &keys, &values, start_pos, heads));
            }
            let mut out = gpu.zeros::<f32>(n * n_heads * head_dim).unwrap();
            gpu.attention(
                &mut out.as_view_mut(),
                &qd.as_view(),
                &kd.as_view(),
                &vd.as_view(),
                n,
                start_pos,
                heads,
                version,
                window,
            )
            .unwrap();
            let got = gpu.download(&out).unwrap();
            let what = format!("attention {version:?} n {n} start {start_pos} heads {n_heads}/{n_kv_heads} head_dim {head_dim} window {window:?}");
            assert_close(&what, &got, &cpu, 2e-5);

            // Row independence, i.e. naive == cached for attention: the last query row,
            // computed alone as a decode step, has the same bits as within the whole pass.
            if n > 1 {
                let last = (n - 1) * n_heads * head_dim;
                let q_last = gpu.upload(&q[last..]).unwrap();
                let mut one = gpu.zeros::<f32>(n_heads * head_dim).unwrap();
                gpu.attention(
                    &mut one.as_view_mut(),
                    &q_last.as_view(),
                    &kd.as_view(),
                    &vd.as_view(),
                    1,
                    used - 1,
                    heads,
                    version,
                    window,
                )
                .unwrap();
                assert_eq!(
                    bits(&gpu.download(&one).unwrap()),
                    bits(&got[last..]),
                    "{what}: last row alone differs"
                );
            }
        }
    }
    // A head larger than the kernels' per-lane arrays is refused.
    let big = Heads {
        n_heads: 1,
        n_kv_heads: 1,
        head_dim: 512,
    };
    let buf = gpu.zeros::<f32>(512).unwrap();
    let mut out = gpu.zeros::<f32>(512).unwrap();
    assert!(gpu
        .attention(
            &mut out.as_view_mut(),
            &buf.as_view(),
            &buf.as_view(),
            &buf.as_view(),
            1,
            0,
            big,
            AttentionVersion::V2,
            None,
        )
        .is_err());

    if !timing_wanted() {
        return;
    }
    let heads = Heads {
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
    };
    for (n, start_pos) in [(1, 1023), (1024, 0)] {
        let used = start_pos + n;
        let qd = gpu.upload(&random(n * 9 * 64, 1.0, 14)).unwrap();
        let (kd, vd) = (
            gpu.upload(&random(used * 192, 1.0, 15)).unwrap(),
            gpu.upload(&random(used * 192, 1.0, 16)).unwrap(),
        );
        let mut out = gpu.zeros::<f32>(n * 9 * 64).unwrap();
        for version in [AttentionVersion::V1, AttentionVersion::V2] {
            let us = time_us(&gpu, || {
                gpu.attention(
                    &mut out.as_view_mut(),
                    &qd.as_view(),
                    &kd.as_view(),
                    &vd.as_view(),
                    n,
                    start_pos,
                    heads,
                    version,
                    None,
                )
                .unwrap()
            });
            eprintln!("  attention {version:?} {n} queries over {used} keys (9/3 heads of 64): {us:9.1} µs");
        }
    }
}

/// PagedAttention on the GPU (kernels/attention.cu `attention_paged`) against its CPU twin
/// (`attention_over` with `Paged` rows), with the blocks scattered through a pool in a
/// shuffled order; and against the GPU's own contiguous kernel on the same rows, bit for bit
/// (the two kernels share one body: only the address of row `j` differs).
#[test]
fn gpu_paged_attention_matches_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_paged_attention_matches_cpu") else {
        return;
    };
    // (n, start_pos, n_heads, n_kv_heads, head_dim, block_size)
    let cases = [
        (1, 0, 9, 3, 64, 16),   // first token, one partly filled block
        (1, 100, 9, 3, 64, 16), // a decode step over 101 keys: 7 blocks, the last partial
        (5, 37, 8, 2, 6, 4),    // several new tokens meet a warm cache; tiny blocks
        (7, 0, 4, 1, 40, 3),    // a whole prefill through blocks of 3, MQA
        (1, 511, 9, 3, 64, 16), // exactly 32 full blocks
    ];
    for (n, start_pos, n_heads, n_kv_heads, head_dim, block_size) in cases {
        let heads = Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        };
        let kv_dim = n_kv_heads * head_dim;
        let used: usize = start_pos + n;
        let n_table = used.div_ceil(block_size);
        let n_blocks = n_table + 3; // spare blocks, filled with NaN: reading one would show
                                    // The sequence's blocks, scattered: table entry b is pool block (b * 5 + 2) % n_blocks
                                    // when that is a permutation, else reversed order.
        let table: Vec<u32> = if gcd(5, n_blocks) == 1 {
            (0..n_table)
                .map(|b| ((b * 5 + 2) % n_blocks) as u32)
                .collect()
        } else {
            (0..n_table).map(|b| (n_blocks - 1 - b) as u32).collect()
        };
        let q = random(n * n_heads * head_dim, 1.0, 40);
        let (keys, values) = (
            random(used * kv_dim, 1.0, 41),
            random(used * kv_dim, 1.0, 42),
        );
        // Scatter the contiguous rows into the pools through the table.
        let mut k_pool = vec![f32::NAN; n_blocks * block_size * kv_dim];
        let mut v_pool = k_pool.clone();
        for j in 0..used {
            let row = (table[j / block_size] as usize * block_size + j % block_size) * kv_dim;
            k_pool[row..row + kv_dim].copy_from_slice(&keys[j * kv_dim..(j + 1) * kv_dim]);
            v_pool[row..row + kv_dim].copy_from_slice(&values[j * kv_dim..(j + 1) * kv_dim]);
        }
        let block = |pool: &[f32], b: u32| {
            let start = b as usize * block_size * kv_dim;
            pool[start..start + block_size * kv_dim].to_vec()
        };
        let k_blocks: Vec<Vec<f32>> = table.iter().map(|&b| block(&k_pool, b)).collect();
        let v_blocks: Vec<Vec<f32>> = table.iter().map(|&b| block(&v_pool, b)).collect();
        let cpu_rows = Paged {
            k_blocks: k_blocks.iter().map(|b| b.as_slice()).collect(),
            v_blocks: v_blocks.iter().map(|b| b.as_slice()).collect(),
            block_size,
            kv_dim,
            evicted: Evicted::default(), // a full cache: row r is position r
        };
        let cpu = attention_over(&cpu_rows, &q, start_pos, heads);
        assert_eq!(
            bits(&cpu),
            bits(&causal_attention(&q, &keys, &values, start_pos, heads)),
            "the CPU twin itself: paged == contiguous"
        );

        let (qd, kpd, vpd) = (
            gpu.upload(&q).unwrap(),
            gpu.upload(&k_pool).unwrap(),
            gpu.upload(&v_pool).unwrap(),
        );
        let (kd, vd) = (gpu.upload(&keys).unwrap(), gpu.upload(&values).unwrap());
        // Every layer's mask, then a local layer's window of 5 (Gemma 3): the CPU twin
        // through the same paged rows, and the two GPU kernels with the same bits.
        for window in [None, Some(5)] {
            let mask = window.map(Window::plain);
            let cpu = attention_observed(&cpu_rows, &q, start_pos, heads, mask, false).0;
            let mut out = gpu.zeros::<f32>(n * n_heads * head_dim).unwrap();
            gpu.attention_paged(
                &mut out.as_view_mut(),
                &qd.as_view(),
                &kpd.as_view(),
                &vpd.as_view(),
                &table,
                block_size,
                n,
                start_pos,
                heads,
                window,
            )
            .unwrap();
            let got = gpu.download(&out).unwrap();
            let what = format!(
                "paged attention n {n} start {start_pos} heads {n_heads}/{n_kv_heads} head_dim {head_dim} block {block_size} window {window:?}"
            );
            assert_close(&what, &got, &cpu, 2e-5);

            let mut contiguous = gpu.zeros::<f32>(n * n_heads * head_dim).unwrap();
            gpu.attention(
                &mut contiguous.as_view_mut(),
                &qd.as_view(),
                &kd.as_view(),
                &vd.as_view(),
                n,
                start_pos,
                heads,
                AttentionVersion::V2,
                window,
            )
            .unwrap();
            assert_eq!(
                bits(&gpu.download(&contiguous).unwrap()),
                bits(&got),
                "{what}: paged and contiguous v2 differ"
            );
        }
    }
    // A table that points outside the pool, or is too short, is an error, not a wild read.
    let heads = Heads {
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 8,
    };
    let pool = gpu.zeros::<f32>(4 * 2 * 8).unwrap(); // 2 blocks of 4 positions
    let q = gpu.zeros::<f32>(2 * 8).unwrap();
    let mut out = gpu.zeros::<f32>(2 * 8).unwrap();
    for (table, start_pos) in [(vec![0u32, 7], 5), (vec![0u32], 5)] {
        let err = gpu
            .attention_paged(
                &mut out.as_view_mut(),
                &q.as_view(),
                &pool.as_view(),
                &pool.as_view(),
                &table,
                4,
                1,
                start_pos,
                heads,
                None,
            )
            .unwrap_err();
        assert!(err.to_string().contains("paged attention"), "{err}");
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[test]
fn gpu_kv_append_matches_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_kv_append_matches_cpu") else {
        return;
    };
    // A copy: bitwise equal to the CPU cache, layer by layer, after a prefill and steps.
    let config = small_config(3, 4, 2, 6, 24, 50, 10, false, true);
    let (capacity, kv_dim) = (10, 2 * 6);
    let mut cpu = PreallocatedCache::new(&config, capacity).unwrap();
    let mut dev = GpuKvCache::new(&gpu, &config, capacity).unwrap();
    for (step, n) in [4, 1, 5].into_iter().enumerate() {
        for layer in 0..3 {
            let (k, v) = (
                random(n * kv_dim, 1.0, 100 + step as u64),
                random(n * kv_dim, 1.0, 200 + layer as u64),
            );
            cpu.write(layer, &k, &v).unwrap();
            let (kd, vd) = (gpu.upload(&k).unwrap(), gpu.upload(&v).unwrap());
            dev.write(&gpu, layer, &kd.as_view(), &vd.as_view(), n)
                .unwrap();
        }
        cpu.advance(n);
        dev.advance(n);
        for layer in 0..3 {
            let (ck, cv) = cpu.read(layer, cpu.len());
            let (dk, dv) = dev.read(layer, dev.len());
            assert_eq!(
                bits(&gpu.download(&dk).unwrap()),
                bits(ck),
                "keys, layer {layer}"
            );
            assert_eq!(
                bits(&gpu.download(&dv).unwrap()),
                bits(cv),
                "values, layer {layer}"
            );
        }
        eprintln!("  kv_append {n} positions into 3 layers: exact");
    }
    assert_eq!(dev.bytes_allocated(), cpu.bytes_allocated());
    assert_eq!(dev.bytes_used(), cpu.bytes_used());
    // The cache is full: one more position is a CacheFull error, as on the CPU.
    let kd = gpu.zeros::<f32>(kv_dim).unwrap();
    let err = dev.write(&gpu, 0, &kd.as_view(), &kd.as_view(), 1);
    assert!(
        matches!(
            err,
            Err(Error::CacheFull {
                capacity: 10,
                used: 10,
                requested: 1
            })
        ),
        "{err:?}"
    );
}

#[test]
fn gpu_argmax_matches_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_argmax_matches_cpu") else {
        return;
    };
    let mut cases: Vec<(&str, Vec<f32>)> = vec![
        ("one value", vec![3.0]),
        ("all equal: lowest index wins", vec![1.5; 3000]),
        ("random, 49152", random(49152, 5.0, 17)),
        (
            "random, 1000 (not a multiple of 1024)",
            random(1000, 5.0, 18),
        ),
        ("all -inf", vec![f32::NEG_INFINITY; 77]),
    ];
    let mut tie = random(49152, 5.0, 19);
    tie[40000] = 100.0;
    tie[1234] = 100.0; // two maxima, handled by different threads: 1234 must win
    cases.push(("a tie between threads", tie));
    let mut at_end = random(5000, 1.0, 20);
    at_end[4999] = 9.0;
    cases.push(("maximum at the end", at_end));
    let mut out = gpu.zeros::<u32>(1).unwrap();
    for (what, x) in &cases {
        let xd = gpu.upload(x).unwrap();
        gpu.argmax(&mut out.as_view_mut(), &xd.as_view()).unwrap();
        let got = gpu.download(&out).unwrap()[0] as usize;
        eprintln!("  argmax {what}: {got}");
        assert_eq!(got, ops::argmax(x), "argmax {what}");
    }
    if !timing_wanted() {
        return;
    }
    let xd = gpu.upload(&random(49152, 5.0, 17)).unwrap();
    let us = time_us(&gpu, || {
        gpu.argmax(&mut out.as_view_mut(), &xd.as_view()).unwrap()
    });
    eprintln!("  argmax over 49152: {us:.1} µs");
}

/// Runs on every machine: a zero size is refused on the host, with its name, before any
/// launch (a head_dim of 0 used to reach a division).
#[test]
fn zero_sizes_are_errors_without_a_gpu() {
    use kvlab::cuda::ops::{check_heads, check_nonzero};
    let heads = |n_heads, n_kv_heads, head_dim| Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    };
    assert!(check_heads("attention", heads(9, 3, 64)).is_ok());
    for (bad, name) in [
        (heads(9, 3, 0), "head_dim"),
        (heads(0, 3, 64), "n_heads"),
        (heads(9, 0, 64), "n_kv_heads"),
    ] {
        let err = check_heads("attention", bad).unwrap_err().to_string();
        assert!(err.contains(&format!("{name} is 0")), "{err}");
    }
    assert!(
        check_heads("attention", heads(9, 2, 64)).is_err(),
        "9 % 2 != 0"
    );
    assert!(
        check_heads("attention", heads(1, 1, 512)).is_err(),
        "too large a head"
    );
    let err = check_nonzero("matmul", &[("n", 1), ("d_in", 0), ("d_out", 5)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("matmul: d_in is 0"), "{err}");
    assert!(check_nonzero("matmul", &[("n", 1), ("d_in", 2)]).is_ok());
}

/// The roof kernels (kernels/roof.cu) compute what their CPU twins do, bit for bit, so the
/// bandwidth and FLOP/s that `kvlab bench --device cuda` divides by come from kernels that
/// really read every byte and really run every FMA. Then the roofs, measured at a small
/// size: finite and positive (their size is only reported, never asserted).
#[test]
fn gpu_roof_kernels_match_their_cpu_twins() {
    use kvlab::cuda::roof::{fma_chains_cpu, read_partials_cpu, RoofSizes};
    let Some(gpu) = gpu_or_skip("gpu_roof_kernels_match_their_cpu_twins") else {
        return;
    };
    // Small integers: every partial sum is exact, whatever the order. A length that is not
    // a multiple of four float4s per thread exercises the tail loop.
    for (float4s, blocks) in [(1, 1), (1000, 1), (5 * 256 * 4 + 77, 2), (40_003, 3)] {
        let x: Vec<f32> = (0..4 * float4s).map(|i| (i % 7) as f32).collect();
        let xd = gpu.upload(&x).unwrap();
        let mut partial = gpu.zeros::<f32>(blocks * 256).unwrap();
        gpu.roof_read(&xd, &mut partial, blocks).unwrap();
        let got = gpu.download(&partial).unwrap();
        assert_eq!(
            got,
            read_partials_cpu(&x, blocks * 256),
            "{float4s} float4s"
        );
        let total: f64 = got.iter().map(|&v| v as f64).sum();
        let expected: f64 = x.iter().map(|&v| v as f64).sum();
        assert_eq!(total, expected, "every float is read once");
        eprintln!("  roof_read over {float4s} float4s, {blocks} blocks: exact");
    }
    // Zero blocks is refused before a launch (the grid would be empty).
    let (xd, mut partial) = (
        gpu.upload(&[1.0f32; 4]).unwrap(),
        gpu.zeros::<f32>(1).unwrap(),
    );
    let err = gpu.roof_read(&xd, &mut partial, 0).unwrap_err().to_string();
    assert!(err.contains("blocks is 0"), "{err}");
    let mut out = gpu.zeros::<f32>(2 * 256).unwrap();
    gpu.roof_fma(&mut out, 37, 0.999, 0.5).unwrap();
    let got = gpu.download(&out).unwrap();
    let cpu = fma_chains_cpu(2 * 256, 37, 0.999, 0.5);
    assert_eq!(
        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        cpu.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        "fmaf rounds once, as f32::mul_add"
    );
    eprintln!("  roof_fma, 512 threads x 8 chains x 37 FMAs: bitwise equal to the CPU");
    let roof = gpu.measure_roof(RoofSizes::SMALL).unwrap();
    assert!(roof.read_bytes_per_s.is_finite() && roof.read_bytes_per_s > 0.0);
    assert!(roof.fma_flop_per_s.is_finite() && roof.fma_flop_per_s > 0.0);
    eprintln!(
        "  roofs at the small size: read {:.1} GB/s, FMA {:.2} TFLOP/s",
        roof.read_bytes_per_s / 1e9,
        roof.fma_flop_per_s / 1e12
    );
}
