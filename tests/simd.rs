//! The hand-written SIMD kernels (`src/simd/`) against the portable one, bit for
//! bit, for every version this CPU can run, f32 and bf16 weights, awkward shapes
//! (tails of rows and columns, decode strips and prefill panels); and the exact
//! bf16 → f32 widening. On a CPU without AVX-512 the AVX-512 cases cannot run:
//! the test prints which versions it checked.

use half::bf16;
use kvlab::ops::matmul_on;
use kvlab::simd::{Isa, WeightElem};

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
    let isas = Isa::available();
    eprintln!("versions checked against Portable: {isas:?}");
    for (n, d_in, d_out) in SHAPES {
        let (x, w) = inputs(n, d_in, d_out);
        let w = w_of(&w);
        let mut reference = vec![0.0; n * d_out];
        matmul_on(Isa::Portable, &x, &w, &mut reference, d_in, d_out);
        for &isa in &isas {
            let mut out = vec![f32::NAN; n * d_out];
            matmul_on(isa, &x, &w, &mut out, d_in, d_out);
            assert_eq!(
                bits(&out),
                bits(&reference),
                "{isa:?} at n={n} d_in={d_in} d_out={d_out}"
            );
            // Row independence within the version: each row alone (decode) = in the batch.
            for r in [0, n / 2, n - 1] {
                let mut single = vec![0.0; d_out];
                matmul_on(isa, &x[r * d_in..][..d_in], &w, &mut single, d_in, d_out);
                assert_eq!(
                    bits(&single),
                    bits(&out[r * d_out..][..d_out]),
                    "{isa:?} row {r} at n={n} d_in={d_in} d_out={d_out}"
                );
            }
        }
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
        let ours = WeightElem::to_f32(v);
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
