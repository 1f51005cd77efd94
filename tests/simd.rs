//! The hand-written SIMD kernels (`src/simd/`) against the portable one, bit for
//! bit, for every version this CPU can run, f32, bf16 and int8 weights, awkward shapes
//! (tails of rows and columns, decode strips and prefill panels); the exact
//! bf16 → f32 widening; int8 blocks computing as their exact f32 values; Q8_0
//! quantization as llama.cpp's (GGUF) bytes. On a CPU without AVX-512 the AVX-512 cases cannot run:
//! the test prints which versions it checked.

mod common;

use common::matmul::every_isa_gives_the_portable_bits_row_by_row;
use half::bf16;
use kvlab::ops::matmul_on;
use kvlab::simd::q8::{self, Q8Block};
use kvlab::simd::{Isa, Scalar, WeightElem};
use ndarray::Array2;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn inputs(n: usize, d_in: usize, d_out: usize) -> (Vec<f32>, Vec<f32>) {
    let x = (0..n * d_in).map(|i| ((i as f32) * 0.7311).sin()).collect();
    let w = (0..d_in * d_out)
        .map(|i| ((i as f32) * 0.1213).cos() * 0.5)
        .collect();
    (x, w)
}

/// Shapes covering: one row (strip path), rows below and above the packed
/// threshold and the tile heights (4, 6, 8), columns below, at and past a
/// vector (8, 16) and a panel (32).
const SHAPES: [(usize, usize, usize); 9] = [
    (1, 7, 5),
    (1, 64, 100),
    (3, 33, 17),
    (7, 16, 48),
    (8, 5, 1),
    (9, 64, 33),
    (17, 19, 70),
    (50, 96, 200),
    (64, 576, 192),
];

fn check_all_versions<W: WeightElem>(w_of: impl Fn(&[f32]) -> Vec<W>) {
    check_shapes(&SHAPES, |w, _, _| w_of(w));
}

/// Every version against the portable one at `shapes`; `w_of(w, d_in, d_out)` stores the
/// `[d_in, d_out]` f32 matrix `w` in the format under test.
fn check_shapes<W: WeightElem>(
    shapes: &[(usize, usize, usize)],
    w_of: impl Fn(&[f32], usize, usize) -> Vec<W>,
) {
    eprintln!("versions checked against Portable: {:?}", Isa::available());
    for &(n, d_in, d_out) in shapes {
        let (x, w) = inputs(n, d_in, d_out);
        every_isa_gives_the_portable_bits_row_by_row(&x, &w_of(&w, d_in, d_out), d_in, d_out);
    }
}

#[test]
fn every_version_gives_the_portable_bits_with_f32_weights() {
    check_all_versions(|w| w.to_vec());
}

#[test]
fn every_version_gives_the_portable_bits_with_bf16_weights() {
    check_all_versions(|w| w.iter().map(|&v| bf16::from_f32(v)).collect());
}

/// int8 shapes (inputs a multiple of 32, outputs of 16): one row and rows below the
/// packed threshold (decode strips: 1, 2 and 5 blocks side by side, a group of 4 and a
/// leftover), and prefill panels (an int8 block split across two 32-column panels).
const INT8_SHAPES: [(usize, usize, usize); 8] = [
    (1, 32, 16),
    (1, 64, 112),
    (3, 96, 80),
    (7, 32, 48),
    (8, 64, 16),
    (9, 64, 48),
    (50, 96, 208),
    (64, 576, 192),
];

fn int8(w: &[f32], d_in: usize, d_out: usize) -> Vec<Q8Block> {
    let w = Array2::from_shape_vec((d_in, d_out), w.to_vec()).unwrap();
    q8::quantize(&w).unwrap().into_raw_vec_and_offset().0
}

#[test]
fn every_version_gives_the_portable_bits_with_int8_weights() {
    check_shapes(&INT8_SHAPES, int8);
}

#[test]
fn int8_weights_compute_as_their_exact_f32_values() {
    // int8 blocks and the f32 matrix of their dequantized values: the same bits out, in
    // decode strips (n < 8) and prefill panels (n >= 8), in every version.
    for (n, d_in, d_out) in INT8_SHAPES {
        let (x, w) = inputs(n, d_in, d_out);
        let blocks = q8::quantize(&Array2::from_shape_vec((d_in, d_out), w).unwrap()).unwrap();
        let wide = q8::dequantize(&blocks);
        let blocks = blocks.into_raw_vec_and_offset().0;
        let wide = wide.into_raw_vec_and_offset().0;
        for isa in Isa::available() {
            let (mut a, mut b) = (vec![0.0; n * d_out], vec![0.0; n * d_out]);
            matmul_on(isa, &x, &blocks, &mut a, d_in, d_out);
            matmul_on(isa, &x, &wide, &mut b, d_in, d_out);
            assert_eq!(
                bits(&a),
                bits(&b),
                "{isa:?} at n={n} d_in={d_in} d_out={d_out}"
            );
        }
    }
}

