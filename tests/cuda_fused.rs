#![cfg(feature = "cuda")]
//! The fused kernels (kernels/fused.cu), split-K attention v3 (kernels/attention_splitk.cu)
//! and the CUDA-graph decode step, each against its twins:
//!
//! - a fused kernel against the unfused kernels it replaces, **bit for bit** (it computes
//!   the same expressions in the same order), and against the CPU's ops within a tolerance;
//! - attention v3 against the CPU's `causal_attention` within a tolerance, and against
//!   itself bit for bit whatever the rows launched with it or the size of the key buffer;
//! - the fused forward pass: naive == cached bit for bit, logits close to the CPU's; the
//!   graph-replayed decode step == the eagerly launched one, bit for bit; launches per token.
//!
//! Without a GPU every test prints `SKIPPED (no CUDA device): <reason>` and returns; the
//! kernels themselves are compiled by NVRTC in tests/cuda_kernels.rs on any machine.

mod common;

use common::gpu::*;

use kvlab::attention::{attention_observed, Heads};
use kvlab::cache::rows::Contiguous;
use kvlab::cuda::ops_fused::MatmulOut;
use kvlab::cuda::ops_splitk::{SplitKScratch, CHUNK_KEYS};
use kvlab::cuda::weights::{GpuMatrix, RopeTables};
use kvlab::cuda::{GpuModel, MatmulVersion};
use kvlab::device::GpuDtype;
use kvlab::generate::Decoder;
use kvlab::mask::Window;
use kvlab::{ops, Model};

/// `(n, d_in, output widths, biases?)`: one output, QKV-shaped three (SmolLM2: 576 → 576,
/// 192, 192), gate/up-shaped two, widths off a multiple of the 256-thread block, n > 1.
const NORM_MATMUL_CASES: [(usize, usize, &[usize], bool); 5] = [
    (1, 7, &[3], false),
    (1, 576, &[576, 192, 192], true),
    (5, 48, &[24, 12, 12], true),
    (3, 576, &[1536, 1536], false),
    (33, 100, &[257], true),
];

