#![cfg(feature = "cuda")]
//! The int8 decode-attention kernel (kernels/attention_int8.cu) against its CPU twin: the CPU
//! attention over the same int8 codes and scales (`--kv int8`'s layout), at several shapes
//! and contexts, including ones that are not multiples of the warp count or of 32 lanes.
//! The kernel compiles with NVRTC in tests/cuda_kernels.rs (`kernels_compile_with_nvrtc`
//! compiles every entry of `nvrtc::KERNELS`); without a GPU this test prints
//! `SKIPPED (no CUDA device)` and returns.

mod common;

use common::gpu::*;

use kvlab::attention::{attention_observed, Heads};
use kvlab::cache::quant::codec::{dequantize_i8, quantize_i8};
use kvlab::cache::rows::Contiguous;
use kvlab::mask::Window;

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
        // (start, n, a local layer's window): the whole prefix, and windows shorter than it.
        let cases = [
            (0, 1, None),
            (0, 5, None),
            (37, 1, None),
            (511, 1, None),
            (2047, 1, None),
            (100, 7, None),
            (100, 7, Some(4)),
            (2047, 1, Some(512)),
        ];
        for (start_pos, n, window) in cases {
            let len = start_pos + n;
            let q = random(n * n_heads * head_dim, 1.0, 1);
            let (k_codes, k_scales, keys) = quantized(len, heads, 2);
            let (v_codes, v_scales, values) = quantized(len, heads, 3);
            let rows = Contiguous::new(&keys, &values, n_kv_heads * head_dim);
            let mask = window.map(Window::plain);
            let cpu = attention_observed(&rows, &q, start_pos, heads, mask, false).0;
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
                window,
            )
            .unwrap();
            let got = gpu.download(&out).unwrap();
            let err = max_err(&got, &cpu);
            eprintln!("  int8 attention {n_heads}/{n_kv_heads}x{head_dim} start {start_pos} n {n} window {window:?}: error {err:.2e}");
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
            None,
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("n is 0"), "{err}");
}

#[test]
fn kv_append_int8_quantizes_as_the_cpu_bit_for_bit() {
    let Some(gpu) = gpu_or_skip("kv_append_int8_quantizes_as_the_cpu_bit_for_bit") else {
        return;
    };
    // The GPU quantizes each new row head by head as the CPU's `quantize_i8` does: the
    // same codes and the same scale bits, for heads under, at, off and above a warp's 32
    // lanes, a head of zeros (scale 0: every code 0) and values that round at .5.
    for (n_kv_heads, head_dim) in [(3, 64), (1, 8), (2, 48), (1, 256)] {
        let heads = Heads {
            n_heads: n_kv_heads,
            n_kv_heads,
            head_dim,
        };
        let kv_dim = n_kv_heads * head_dim;
        let (n_layers, capacity, layer, start_pos, n) = (2, 10, 1, 3, 4);
        let mut k = random(n * kv_dim, 3.0, 7);
        let v = random(n * kv_dim, 0.5, 8);
        k[..head_dim].fill(0.0); // position 0, KV head 0: all zeros
        k[kv_dim] = 127.0; // position 1: scale 1, so 2.5 and -0.5 land halfway
        k[kv_dim + 1] = 2.5;
        k[kv_dim + 2] = -0.5;
        let scales_len = n_layers * capacity * n_kv_heads;
        let mut k_codes = gpu.zeros::<i8>(scales_len * head_dim).unwrap();
        let mut v_codes = gpu.zeros::<i8>(scales_len * head_dim).unwrap();
        let mut k_scales = gpu.zeros::<f32>(scales_len).unwrap();
        let mut v_scales = gpu.zeros::<f32>(scales_len).unwrap();
        gpu.kv_append_int8(
            (&mut k_codes.as_view_mut(), &mut k_scales.as_view_mut()),
            (&mut v_codes.as_view_mut(), &mut v_scales.as_view_mut()),
            &gpu.upload(&k).unwrap().as_view(),
            &gpu.upload(&v).unwrap().as_view(),
            n,
            (layer, capacity, start_pos),
            heads,
        )
        .unwrap();
        for (x, codes, scales) in [(&k, &k_codes, &k_scales), (&v, &v_codes, &v_scales)] {
            let (codes, scales) = (gpu.download(codes).unwrap(), gpu.download(scales).unwrap());
            for (i, row) in x.chunks_exact(kv_dim).enumerate() {
                let r = layer * capacity + start_pos + i;
                for (g, head) in row.chunks_exact(head_dim).enumerate() {
                    let mut want = vec![0i8; head_dim];
                    let scale = quantize_i8(head, &mut want);
                    let got = &codes[(r * n_kv_heads + g) * head_dim..][..head_dim];
                    assert_eq!(
                        got,
                        &want[..],
                        "{n_kv_heads}x{head_dim}: position {i}, head {g}"
                    );
                    let got_scale = scales[r * n_kv_heads + g];
                    assert_eq!(
                        got_scale.to_bits(),
                        scale.to_bits(),
                        "position {i}, head {g}"
                    );
                }
            }
            // Nothing outside the new rows was written.
            let written = (layer * capacity + start_pos) * n_kv_heads
                ..(layer * capacity + start_pos + n) * n_kv_heads;
            assert!(scales
                .iter()
                .enumerate()
                .all(|(j, &s)| written.contains(&j) || s == 0.0));
        }
        eprintln!("  kv_append_int8 {n_kv_heads}x{head_dim}: codes and scales equal the CPU's bit for bit");
    }
}