#[test]
fn int8_blocks_hold_llama_cpp_q8_0_values() {
    // Each column's 32-row runs are Q8_0 blocks: written out as GGUF bytes (f16 scale,
    // 32 i8) and read back by the GGUF importer's dequantizer, they give our values.
    let (d_in, d_out) = (64, 32);
    let (_, w) = inputs(1, d_in, d_out);
    let w = Array2::from_shape_vec((d_in, d_out), w).unwrap();
    let blocks = q8::quantize(&w).unwrap();
    let ours = q8::dequantize(&blocks);
    for j in 0..d_out {
        for kb in 0..d_in / 32 {
            let block = &blocks[[kb, j / 16]];
            let mut bytes = half::f16::from_f32(block.scales[j % 16])
                .to_le_bytes()
                .to_vec();
            bytes.extend((0..32).map(|r| block.q[r][j % 16] as u8));
            let gguf =
                kvlab::gguf::dequant::dequantize(kvlab::gguf::reader::GgmlType::Q8_0, &bytes, 32)
                    .unwrap();
            for r in 0..32 {
                let (k, v) = (kb * 32 + r, w[[kb * 32 + r, j]]);
                assert_eq!(gguf[r].to_bits(), ours[[k, j]].to_bits());
                // Q8_0's error: at most half a step (d/2) plus the f16 rounding of d.
                let d = block.scales[j % 16];
                assert!(
                    (ours[[k, j]] - v).abs() <= 0.5 * d + 127.0 * d * 1e-3,
                    "{k},{j}"
                );
            }
        }
    }
    // Quantizing the dequantized values gives the same blocks back: a Q8_0 GGUF imported
    // to f32 (`kvlab import-gguf`) and run with `--dtype int8` holds the file's blocks.
    assert_eq!(q8::quantize(&ours).unwrap(), blocks);
    // A scale of 0 for an all-zero run; NaN and huge weights refused, by name.
    let zeros = q8::quantize(&Array2::zeros((32, 16))).unwrap();
    assert!(zeros[[0, 0]].scales.iter().all(|&s| s == 0.0));
    let mut bad = Array2::zeros((32, 16));
    bad[[3, 4]] = f32::NAN;
    assert!(q8::quantize(&bad).unwrap_err().contains("not finite"));
    bad[[3, 4]] = 1e7;
    assert!(q8::quantize(&bad).unwrap_err().contains("f16"));
    assert!(q8::quantize(&Array2::zeros((48, 16)))
        .unwrap_err()
        .contains("blocks"));
}

#[test]
fn bf16_weights_compute_as_their_exact_f32_values() {
    // A bf16 matrix and the f32 matrix of its widened values: the same bits out.
    let (n, d_in, d_out) = (9, 64, 33);
    let (x, w) = inputs(n, d_in, d_out);
    let w_bf16: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
    let w_wide: Vec<f32> = w_bf16.iter().map(|v| v.to_f32()).collect();
    for isa in Isa::available() {
        let (mut a, mut b) = (vec![0.0; n * d_out], vec![0.0; n * d_out]);
        matmul_on(isa, &x, &w_bf16, &mut a, d_in, d_out);
        matmul_on(isa, &x, &w_wide, &mut b, d_in, d_out);
        assert_eq!(bits(&a), bits(&b), "{isa:?}");
    }
}

#[test]
fn bf16_widening_is_exact_for_every_bit_pattern() {
    for pattern in 0..=u16::MAX {
        let v = bf16::from_bits(pattern);
        let ours = Scalar::to_f32(v);
        let theirs = v.to_f32();
        assert!(
            ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan()),
            "pattern {pattern:#06x}: {ours} vs {theirs}"
        );
    }
}

#[test]
fn matmul_matches_a_f64_reference() {
    let (n, d_in, d_out) = (13, 100, 37);
    let (x, w) = inputs(n, d_in, d_out);
    for isa in Isa::available() {
        let mut out = vec![0.0; n * d_out];
        matmul_on(isa, &x, &w, &mut out, d_in, d_out);
        for r in 0..n {
            for j in 0..d_out {
                let want: f64 = (0..d_in)
                    .map(|k| x[r * d_in + k] as f64 * w[k * d_out + j] as f64)
                    .sum();
                let got = out[r * d_out + j] as f64;
                assert!(
                    (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "{isa:?} ({r},{j})"
                );
            }
        }
    }
}

#[test]
fn fma_peak_measures_every_version() {
    // Not a speed claim (that is `kvlab bench`'s job): the loop runs and counts.
    for isa in Isa::available() {
        let peak = kvlab::lab::roof::fma_peak_with(isa, 10_000);
        assert!(
            peak.gflop_s.is_finite() && peak.gflop_s > 0.0,
            "{isa:?}: {peak:?}"
        );
        assert_eq!(peak.lanes, isa.lanes());
    }
}
