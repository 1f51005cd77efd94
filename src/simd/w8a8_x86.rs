//! The W8A8 strips on x86: integer dot products of 32 activation codes by 32 weight codes
//! per output, then one fused multiply-add by the two scales (see `w8a8.rs` for why
//! they give [`super::w8a8::strip`]'s bits).

use super::q8::{Q8_COLS, Q8_ROWS};
use super::w8a8::{Q8Rows, W8a8Block, LANE_CODES};
use std::arch::x86_64::*;

/// Groups of four codes in a block's 32 rows.
const GROUPS: usize = Q8_ROWS / LANE_CODES;

// ANCHOR: avx512
/// AVX-512 VNNI. `vpdpbusd(acc, a, b)` adds, in each 32-bit lane, the four products of
/// *unsigned* bytes of `a` by *signed* bytes of `b`. Our weight codes are signed, so the
/// kernel reads `wq + 128` (one XOR with 0x80 flips the sign bit: `-127..=127` becomes
/// `1..=255`) and takes the extra `128 · Σ xq` back off at the end (the block's code
/// sum, [`Q8Rows::sums`]): `Σ xq · wq = Σ xq · (wq + 128) − 128 · Σ xq`, exact in int32.
///
/// The loops run block by block, and for each block over the rows of `x`: the block's
/// eight 64-byte vectors stay in registers while every row (one in decode, hundreds in
/// prefill) takes its dot products with them.
///
/// # Safety
/// The CPU must support `avx512f`, `avx512bw` and `avx512vnni`; the shapes must be those
/// `Kernel::strip` checks.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn strip_avx512(x: &Q8Rows, w: &[W8a8Block], d_out: usize, j0: usize, out: &mut [f32]) {
    let width = out.len() / x.n;
    let blocks_per_row = d_out / Q8_COLS;
    let sign_bit = _mm512_set1_epi8(-128);
    out.fill(0.0);
    for kb in 0..x.d_in / Q8_ROWS {
        let row = &w[kb * blocks_per_row + j0 / Q8_COLS..][..width / Q8_COLS];
        for (c, block) in row.iter().enumerate() {
            // SAFETY: `block.q[g]` is 64 bytes (16 columns x 4 codes).
            let w_u8: [__m512i; GROUPS] = std::array::from_fn(|g| unsafe {
                _mm512_xor_si512(_mm512_loadu_si512(block.q[g].as_ptr().cast()), sign_bit)
            });
            // SAFETY: `block.scales` is 16 f32.
            let dw = unsafe { _mm512_loadu_ps(block.scales.as_ptr()) };
            for (r, out_r) in out.chunks_exact_mut(width).enumerate() {
                let (codes, dx) = x.block(r, kb);
                let sum = x.sums[r * (x.d_in / Q8_ROWS) + kb];
                // Two accumulators: two independent chains of `vpdpbusd` (integers:
                // any grouping gives the same sum).
                let mut acc = [_mm512_setzero_si512(); 2];
                for (g, w_g) in w_u8.iter().enumerate() {
                    // SAFETY: `codes[4g..4g + 4]` is in bounds (g < 8, 32 codes).
                    let four =
                        unsafe { std::ptr::read_unaligned(codes[g * 4..].as_ptr().cast::<i32>()) };
                    acc[g % 2] = _mm512_dpbusd_epi32(acc[g % 2], *w_g, _mm512_set1_epi32(four));
                }
                let isum = _mm512_sub_epi32(
                    _mm512_add_epi32(acc[0], acc[1]),
                    _mm512_set1_epi32(128 * sum),
                );
                let o = out_r[c * Q8_COLS..][..Q8_COLS].as_mut_ptr();
                let scale = _mm512_mul_ps(_mm512_set1_ps(dx), dw); // exact: see w8a8.rs
                                                                   // SAFETY: `o` points to 16 f32 of this row's strip.
                unsafe {
                    let acc_f = _mm512_loadu_ps(o);
                    _mm512_storeu_ps(o, _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(isum), acc_f));
                }
            }
        }
    }
}
// ANCHOR_END: avx512

/// AVX2 (no dot-product instruction): `vpmaddubsw` multiplies unsigned by signed bytes
/// and adds neighbouring pairs into 16-bit lanes, then `vpmaddwd` by ones adds those pairs
/// into 32-bit lanes: four products per lane, as `vpdpbusd`. The unsigned operand is
/// `|xq|` and the signed one `wq` with `xq`'s sign (`vpsignb`), llama.cpp's trick: a
/// pair of products is at most `2 · 127 · 127 = 32,258`, inside the 16-bit lane (the
/// `+128` offset of the AVX-512 kernel would overflow it here). A block's 16 columns are
/// two 256-bit halves.
///
/// # Safety
/// The CPU must support `avx2`; the shapes must be those `Kernel::strip` checks.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn strip_avx2(x: &Q8Rows, w: &[W8a8Block], d_out: usize, j0: usize, out: &mut [f32]) {
    let width = out.len() / x.n;
    let blocks_per_row = d_out / Q8_COLS;
    let ones = _mm256_set1_epi16(1);
    out.fill(0.0);
    for kb in 0..x.d_in / Q8_ROWS {
        let row = &w[kb * blocks_per_row + j0 / Q8_COLS..][..width / Q8_COLS];
        for (c, block) in row.iter().enumerate() {
            for (r, out_r) in out.chunks_exact_mut(width).enumerate() {
                let (codes, dx) = x.block(r, kb);
                for half in 0..2 {
                    let mut acc = _mm256_setzero_si256();
                    for g in 0..GROUPS {
                        // SAFETY: `block.q[g][8 half..]` is 8 columns x 4 codes = 32 bytes;
                        // `codes[4g..4g + 4]` is in bounds.
                        let (w_g, four) = unsafe {
                            (
                                _mm256_loadu_si256(block.q[g][half * 8..].as_ptr().cast()),
                                std::ptr::read_unaligned(codes[g * 4..].as_ptr().cast::<i32>()),
                            )
                        };
                        let x_g = _mm256_set1_epi32(four);
                        let pairs = _mm256_maddubs_epi16(
                            _mm256_sign_epi8(x_g, x_g),
                            _mm256_sign_epi8(w_g, x_g),
                        );
                        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
                    }
                    // SAFETY: 8 scales from `8 half`.
                    let dw = unsafe { _mm256_loadu_ps(block.scales[half * 8..].as_ptr()) };
                    let scale = _mm256_mul_ps(_mm256_set1_ps(dx), dw);
                    let o = out_r[c * Q8_COLS + half * 8..][..8].as_mut_ptr();
                    // SAFETY: `o` points to 8 f32 of this row's strip.
                    unsafe {
                        let acc_f = _mm256_loadu_ps(o);
                        _mm256_storeu_ps(o, _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(acc), acc_f));
                    }
                }
            }
        }
    }
}
