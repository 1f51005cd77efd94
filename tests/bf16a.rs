//! The bf16a kernels (`src/simd/bf16a.rs`): `step` is `vdpbf16ps`'s lane, bit for bit,
//! on the CPU's own instruction where it has one; every version this CPU runs gives the
//! bits of the chain written straight off the `[d_in, d_out]` weights; and a row's outputs
//! do not depend on the rows beside it, in decode strips or in prefill's hundreds of rows.

mod common;

use common::matmul::every_isa_gives_the_portable_bits_row_by_row;
use kvlab::ops::matmul_on;
use kvlab::simd::bf16a::{
    self, flush, half_of, pair, round_to_bf16a, step, Bf16Rows, BF16A_COLS, BF16A_ROWS,
};
use kvlab::simd::bf16a_kernels::Kernel;
use kvlab::simd::{Bf16aBlock, Isa};
use proptest::prelude::*;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `[d_in, d_out]` weights as bf16a blocks (`[d_in / 32, d_out / 16]`, row after row).
fn blocks(w: &[f32], d_in: usize, d_out: usize) -> Vec<Bf16aBlock> {
    let mut out = Vec::new();
    for kb in 0..d_in / BF16A_ROWS {
        for jb in 0..d_out / BF16A_COLS {
            out.push(Bf16aBlock::from_fn(|k, j| {
                w[(kb * BF16A_ROWS + k) * d_out + jb * BF16A_COLS + j]
            }));
        }
    }
    out
}