#[test]
fn gpu_fused_rmsnorm_matmul_matches_unfused_and_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_fused_rmsnorm_matmul_matches_unfused_and_cpu") else {
        return;
    };
    for (n, d_in, widths, with_bias) in NORM_MATMUL_CASES {
        let x = random(n * d_in, 3.0, 1);
        let norm: Vec<f32> = random(d_in, 0.2, 2).iter().map(|v| 1.0 + v).collect();
        let ws: Vec<Vec<f32>> = widths
            .iter()
            .enumerate()
            .map(|(t, &d)| random(d_in * d, 1.0 / (d_in as f32).sqrt(), 10 + t as u64))
            .collect();
        let biases: Vec<Vec<f32>> = widths
            .iter()
            .enumerate()
            .map(|(t, &d)| random(d, 0.5, 20 + t as u64))
            .collect();
        for dtype in [GpuDtype::F32, GpuDtype::Bf16] {
            let (xd, nd) = (gpu.upload(&x).unwrap(), gpu.upload(&norm).unwrap());
            let wd: Vec<GpuMatrix> = ws
                .iter()
                .zip(widths)
                .map(|(w, &d)| GpuMatrix::from_host(&gpu, w, d_in, d, dtype).unwrap())
                .collect();
            let bd: Vec<_> = biases.iter().map(|b| gpu.upload(b).unwrap()).collect();
            let mut outs: Vec<_> = widths
                .iter()
                .map(|&d| gpu.zeros::<f32>(n * d).unwrap())
                .collect();
            {
                let mut views: Vec<_> = outs.iter_mut().map(|o| o.as_view_mut()).collect();
                let mut args: Vec<MatmulOut> = views
                    .iter_mut()
                    .zip(&wd)
                    .zip(&bd)
                    .map(|((out, w), b)| MatmulOut {
                        out,
                        w,
                        bias: with_bias.then(|| b.as_view()),
                    })
                    .collect();
                gpu.rmsnorm_matmul(&mut args, &xd.as_view(), &nd.as_view(), 1e-5, n)
                    .unwrap();
            }
            // The unfused twin: rmsnorm, then one matmul (+ bias) per output.
            let mut xb = gpu.zeros::<f32>(n * d_in).unwrap();
            gpu.rmsnorm(&mut xb.as_view_mut(), &xd.as_view(), &nd.as_view(), 1e-5, n)
                .unwrap();
            for (t, &d) in widths.iter().enumerate() {
                let fused = gpu.download(&outs[t]).unwrap();
                let mut unfused = gpu.zeros::<f32>(n * d).unwrap();
                gpu.matmul(
                    &mut unfused.as_view_mut(),
                    &xb.as_view(),
                    &wd[t],
                    n,
                    MatmulVersion::V1,
                )
                .unwrap();
                if with_bias {
                    gpu.add_bias(&mut unfused.as_view_mut(), &bd[t].as_view(), n)
                        .unwrap();
                }
                let what = format!("rmsnorm_matmul {dtype:?} n {n} d_in {d_in} output {t} ({d})");
                assert_eq!(
                    bits(&fused),
                    bits(&gpu.download(&unfused).unwrap()),
                    "{what}: fused and unfused differ"
                );
                // The CPU twin. Tolerance: the normalized input differs from the CPU's by
                // rmsnorm's 1e-5 relative (another summation order), which a dot product of
                // d_in terms with weights ~1/sqrt(d_in) carries to ~1e-5 * sqrt(d_in)
                // relative to Σ|x·w| ~ 1: 1e-5 · 24 at d_in = 576; 5e-4 covers it.
                let w_used = if dtype == GpuDtype::Bf16 {
                    round_bf16(&ws[t])
                } else {
                    ws[t].clone()
                };
                let mut normed = vec![0.0; n * d_in];
                ops::rmsnorm(&x, &norm, 1e-5, &mut normed);
                let mut cpu = vec![0.0; n * d];
                ops::matmul(&normed, &w_used, &mut cpu, d_in, d);
                if with_bias {
                    ops::add_bias(&mut cpu, &biases[t]);
                }
                assert_close(&format!("{what} vs CPU"), &fused, &cpu, 5e-4);
            }
            eprintln!("  rmsnorm_matmul {dtype:?} n {n} d_in {d_in} {widths:?}: fused == unfused, bitwise");
        }
    }
    if !timing_wanted() {
        return;
    }
    // A decode step's QKV: fused (1 launch) vs rmsnorm + 3 matmuls (4 launches).
    let (d_in, widths) = (576, [576, 192, 192]);
    let xd = gpu.upload(&random(d_in, 3.0, 1)).unwrap();
    let nd = gpu.upload(&random(d_in, 0.2, 2)).unwrap();
    let wd: Vec<GpuMatrix> = widths
        .iter()
        .map(|&d| {
            GpuMatrix::from_host(&gpu, &random(d_in * d, 0.04, 3), d_in, d, GpuDtype::Bf16).unwrap()
        })
        .collect();
    let mut outs: Vec<_> = widths
        .iter()
        .map(|&d| gpu.zeros::<f32>(d).unwrap())
        .collect();
    let mut xb = gpu.zeros::<f32>(d_in).unwrap();
    let fused = time_us(&gpu, || {
        let mut views: Vec<_> = outs.iter_mut().map(|o| o.as_view_mut()).collect();
        let mut args: Vec<MatmulOut> = views
            .iter_mut()
            .zip(&wd)
            .map(|(out, w)| MatmulOut { out, w, bias: None })
            .collect();
        gpu.rmsnorm_matmul(&mut args, &xd.as_view(), &nd.as_view(), 1e-5, 1)
            .unwrap()
    });
    let unfused = time_us(&gpu, || {
        gpu.rmsnorm(&mut xb.as_view_mut(), &xd.as_view(), &nd.as_view(), 1e-5, 1)
            .unwrap();
        for (out, w) in outs.iter_mut().zip(&wd) {
            gpu.matmul(
                &mut out.as_view_mut(),
                &xb.as_view(),
                w,
                1,
                MatmulVersion::V2,
            )
            .unwrap();
        }
    });
    eprintln!("  decode QKV (bf16): fused {fused:.1} µs, rmsnorm + 3 matmuls {unfused:.1} µs");
}

