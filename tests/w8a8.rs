//! The W8A8 kernels (`src/simd/w8a8.rs`): every version this CPU runs gives the portable
//! strip's bits; the portable strip is the chain the module writes down (integer dot
//! products of Q8_0 codes, one fused multiply-add per block), checked against a direct
//! reading of the Q8Blocks it was reordered from; and a row's outputs do not depend on
//! the rows beside it, in decode strips or in prefill's hundreds of rows.

mod common;

use common::matmul::every_isa_gives_the_portable_bits_row_by_row;
use kvlab::ops::matmul_on;
use kvlab::simd::q8::{self, Q8_COLS, Q8_ROWS};
use kvlab::simd::w8a8::{self, Q8Rows};
use kvlab::simd::w8a8_kernels::Kernel;
use kvlab::simd::{Isa, W8a8Block};
use ndarray::Array2;
use proptest::prelude::*;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `[d_in, d_out]` random weights as W8A8 blocks, and the Q8Blocks they came from.
fn blocks(w: &[f32], d_in: usize, d_out: usize) -> (Vec<W8a8Block>, Array2<q8::Q8Block>) {
    let q8 = q8::quantize(&Array2::from_shape_vec((d_in, d_out), w.to_vec()).unwrap()).unwrap();
    let ours = q8.iter().map(W8a8Block::from_q8).collect();
    (ours, q8)
}

/// The chain of `w8a8.rs`'s doc, read straight off the Q8Blocks: `isum` in i64, then
/// `fma(dx · dw, isum, acc)` block by block.
fn by_definition(x: &Q8Rows, q8: &Array2<q8::Q8Block>, d_out: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; x.n * d_out];
    for r in 0..x.n {
        for j in 0..d_out {
            let mut acc = 0.0f32;
            for kb in 0..x.d_in / Q8_ROWS {
                let (codes, dx) = x.block(r, kb);
                let block = &q8[[kb, j / Q8_COLS]];
                let isum: i64 = (0..Q8_ROWS)
                    .map(|k| codes[k] as i64 * block.q[k][j % Q8_COLS] as i64)
                    .sum();
                assert!(isum.abs() < 1 << 24, "exact in f32");
                acc = (dx * block.scales[j % Q8_COLS]).mul_add(isum as f32, acc);
            }
            out[r * d_out + j] = acc;
        }
    }
    out
}