/// The chain of `bf16a.rs`'s doc, read straight off the f32 values: each input and
/// weight rounded to bf16, then per output two fused multiply-adds per pair, odd first,
/// each result flushed if denormal.
fn by_definition(x: &[f32], w: &[f32], d_in: usize, d_out: usize) -> Vec<f32> {
    let n = x.len() / d_in;
    let r16 = |v: f32| round_to_bf16a(v).to_f32();
    let mut out = vec![0.0f32; n * d_out];
    for r in 0..n {
        for j in 0..d_out {
            let mut acc = 0.0f32;
            for p in 0..d_in / 2 {
                let (k0, k1) = (2 * p, 2 * p + 1);
                acc = flush(r16(x[r * d_in + k1]).mul_add(r16(w[k1 * d_out + j]), acc));
                acc = flush(r16(x[r * d_in + k0]).mul_add(r16(w[k0 * d_out + j]), acc));
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
            let u = rng.symmetric(1.0);
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
        n in 1usize..14,
        in_blocks in 1usize..5,
        out_blocks in 1usize..11,
        seed in any::<u64>(),
        strip in any::<(usize, usize)>(),
    ) {
        let (d_in, d_out) = (in_blocks * BF16A_ROWS, out_blocks * BF16A_COLS);
        let x_f32 = values(n * d_in, seed, 40.0);
        let w_f32 = values(d_in * d_out, seed ^ 1, 0.3);
        let x = bf16a::round_rows(&x_f32, d_in);
        let w = blocks(&w_f32, d_in, d_out);
        let want = by_definition(&x_f32, &w_f32, d_in, d_out);
        // A strip of whole blocks somewhere in the columns: tiles of 6 rows x 4 blocks and
        // their edges.
        let first = strip.0 % out_blocks;
        let count = 1 + strip.1 % (out_blocks - first);
        let (j0, width) = (first * BF16A_COLS, count * BF16A_COLS);
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

/// Values so small that their products and sums fall around f32's smallest normal,
/// 2^-126: the chains go in and out of the denormal range, and every version must flush
/// where the instruction does (an unflushed sum would carry on with different bits).
#[test]
fn every_kernel_flushes_denormal_results_where_the_definition_does() {
    let (n, d_in, d_out) = (7, 96, 80);
    let scale = |v: Vec<f32>, e: i32| v.into_iter().map(|x| x * 2f32.powi(e)).collect::<Vec<_>>();
    let x_f32 = scale(values(n * d_in, 11, 4.0), -62);
    let w_f32 = scale(values(d_in * d_out, 12, 4.0), -62);
    let want = by_definition(&x_f32, &w_f32, d_in, d_out);
    let flushed = want.iter().filter(|v| **v == 0.0).count();
    assert!(flushed > 0, "some outputs must flush to zero");
    let (x, w) = (bf16a::round_rows(&x_f32, d_in), blocks(&w_f32, d_in, d_out));
    for kernel in Kernel::available() {
        let mut out = vec![f32::NAN; n * d_out];
        kernel.strip(&x, &w, d_out, 0, &mut out);
        assert_eq!(bits(&out), bits(&want), "{kernel:?}");
    }
}

/// `step` against the instruction itself, lane by lane, on random pairs and sums: bf16
/// values with exponents from tiny to huge (products that flush to zero or overflow to
/// infinity included), infinities and NaNs, sums of any sign and size. Denormal bf16
/// inputs are left out: the kernels never see one (`round_to_bf16a` flushes them).
#[cfg(target_arch = "x86_64")]
#[test]
fn step_is_the_instruction_bit_for_bit() {
    if !std::arch::is_x86_feature_detected!("avx512bf16") {
        eprintln!("this CPU has no avx512bf16: step checked against the kernels only");
        return;
    }
    let mut rng = kvlab::rng::Rng::new(2026);
    let bf = |rng: &mut kvlab::rng::Rng| {
        let r = rng.next_u64();
        let bits = match r % 64 {
            0 => 0x7f80,                                                           // infinity
            1 => 0x7fc1,                                                           // NaN
            2 => 0,                                                                // zero
            _ => ((r >> 8) as u16 & 0x807f) | (((r >> 24) % 254 + 1) as u16) << 7, // normal
        };
        half::bf16::from_bits(bits ^ (((r >> 40) as u16 & 1) << 15))
    };
    let (mut lanes, mut nan_lanes) = (0, 0);
    // The orders the manual does not give, counted where they differ: the test must be
    // able to tell them apart from the one it does.
    let (mut even_first_differs, mut one_sum_differs) = (0, 0);
    for _ in 0..200_000 {
        let x: [u32; 16] = std::array::from_fn(|_| pair(bf(&mut rng), bf(&mut rng)));
        let w: [u32; 16] = std::array::from_fn(|_| pair(bf(&mut rng), bf(&mut rng)));
        // Half any bits at all, half of a size the products reach (exponents 2^-27..2^28).
        let acc: [f32; 16] = std::array::from_fn(|_| {
            let r = rng.next_u64();
            let any = r as u32;
            let near = (any & 0x807f_ffff) | (((r >> 32) % 56 + 100) as u32) << 23;
            flush(f32::from_bits(if r >> 63 == 1 { any } else { near }))
        });
        // SAFETY: avx512bf16 (and so avx512f) was detected above; the arrays are 64 bytes.
        let hw = unsafe { instruction(&acc, &x, &w) };
        for j in 0..16 {
            let ours = step(acc[j], x[j], w[j]);
            lanes += 1;
            let (x0, x1, w0, w1) = (
                half_of(x[j], 0),
                half_of(x[j], 1),
                half_of(w[j], 0),
                half_of(w[j], 1),
            );
            let even_first = flush(x1.mul_add(w1, flush(x0.mul_add(w0, acc[j]))));
            let one_sum = flush(acc[j] + (x0 as f64 * w0 as f64 + x1 as f64 * w1 as f64) as f32);
            let differs =
                |v: f32| v.to_bits() != hw[j].to_bits() && !(v.is_nan() && hw[j].is_nan());
            even_first_differs += differs(even_first) as usize;
            one_sum_differs += differs(one_sum) as usize;
            if ours.is_nan() || hw[j].is_nan() {
                // A NaN's payload is the instruction's choice; that it is NaN is not.
                assert!(
                    ours.is_nan() && hw[j].is_nan(),
                    "lane {j}: {} {:#x} {:#x}: {ours} vs {}",
                    acc[j],
                    x[j],
                    w[j],
                    hw[j]
                );
                nan_lanes += 1;
            } else {
                assert_eq!(
                    ours.to_bits(),
                    hw[j].to_bits(),
                    "acc {:e} x {:#x} w {:#x}: step {ours:e}, vdpbf16ps {:e}",
                    acc[j],
                    x[j],
                    w[j],
                    hw[j]
                );
            }
        }
    }
    eprintln!(
        "{lanes} lanes equal to vdpbf16ps ({nan_lanes} of them NaN); the even pair first would \
         differ in {even_first_differs}, the two products summed first in {one_sum_differs}"
    );
    assert!(even_first_differs > 0 && one_sum_differs > 0);
}

/// One `vdpbf16ps` on 16 lanes.
///
/// # Safety
/// The CPU must support `avx512f` and `avx512bf16`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn instruction(acc: &[f32; 16], x: &[u32; 16], w: &[u32; 16]) -> [f32; 16] {
    use std::arch::x86_64::*;
    let mut out = [0.0f32; 16];
    // SAFETY: each array is 64 bytes; a 512-bit integer vector and `__m512bh` have the
    // same size and every bit pattern is valid in both.
    unsafe {
        let x = std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(x.as_ptr().cast()));
        let w = std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(w.as_ptr().cast()));
        _mm512_storeu_ps(
            out.as_mut_ptr(),
            _mm512_dpbf16_ps(_mm512_loadu_ps(acc.as_ptr()), x, w),
        );
    }
    out
}

#[test]
fn this_cpu_runs_the_kernels_it_has() {
    let kernels = Kernel::available();
    eprintln!("bf16a versions checked against Portable: {kernels:?}");
    assert_eq!(kernels.last(), Some(&Kernel::Portable));
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512bf16") {
            assert_eq!(kernels[0], Kernel::Avx512Bf16);
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            assert!(kernels.contains(&Kernel::Avx2));
        }
    }
}