#[test]
fn gpu_fused_matmul_residual_matches_unfused_and_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_fused_matmul_residual_matches_unfused_and_cpu") else {
        return;
    };
    // (n, d_in, d_out): the O projection (576 → 576), the down projection (1536 → 576), odd sizes.
    for (n, d_in, d_out) in [(1, 576, 576), (1, 1536, 576), (7, 30, 12), (17, 300, 257)] {
        let (a, b) = (random(n * d_in, 8.0, 4), random(n * d_in, 2.0, 5));
        let x = random(n * d_out, 2.0, 6);
        let w = random(d_in * d_out, 1.0 / (d_in as f32).sqrt(), 7);
        for dtype in [GpuDtype::F32, GpuDtype::Bf16] {
            let wd = GpuMatrix::from_host(&gpu, &w, d_in, d_out, dtype).unwrap();
            let (ad, bd) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
            for swiglu in [false, true] {
                let mut fused = gpu.upload(&x).unwrap();
                if swiglu {
                    gpu.swiglu_matmul_residual(
                        &mut fused.as_view_mut(),
                        &ad.as_view(),
                        &bd.as_view(),
                        &wd,
                        n,
                    )
                    .unwrap();
                } else {
                    gpu.matmul_residual(&mut fused.as_view_mut(), &ad.as_view(), &wd, n)
                        .unwrap();
                }
                // Unfused: [swiglu], matmul, add_inplace.
                let mut input = gpu.upload(&a).unwrap();
                if swiglu {
                    gpu.swiglu(&mut input.as_view_mut(), &bd.as_view(), n * d_in)
                        .unwrap();
                }
                let mut proj = gpu.zeros::<f32>(n * d_out).unwrap();
                gpu.matmul(
                    &mut proj.as_view_mut(),
                    &input.as_view(),
                    &wd,
                    n,
                    MatmulVersion::V2,
                )
                .unwrap();
                let mut unfused = gpu.upload(&x).unwrap();
                gpu.add_inplace(&mut unfused.as_view_mut(), &proj.as_view(), n * d_out)
                    .unwrap();
                let fused = gpu.download(&fused).unwrap();
                let what = format!(
                    "{} {dtype:?} n {n} {d_in}x{d_out}",
                    if swiglu {
                        "swiglu_matmul_residual"
                    } else {
                        "matmul_residual"
                    }
                );
                assert_eq!(
                    bits(&fused),
                    bits(&gpu.download(&unfused).unwrap()),
                    "{what}: fused and unfused differ"
                );
                // CPU twin. Tolerance: swiglu's 2e-6 (CUDA's expf) carried through a sum of
                // d_in terms ~1/sqrt(d_in) each, plus the sum's own rounding: 1e-4.
                let w_used = if dtype == GpuDtype::Bf16 {
                    round_bf16(&w)
                } else {
                    w.clone()
                };
                let mut cpu_in = a.clone();
                if swiglu {
                    ops::swiglu(&mut cpu_in, &b);
                }
                let mut cpu_proj = vec![0.0; n * d_out];
                ops::matmul(&cpu_in, &w_used, &mut cpu_proj, d_in, d_out);
                let mut cpu = x.clone();
                ops::add_inplace(&mut cpu, &cpu_proj);
                assert_close(&format!("{what} vs CPU"), &fused, &cpu, 1e-4);
            }
        }
        eprintln!("  matmul_residual, swiglu_matmul_residual n {n} {d_in}x{d_out}: fused == unfused, bitwise");
    }
}

