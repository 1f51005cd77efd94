#![cfg(feature = "cuda")]
//! The int8 decode-attention kernel (kernels/attention_int8.cu) against its CPU twin: the CPU
//! attention over the same int8 codes and scales (`--kv int8`'s layout), at several shapes
//! and contexts, including ones that are not multiples of the warp count or of 32 lanes.
//! The kernel compiles with NVRTC in tests/cuda_kernels.rs (`kernels_compile_with_nvrtc`
//! compiles every entry of `nvrtc::KERNELS`); without a GPU this test prints
//! `SKIPPED (no CUDA device)` and returns.

mod common;

use common::gpu::*;

use kvlab::attention::{causal_attention, Heads};
use kvlab::cache::quant::codec::{dequantize_i8, quantize_i8};

/// Random keys or values `[len, n_kv_heads, head_dim]`, quantized per token per head:
/// the codes, the scales `[len, n_kv_heads]`, and the dequantized f32 values (what the CPU's
/// `QuantRows` hands attention, bit for bit: tests/quant.rs).
fn quantized(len: usize, heads: Heads, seed: u64) -> (Vec<i8>, Vec<f32>, Vec<f32>) {
    let x = random(len * heads.n_kv_heads * heads.head_dim, 2.0, seed);
    let mut codes = vec![0i8; x.len()];
    let mut scales = Vec::new();
    for (run, out) in x
        .chunks_exact(heads.head_dim)
        .zip(codes.chunks_exact_mut(heads.head_dim))
    {
        scales.push(quantize_i8(run, out));
    }
    let dequantized = codes
        .chunks_exact(heads.head_dim)
        .zip(&scales)
        .flat_map(|(run, &s)| run.iter().map(move |&q| dequantize_i8(q, s)))
        .collect();
    (codes, scales, dequantized)
}

#[test]
fn int8_attention_matches_the_cpu() {
    let Some(gpu) = gpu_or_skip("int8_attention_matches_the_cpu") else {
        return;
    };
    let shapes = [(9, 3, 64), (4, 4, 32), (8, 1, 128), (6, 2, 48)];
    for (n_heads, n_kv_heads, head_dim) in shapes {
        let heads = Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        };
        for (start_pos, n) in [(0, 1), (0, 5), (37, 1), (511, 1), (2047, 1), (100, 7)] {
            let len = start_pos + n;
            let q = random(n * n_heads * head_dim, 1.0, 1);
            let (k_codes, k_scales, keys) = quantized(len, heads, 2);
            let (v_codes, v_scales, values) = quantized(len, heads, 3);
            let cpu = causal_attention(&q, &keys, &values, start_pos, heads);
            let mut out = gpu.zeros::<f32>(q.len()).unwrap();
            let up = |v: &[f32]| gpu.upload(v).unwrap();
            let (qd, ksd, vsd) = (up(&q), up(&k_scales), up(&v_scales));
            let kcd = gpu.upload(&k_codes).unwrap();
            let vcd = gpu.upload(&v_codes).unwrap();
            gpu.attention_int8(
                &mut out.as_view_mut(),
                &qd.as_view(),
                &kcd.as_view(),
                &ksd.as_view(),
                &vcd.as_view(),
                &vsd.as_view(),
                n,
                start_pos,
                heads,
            )
            .unwrap();
            let got = gpu.download(&out).unwrap();
            let err = max_err(&got, &cpu);
            eprintln!("  int8 attention {n_heads}/{n_kv_heads}x{head_dim} start {start_pos} n {n}: error {err:.2e}");
            assert!(err < 1e-5, "int8 attention differs from the CPU by {err}");
        }
    }
}

#[test]
fn zero_queries_are_refused_before_a_launch() {
    let Some(gpu) = gpu_or_skip("zero_queries_are_refused_before_a_launch") else {
        return;
    };
    let heads = Heads {
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
    };
    let mut out = gpu.zeros::<f32>(1).unwrap();
    let empty_f = gpu.zeros::<f32>(1).unwrap();
    let empty_i = gpu.zeros::<i8>(1).unwrap();
    let err = gpu
        .attention_int8(
            &mut out.as_view_mut(),
            &empty_f.as_view(),
            &empty_i.as_view(),
            &empty_f.as_view(),
            &empty_i.as_view(),
            &empty_f.as_view(),
            0,
            0,
            heads,
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("n is 0"), "{err}");
}