fn values(len: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut rng = kvlab::rng::Rng::new(seed);
    (0..len)
        .map(|_| {
            // Mostly small, some at the block's extreme: codes of ±127 and 0 both occur.
            let u = (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            if rng.next_u64().is_multiple_of(17) {
                0.0
            } else {
                u * u * u * scale
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_kernel_gives_the_definitions_bits(
        n in 1usize..6,
        in_blocks in 1usize..5,
        out_blocks in 1usize..6,
        seed in any::<u64>(),
        strip in any::<(usize, usize)>(),
    ) {
        let (d_in, d_out) = (in_blocks * Q8_ROWS, out_blocks * Q8_COLS);
        let x = w8a8::quantize_rows(&values(n * d_in, seed, 40.0), d_in);
        let (w, q8) = blocks(&values(d_in * d_out, seed ^ 1, 0.3), d_in, d_out);
        let want = by_definition(&x, &q8, d_out);
        // A strip of whole blocks somewhere in the columns.
        let first = strip.0 % out_blocks;
        let count = 1 + strip.1 % (out_blocks - first);
        let (j0, width) = (first * Q8_COLS, count * Q8_COLS);
        for kernel in Kernel::available() {
            let mut out = vec![f32::NAN; n * width];
            kernel.strip(&x, &w, d_out, j0, &mut out);
            for r in 0..n {
                prop_assert_eq!(
                    bits(&out[r * width..][..width]),
                    bits(&want[r * d_out + j0..][..width]),
                    "{:?}, row {}", kernel, r
                );
            }
        }
    }
}

#[test]
fn this_cpu_runs_the_kernels_it_has() {
    let kernels = Kernel::available();
    eprintln!("W8A8 versions checked against Portable: {kernels:?}");
    assert_eq!(kernels.last(), Some(&Kernel::Portable));
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("avx512bw")
        {
            assert_eq!(kernels[0], Kernel::Avx512Vnni);
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            assert!(kernels.contains(&Kernel::Avx2));
        }
    }
}

/// Through the matmul: 1 to 300 rows (decode strips and prefill, which W8A8 never packs
/// into f32 panels), every ISA the portable bits, and each row alone the bits it gets
/// among the others.
#[test]
fn matmul_rows_are_independent_in_every_version() {
    for (n, d_in, d_out) in [(1, 64, 48), (5, 96, 160), (33, 64, 32), (300, 128, 96)] {
        let x = values(n * d_in, n as u64, 3.0);
        let w = blocks(&values(d_in * d_out, 9, 0.2), d_in, d_out).0;
        every_isa_gives_the_portable_bits_row_by_row(&x, &w, d_in, d_out);
    }
}

/// Quantizing the activations moves a matmul's outputs by about a Q8_0 step of `x` and
/// of `w`: close to the f32-activation int8 matmul, never equal to it.
#[test]
fn w8a8_is_near_the_int8_matmul_but_not_its_bits() {
    let (n, d_in, d_out) = (4, 256, 64);
    let x = values(n * d_in, 5, 2.0);
    let w_f32 = values(d_in * d_out, 6, 0.1);
    let (w, q8) = blocks(&w_f32, d_in, d_out);
    let q8 = q8.into_raw_vec_and_offset().0;
    let (mut a8, mut f32_act) = (vec![0.0; n * d_out], vec![0.0; n * d_out]);
    matmul_on(Isa::detected(), &x, &w, &mut a8, d_in, d_out);
    matmul_on(Isa::detected(), &x, &q8, &mut f32_act, d_in, d_out);
    let diff = a8
        .iter()
        .zip(&f32_act)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    let scale = f32_act.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(
        diff > 0.0 && diff < 0.02 * scale,
        "max |w8a8 - int8| {diff} against {scale}"
    );
}

/// A block with no Q8_0 form (NaN, infinity, or beyond f16 · 127) gets a NaN scale: its
/// outputs are NaN, as the f32 model's would not be finite, never a silent zero.
#[test]
fn activations_without_a_q8_0_form_give_nan_outputs() {
    let (d_in, d_out) = (64, 16);
    let (w, _) = blocks(&values(d_in * d_out, 2, 0.5), d_in, d_out);
    for bad in [f32::NAN, f32::INFINITY, 1.0e10] {
        let mut x = values(d_in, 3, 1.0);
        x[40] = bad;
        let rows = w8a8::quantize_rows(&x, d_in);
        assert!(
            rows.scales[0].is_finite() && rows.scales[1].is_nan(),
            "{bad}"
        );
        let mut out = vec![0.0; d_out];
        matmul_on(Isa::detected(), &x, &w, &mut out, d_in, d_out);
        assert!(out.iter().all(|v| v.is_nan()), "{bad}: {out:?}");
    }
}

/// The codes of a row are in `-127..=127` (the AVX2 kernel's 16-bit pair sums and the
/// AVX-512 kernel's +128 offset rely on it), and each block's sum is its codes' sum.
#[test]
fn activation_codes_stay_in_range() {
    let x = values(32 * 50, 8, 1000.0);
    let rows = w8a8::quantize_rows(&x, 32 * 5);
    assert_eq!((rows.n, rows.scales.len()), (10, 50));
    assert!(rows.codes.iter().all(|&c| c != i8::MIN));
    assert!(rows.codes.contains(&127) || rows.codes.contains(&-127));
    for (b, codes) in rows.codes.chunks(32).enumerate() {
        assert_eq!(rows.sums[b], codes.iter().map(|&c| c as i32).sum::<i32>());
    }
}