#[test]
fn gpu_rope_kv_append_matches_unfused_and_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_rope_kv_append_matches_unfused_and_cpu") else {
        return;
    };
    let theta = 100000.0;
    // (n, n_heads, n_kv_heads, head_dim, start_pos, layer, layers, capacity)
    let cases = [
        (1, 9, 3, 64, 0, 0, 2, 8),
        (1, 9, 3, 64, 100, 1, 2, 200),
        (5, 4, 2, 6, 37, 2, 3, 50),
        (3, 2, 1, 2, 0, 0, 1, 3), // fills the cache exactly
    ];
    for (n, n_heads, n_kv_heads, head_dim, start_pos, layer, layers, capacity) in cases {
        let heads = Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        };
        let kv_dim = n_kv_heads * head_dim;
        let tables = RopeTables::new(&gpu, 256, head_dim, theta).unwrap();
        let q = random(n * n_heads * head_dim, 1.0, 8);
        let (k, v) = (random(n * kv_dim, 1.0, 9), random(n * kv_dim, 1.0, 10));
        let cache_len = layers * capacity * kv_dim;
        let old = random(cache_len, 1.0, 11); // rows that must stay as they are

        let (mut qd, kd, vd) = (
            gpu.upload(&q).unwrap(),
            gpu.upload(&k).unwrap(),
            gpu.upload(&v).unwrap(),
        );
        let (mut kc, mut vc) = (gpu.upload(&old).unwrap(), gpu.upload(&old).unwrap());
        let pos = gpu.upload(&[start_pos as i32]).unwrap();
        gpu.rope_kv_append(
            &mut qd.as_view_mut(),
            &kd.as_view(),
            &vd.as_view(),
            &mut kc.as_view_mut(),
            &mut vc.as_view_mut(),
            &tables,
            &pos.as_view(),
            start_pos,
            n,
            heads,
            layer,
            capacity,
        )
        .unwrap();

        // Unfused: rope on q and k, then kv_append.
        let (mut q2, mut k2, v2) = (
            gpu.upload(&q).unwrap(),
            gpu.upload(&k).unwrap(),
            gpu.upload(&v).unwrap(),
        );
        gpu.rope(
            &mut q2.as_view_mut(),
            &mut k2.as_view_mut(),
            &tables,
            n,
            heads,
            start_pos,
        )
        .unwrap();
        let (mut kc2, mut vc2) = (gpu.upload(&old).unwrap(), gpu.upload(&old).unwrap());
        gpu.kv_append(
            &mut kc2.as_view_mut(),
            &mut vc2.as_view_mut(),
            &k2.as_view(),
            &v2.as_view(),
            kv_dim,
            layer,
            capacity,
            start_pos,
        )
        .unwrap();
        let what = format!("rope_kv_append n {n} heads {n_heads}/{n_kv_heads} hd {head_dim} at {start_pos}, layer {layer}");
        let got_q = gpu.download(&qd).unwrap();
        let got_k = gpu.download(&kc).unwrap();
        assert_eq!(bits(&got_q), bits(&gpu.download(&q2).unwrap()), "{what}: q");
        assert_eq!(
            bits(&got_k),
            bits(&gpu.download(&kc2).unwrap()),
            "{what}: k cache"
        );
        assert_eq!(
            bits(&gpu.download(&vc).unwrap()),
            bits(&gpu.download(&vc2).unwrap()),
            "{what}: v cache"
        );

        // CPU twin: apply_rope per row, and the cache rows written.
        let (mut q_cpu, mut k_cpu) = (q.clone(), k.clone());
        for i in 0..n {
            let (cos, sin) = ops::rope_cos_sin(start_pos + i, head_dim, theta);
            ops::apply_rope(
                &mut q_cpu[i * n_heads * head_dim..][..n_heads * head_dim],
                head_dim,
                &cos,
                &sin,
            );
            ops::apply_rope(&mut k_cpu[i * kv_dim..][..kv_dim], head_dim, &cos, &sin);
        }
        let mut expect_k = old.clone();
        let at = (layer * capacity + start_pos) * kv_dim;
        expect_k[at..at + n * kv_dim].copy_from_slice(&k_cpu);
        assert_close(&format!("{what}: q vs CPU"), &got_q, &q_cpu, 1e-6);
        assert_close(&format!("{what}: k cache vs CPU"), &got_k, &expect_k, 1e-6);
    }
    // Past the cache or the tables: an error before any launch.
    let heads = Heads {
        n_heads: 1,
        n_kv_heads: 1,
        head_dim: 8,
    };
    let tables = RopeTables::new(&gpu, 16, 8, theta).unwrap();
    let (mut q, k) = (gpu.zeros::<f32>(8).unwrap(), gpu.zeros::<f32>(8).unwrap());
    let (mut kc, mut vc) = (
        gpu.zeros::<f32>(4 * 8).unwrap(),
        gpu.zeros::<f32>(4 * 8).unwrap(),
    );
    let pos = gpu.upload(&[4i32]).unwrap();
    let err = gpu
        .rope_kv_append(
            &mut q.as_view_mut(),
            &k.as_view(),
            &k.as_view(),
            &mut kc.as_view_mut(),
            &mut vc.as_view_mut(),
            &tables,
            &pos.as_view(),
            4,
            1,
            heads,
            0,
            4,
        )
        .unwrap_err();
    assert!(err.to_string().contains("rope_kv_append"), "{err}");
}