/// Through the matmul: 1 to 300 rows (decode strips and prefill, which bf16a never packs
/// into f32 panels), every ISA the portable bits, and each row alone the bits it gets
/// among the others.
#[test]
fn matmul_rows_are_independent_in_every_version() {
    for (n, d_in, d_out) in [(1, 64, 48), (7, 96, 160), (33, 64, 32), (300, 128, 96)] {
        let x = values(n * d_in, n as u64, 3.0);
        let w = blocks(&values(d_in * d_out, 9, 0.2), d_in, d_out);
        every_isa_gives_the_portable_bits_row_by_row(&x, &w, d_in, d_out);
    }
}

/// Rounding the activations to bf16 moves a matmul's outputs by about a bf16 step of `x`:
/// close to the bf16 (f32-activation) matmul on the same weights, never its bits.
#[test]
fn bf16a_is_near_the_bf16_matmul_but_not_its_bits() {
    let (n, d_in, d_out) = (4, 256, 64);
    let x = values(n * d_in, 5, 2.0);
    let w_f32 = values(d_in * d_out, 6, 0.1);
    let w = blocks(&w_f32, d_in, d_out);
    let w_bf16: Vec<half::bf16> = w_f32.iter().map(|&v| round_to_bf16a(v)).collect();
    let (mut a16, mut f32_act) = (vec![0.0; n * d_out], vec![0.0; n * d_out]);
    matmul_on(Isa::detected(), &x, &w, &mut a16, d_in, d_out);
    matmul_on(Isa::detected(), &x, &w_bf16, &mut f32_act, d_in, d_out);
    let diff = a16
        .iter()
        .zip(&f32_act)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    let scale = f32_act.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(
        diff > 0.0 && diff < 0.02 * scale,
        "max |bf16a - bf16| {diff} against {scale}"
    );
}

/// A NaN or infinite activation gives non-finite outputs (the sampler refuses them, as
/// it would the f32 model's), in every version; a denormal one counts as zero.
#[test]
fn non_finite_activations_stay_non_finite_and_denormals_are_zero() {
    let (d_in, d_out) = (64, 32);
    let w = blocks(&values(d_in * d_out, 2, 0.5), d_in, d_out);
    for isa in Isa::available() {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = values(d_in, 3, 1.0);
            x[40] = bad;
            let mut out = vec![0.0; d_out];
            matmul_on(isa, &x, &w, &mut out, d_in, d_out);
            assert!(out.iter().all(|v| !v.is_finite()), "{isa:?} {bad}: {out:?}");
        }
        let mut x = values(d_in, 3, 1.0);
        let (mut plain, mut tiny) = (vec![0.0; d_out], vec![0.0; d_out]);
        x[7] = 0.0;
        matmul_on(isa, &x, &w, &mut plain, d_in, d_out);
        x[7] = f32::from_bits(1); // the smallest denormal
        matmul_on(isa, &x, &w, &mut tiny, d_in, d_out);
        assert_eq!(bits(&plain), bits(&tiny), "{isa:?}");
    }
}

/// The activations are rounded once per matmul, to nearest with ties to even, paired as
/// the instruction reads them (the even input in the low half).
#[test]
fn activations_are_rounded_and_paired() {
    let x: Vec<f32> = (0..64).map(|i| 1.0 + i as f32 * 2f32.powi(-9)).collect();
    let rows: Bf16Rows = bf16a::round_rows(&x, 32);
    assert_eq!((rows.n, rows.pairs.len()), (2, 32));
    // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even is 1. 1 + 3 · 2^-9 rounds up.
    assert_eq!(bf16a::half_of(rows.pairs[0], 0), 1.0);
    assert_eq!(bf16a::half_of(rows.pairs[1], 0), 1.0);
    assert_eq!(bf16a::half_of(rows.pairs[1], 1), 1.0 + 2f32.powi(-7));
    assert_eq!(bf16a::half_of(rows.pairs[2], 0), 1.0 + 2f32.powi(-7));
}