#[test]
fn gpu_attention_v3_matches_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_attention_v3_matches_cpu") else {
        return;
    };
    // Tolerance as for v1/v2 (tests/cuda_kernels.rs): 2e-5.
    // (n, start_pos, n_heads, n_kv_heads, head_dim): chunk edges (255/256/257 keys), a long
    // context over 20 chunks, several queries meeting a warm cache, tiny and largest heads.
    let last_of_chunk = CHUNK_KEYS - 1;
    let cases = [
        (1, 0, 9, 3, 64),
        (1, last_of_chunk, 9, 3, 64),
        (1, CHUNK_KEYS, 9, 3, 64),
        (1, 2 * CHUNK_KEYS + 1, 9, 3, 64),
        (1, 5000, 9, 3, 64),
        (7, 0, 9, 3, 64),
        (5, 300, 8, 2, 6),
        (3, 10, 4, 4, 128),
        (2, 600, 6, 1, 40),
        (1, 3, 2, 1, 256),
    ];
    // Each case with every key, and with a local layer's window (Gemma 3): 3 keys, and one
    // key more than a chunk, so that whole chunks below the window are skipped and the
    // first chunk read starts inside itself.
    let windows = [None, Some(3), Some(CHUNK_KEYS + 1)];
    let cases = cases.into_iter().flat_map(|c| windows.map(|w| (c, w)));
    for ((n, start_pos, n_heads, n_kv_heads, head_dim), window) in cases {
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
        let rows = Contiguous::new(&keys, &values, kv_dim);
        let mask = window.map(Window::plain);
        let cpu = attention_observed(&rows, &q, start_pos, heads, mask, false).0;
        let qd = gpu.upload(&q).unwrap();
        let pos = gpu.upload(&[start_pos as i32]).unwrap();
        let mut results = Vec::new();
        // The keys exactly, and in a buffer of 2 more chunks (as in a cache of larger
        // capacity; the rows past `used` are NaN, so reading one would show).
        for extra_rows in [0, 2 * CHUNK_KEYS] {
            let pad = |v: &[f32]| [v, &vec![f32::NAN; extra_rows * kv_dim]].concat();
            let (kd, vd) = (
                gpu.upload(&pad(&keys)).unwrap(),
                gpu.upload(&pad(&values)).unwrap(),
            );
            let mut scratch = SplitKScratch::new(&gpu, n, used + extra_rows, heads).unwrap();
            let mut out = gpu.zeros::<f32>(n * n_heads * head_dim).unwrap();
            if window.is_some() {
                // A global layer first, as in a Gemma pass: it fills every chunk's partials,
                // so a windowed combine that read a chunk below its window would show.
                let (k, v, p) = (&kd.as_view(), &vd.as_view(), &pos.as_view());
                let o = &mut out.as_view_mut();
                gpu.attention_v3(
                    o,
                    &qd.as_view(),
                    k,
                    v,
                    p,
                    start_pos,
                    n,
                    heads,
                    &mut scratch,
                    None,
                )
                .unwrap();
            }
            gpu.attention_v3(
                &mut out.as_view_mut(),
                &qd.as_view(),
                &kd.as_view(),
                &vd.as_view(),
                &pos.as_view(),
                start_pos,
                n,
                heads,
                &mut scratch,
                window,
            )
            .unwrap();
            let got = gpu.download(&out).unwrap();
            let what = format!("attention v3 n {n} start {start_pos} heads {n_heads}/{n_kv_heads} hd {head_dim}, {extra_rows} spare rows, window {window:?}");
            assert_close(&what, &got, &cpu, 2e-5);
            // Row independence: the last row alone, as a decode step, has the same bits.
            if n > 1 {
                let last = (n - 1) * n_heads * head_dim;
                let q_last = gpu.upload(&q[last..]).unwrap();
                let pos_last = gpu.upload(&[(used - 1) as i32]).unwrap();
                let mut one = gpu.zeros::<f32>(n_heads * head_dim).unwrap();
                gpu.attention_v3(
                    &mut one.as_view_mut(),
                    &q_last.as_view(),
                    &kd.as_view(),
                    &vd.as_view(),
                    &pos_last.as_view(),
                    used - 1,
                    1,
                    heads,
                    &mut scratch,
                    window,
                )
                .unwrap();
                assert_eq!(
                    bits(&gpu.download(&one).unwrap()),
                    bits(&got[last..]),
                    "{what}: last row alone differs"
                );
            }
            results.push(got);
        }
        assert_eq!(
            bits(&results[0]),
            bits(&results[1]),
            "v3 must not depend on the key buffer's size"
        );
    }
    if !timing_wanted() {
        return;
    }
    let heads = Heads {
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
    };
    for context in [1024, 4096, 8191] {
        let qd = gpu.upload(&random(9 * 64, 1.0, 14)).unwrap();
        let (kd, vd) = (
            gpu.upload(&random(context * 192, 1.0, 15)).unwrap(),
            gpu.upload(&random(context * 192, 1.0, 16)).unwrap(),
        );
        let pos = gpu.upload(&[(context - 1) as i32]).unwrap();
        let mut scratch = SplitKScratch::new(&gpu, 1, context, heads).unwrap();
        let mut out = gpu.zeros::<f32>(9 * 64).unwrap();
        let v3 = time_us(&gpu, || {
            gpu.attention_v3(
                &mut out.as_view_mut(),
                &qd.as_view(),
                &kd.as_view(),
                &vd.as_view(),
                &pos.as_view(),
                context - 1,
                1,
                heads,
                &mut scratch,
                None,
            )
            .unwrap()
        });
        let v2 = time_us(&gpu, || {
            gpu.attention(
                &mut out.as_view_mut(),
                &qd.as_view(),
                &kd.as_view(),
                &vd.as_view(),
                1,
                context - 1,
                heads,
                kvlab::cuda::AttentionVersion::V2,
                None,
            )
            .unwrap()
        });
        eprintln!("  decode attention over {context} keys (9/3 heads of 64): v2 {v2:8.1} µs, v3 split-K {v3:8.1} µs");
    }
}

/// A model whose sequences cross several split-K chunks (max 1024 positions).
fn long_model() -> Model {
    let mut config = small_config(2, 4, 2, 16, 64, 96, 101, true, false);
    config.max_position_embeddings = 1024;
    Model::random(config, 7).unwrap()
}

#[test]
fn gpu_fused_paths_naive_equals_cached_and_match_cpu() {
    let Some(gpu) = gpu_or_skip("gpu_fused_paths_naive_equals_cached_and_match_cpu") else {
        return;
    };
    let long = long_model();
    let small = small_models();
    let mut all = with_smollm2(&small);
    all.push(("2 layers, 600-token prompt (3 chunks)", &long));
    for &(name, model) in &all {
        let prompt_len = if model.config.max_position_embeddings >= 1024 {
            600
        } else {
            9
        };
        let prompt = random_tokens(prompt_len, model.config.vocab_size, 70);
        let continuation = random_tokens(5, model.config.vocab_size, 71);
        let cpu = cpu_cached_logits(model, &prompt, &continuation);
        for dtype in [GpuDtype::F32, GpuDtype::Bf16] {
            let gm = GpuModel::upload_on(gpu.clone(), model, dtype)
                .unwrap()
                .with_plan(true, false)
                .unwrap();
            let cached = assert_gpu_paths_bitwise(
                &gm,
                &prompt,
                &continuation,
                &format!("{name} {dtype:?} fused"),
            );
            if dtype == GpuDtype::F32 {
                // Same tolerance as tests/cuda_paths.rs: 1e-3 · max(1, max |logit|).
                for (step, (g, c)) in cached.iter().zip(&cpu).enumerate() {
                    let tol = 1e-3 * c.iter().fold(1.0f32, |m, v| m.max(v.abs()));
                    let diff = g
                        .iter()
                        .zip(c)
                        .map(|(x, y)| (x - y).abs())
                        .fold(0.0, f32::max);
                    assert!(
                        diff <= tol,
                        "{name} fused f32: step {step}: |GPU - CPU| = {diff:e} > {tol:e}"
                    );
                }
            }
            eprintln!(
                "  {name}, {dtype:?}, fused: naive == cached bitwise over {} steps",
                cached.len()
            );
        }
    }
}

/// The cached path's decode steps three ways: unfused kernels, fused kernels launched one by
/// one, and fused kernels replayed from a CUDA graph. The graph replays exactly the fused
/// kernels, so it must give their bits at every step (after the position crossed a split-K
/// chunk, and after a greedy step); the launches per step are counted, not timed.
#[test]
fn gpu_graph_decode_equals_eager_and_counts_one_launch() {
    if gpu_or_skip("gpu_graph_decode_equals_eager_and_counts_one_launch").is_none() {
        return;
    }
    // A GPU of its own (its own stream and launch counter): the other tests of this binary
    // share one and may run on other threads, and work queued on a stream while it is being
    // captured would end up in the graph, and their launches in this test's counts.
    let gpu = std::sync::Arc::new(kvlab::cuda::Gpu::new().unwrap());
    let long = long_model();
    for (name, model) in [("SmolLM2 shape", smollm2()), ("2 layers, biases", &long)] {
        let prompt = random_tokens(250, model.config.vocab_size, 80); // the steps cross 256
        let steps = random_tokens(12, model.config.vocab_size, 81);
        let capacity = prompt.len() + steps.len() + 1;
        let layers = model.config.num_hidden_layers as u64;
        let mut gm = GpuModel::upload_on(gpu.clone(), model, GpuDtype::Bf16).unwrap();
        let mut runs: Vec<(Vec<Vec<f32>>, u32)> = Vec::new();
        for (fused, graphs) in [(false, false), (true, false), (true, true)] {
            gm.set_plan(fused, graphs).unwrap();
            let mut decoder = gm.cached_decoder(capacity).unwrap();
            let mut logits = vec![decoder.prefill(&prompt).unwrap()];
            let mut launches = Vec::new();
            for &t in &steps {
                let before = gm.gpu().launches();
                logits.push(decoder.step(t).unwrap());
                launches.push(gm.gpu().launches() - before);
            }
            let greedy = decoder.step_greedy(steps[0]).unwrap();
            let per_step = launches[1]; // the first step may also capture the graph
            assert!(launches[1..].iter().all(|&l| l == per_step), "{launches:?}");
            eprintln!(
                "  {name}: {} — {per_step} launches per decode step",
                gm.kernels()
            );
            if fused && graphs {
                assert_eq!(per_step, 1, "a replayed step is one launch");
            } else if fused {
                // embedding + 7 per layer + final norm/LM head
                assert_eq!(per_step, 1 + 7 * layers + 1, "fused launches per step");
            }
            runs.push((logits, greedy));
        }
        let (eager, graph) = (&runs[1], &runs[2]);
        for (step, (a, b)) in eager.0.iter().zip(&graph.0).enumerate() {
            assert_eq!(bits(a), bits(b), "{name}: step {step}: graph replay differs from the fused kernels launched one by one");
        }
        assert_eq!(eager.1, graph.1, "{name}: greedy token after the steps");
        // Unfused vs fused: attention v2 vs v3 add in other orders; close, not bitwise.
        for (step, (a, b)) in runs[0].0.iter().zip(&eager.0).enumerate() {
            let tol = 1e-3 * a.iter().fold(1.0f32, |m, v| m.max(v.abs()));
            let diff = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f32::max);
            assert!(
                diff <= tol,
                "{name}: step {step}: unfused vs fused {diff:e} > {tol:e}"
            );
        }
        eprintln!(
            "  {name}: graph == fused bitwise over {} steps",
            steps.len() + 1
        );
    }
}

/// Graphs replay the fused kernels, which read the position from the GPU: asking for graphs
/// without them is an error naming the fix.
#[test]
fn gpu_graphs_need_the_fused_kernels() {
    let Some(gpu) = gpu_or_skip("gpu_graphs_need_the_fused_kernels") else {
        return;
    };
    let model = &small_models()[0].1;
    let mut gm = GpuModel::upload_on(gpu, model, GpuDtype::F32).unwrap();
    let err = gm.set_plan(false, true).unwrap_err().to_string();
    assert!(err.contains("fused"), "{err}");
}
