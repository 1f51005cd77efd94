//! The AVX-512 kernels: 16 f32 lanes per register, 32 registers.
//!
//! Prefill tile: 8 rows x 32 columns of sums = 16 registers that stay put for
//! the whole `k` loop; each step loads 2 panel vectors and broadcasts 8 `x`
//! values, for 16 fused multiply-adds (the FMA units, not the loads, are busy).
//!
//! int8 decode strip: one 16-lane register per int8 block (16 columns), its sums
//! kept in registers over the block's 32 rows; [`Q8_GROUP`] blocks side by side, so
//! that as many independent chains hide the fused multiply-add's latency.

use super::elem::{Scalar, PANEL};
use super::q8::{Q8Block, Q8_COLS, Q8_ROWS};
use std::arch::x86_64::*;

/// Rows per prefill tile.
pub const TILE_ROWS: usize = 8;

/// `tile[r][c] = Σ_k x[r][k] · panel[k][c]`: see [`super::Isa::tile`] (which checks the shapes).
///
/// # Safety
/// The CPU must support `avx512f`.
#[target_feature(enable = "avx512f")]
pub unsafe fn tile<W: Scalar>(x: &[f32], d_in: usize, panel: &[W], tile: &mut [f32]) {
    let rows = x.len() / d_in;
    if rows == TILE_ROWS {
        tile_of::<TILE_ROWS, W>(x, d_in, panel, tile);
    } else {
        // Leftover rows one at a time: same chain per element, fewer side by side.
        for (x_row, tile_row) in x.chunks_exact(d_in).zip(tile.chunks_exact_mut(PANEL)) {
            tile_of::<1, W>(x_row, d_in, panel, tile_row);
        }
    }
}

#[target_feature(enable = "avx512f")]
fn tile_of<const R: usize, W: Scalar>(x: &[f32], d_in: usize, panel: &[W], tile: &mut [f32]) {
    let x_rows: [&[f32]; R] = std::array::from_fn(|r| &x[r * d_in..][..d_in]);
    let panel = &panel[..d_in * PANEL];
    let mut acc = [[_mm512_setzero_ps(); 2]; R]; // [R][32 columns]
    for (k, w_k) in panel.chunks_exact(PANEL).enumerate() {
        // SAFETY: `w_k` is one panel row of PANEL = 32 weights: two 16-lane loads (widened
        // to f32 when the panel is bf16), and the CPU has avx512f (this function's contract).
        let (w_lo, w_hi) = unsafe { (W::load16(w_k.as_ptr()), W::load16(w_k.as_ptr().add(16))) };
        for (acc_r, x_r) in acc.iter_mut().zip(&x_rows) {
            let x_rk = _mm512_set1_ps(x_r[k]);
            acc_r[0] = _mm512_fmadd_ps(x_rk, w_lo, acc_r[0]);
            acc_r[1] = _mm512_fmadd_ps(x_rk, w_hi, acc_r[1]);
        }
    }
    for (acc_r, out) in acc.iter().zip(tile.chunks_exact_mut(PANEL)) {
        // SAFETY: `out` is one tile row of PANEL = 32 f32: two 16-lane stores.
        unsafe {
            _mm512_storeu_ps(out.as_mut_ptr(), acc_r[0]);
            _mm512_storeu_ps(out.as_mut_ptr().add(16), acc_r[1]);
        }
    }
}

/// `out[r][c] = Σ_k x[r][k] · w[k][j0 + c]`: see [`super::Isa::strip`] (which checks the shapes).
///
/// # Safety
/// The CPU must support `avx512f`.
#[target_feature(enable = "avx512f")]
pub unsafe fn strip<W: Scalar>(
    x: &[f32],
    d_in: usize,
    w: &[W],
    d_out: usize,
    j0: usize,
    out: &mut [f32],
) {
    let n = x.len() / d_in;
    let width = out.len() / n;
    let vector_cols = width / 16 * 16;
    out.fill(0.0);
    // Four weight rows at a time: each sum is loaded and stored once per four FMAs
    // instead of once per FMA (with several rows of `x`, the loads and stores of the
    // sums, not the weight stream, were the limit). The chain of each sum is unchanged:
    // `k, k + 1, k + 2, k + 3` in order, one FMA each.
    let k4 = d_in / 4 * 4;
    for k in (0..k4).step_by(4) {
        let w_k: [&[W]; 4] = std::array::from_fn(|u| &w[(k + u) * d_out + j0..][..width]);
        for (x_r, out_r) in x.chunks_exact(d_in).zip(out.chunks_exact_mut(width)) {
            let x_rk: [__m512; 4] = std::array::from_fn(|u| _mm512_set1_ps(x_r[k + u]));
            for c in (0..vector_cols).step_by(16) {
                // SAFETY: c + 16 <= vector_cols <= width = w_k[u].len() = out_r.len(),
                // and the CPU has the feature (this function's contract).
                unsafe {
                    let mut acc = _mm512_loadu_ps(out_r.as_ptr().add(c));
                    for u in 0..4 {
                        acc = _mm512_fmadd_ps(x_rk[u], W::load16(w_k[u].as_ptr().add(c)), acc);
                    }
                    _mm512_storeu_ps(out_r.as_mut_ptr().add(c), acc);
                }
            }
            for c in vector_cols..width {
                for u in 0..4 {
                    out_r[c] = x_r[k + u].mul_add(w_k[u][c].to_f32(), out_r[c]);
                }
            }
        }
    }
    for k in k4..d_in {
        let w_k = &w[k * d_out + j0..][..width]; // a contiguous run of weight row k
                                                 // Row by row: for n > 1, the rows after the first find `w_k` in L1.
        for (x_r, out_r) in x.chunks_exact(d_in).zip(out.chunks_exact_mut(width)) {
            let x_rk = _mm512_set1_ps(x_r[k]);
            for c in (0..vector_cols).step_by(16) {
                // SAFETY: c + 16 <= vector_cols <= width = w_k.len() = out_r.len(),
                // and the CPU has the feature (this function's contract).
                unsafe {
                    let w_kc = W::load16(w_k.as_ptr().add(c));
                    let acc = _mm512_loadu_ps(out_r.as_ptr().add(c));
                    _mm512_storeu_ps(out_r.as_mut_ptr().add(c), _mm512_fmadd_ps(x_rk, w_kc, acc));
                }
            }
            for c in vector_cols..width {
                out_r[c] = x_r[k].mul_add(w_k[c].to_f32(), out_r[c]);
            }
        }
    }
}

/// int8 blocks whose chains run side by side in [`strip_q8`].
pub const Q8_GROUP: usize = 4;

// ANCHOR: strip_q8
/// [`super::portable::strip_q8`]'s sums (same chains, same order), 16 columns a register.
///
/// # Safety
/// The CPU must support `avx512f`.
#[target_feature(enable = "avx512f")]
pub unsafe fn strip_q8(
    x: &[f32],
    d_in: usize,
    w: &[Q8Block],
    d_out: usize,
    j0: usize,
    out: &mut [f32],
) {
    let width = out.len() / (x.len() / d_in);
    let blocks_per_row = d_out / Q8_COLS;
    out.fill(0.0);
    for kb in 0..d_in / Q8_ROWS {
        // This strip's blocks of block row `kb`: contiguous in memory.
        let row = &w[kb * blocks_per_row + j0 / Q8_COLS..][..width / Q8_COLS];
        let (groups, rest) = row.as_chunks::<Q8_GROUP>();
        for (g, group) in groups.iter().enumerate() {
            q8_blocks(x, d_in, kb, group, g * Q8_GROUP * Q8_COLS, width, out);
        }
        let done = groups.len() * Q8_GROUP;
        for (i, block) in rest.iter().enumerate() {
            let c0 = (done + i) * Q8_COLS;
            q8_blocks(x, d_in, kb, std::array::from_ref(block), c0, width, out);
        }
    }
}

/// Adds block row `kb` of `G` neighbouring blocks (columns `c0..c0 + 16 G` of the
/// strip) into `out`, for every row of `x`.
#[target_feature(enable = "avx512f")]
fn q8_blocks<const G: usize>(
    x: &[f32],
    d_in: usize,
    kb: usize,
    blocks: &[Q8Block; G],
    c0: usize,
    width: usize,
    out: &mut [f32],
) {
    let mut scales = [_mm512_setzero_ps(); G];
    for (s, block) in scales.iter_mut().zip(blocks) {
        // SAFETY: `block.scales` is 16 f32.
        *s = unsafe { _mm512_loadu_ps(block.scales.as_ptr()) };
    }
    for (x_r, out_r) in x.chunks_exact(d_in).zip(out.chunks_exact_mut(width)) {
        let x_r = &x_r[kb * Q8_ROWS..][..Q8_ROWS];
        let out_g = &mut out_r[c0..][..G * Q8_COLS];
        let mut acc = [_mm512_setzero_ps(); G]; // [G][16 columns]
        for (a, o) in acc.iter_mut().zip(out_g.chunks_exact(Q8_COLS)) {
            // SAFETY: `o` is 16 f32.
            *a = unsafe { _mm512_loadu_ps(o.as_ptr()) };
        }
        for (k, &x_rk) in x_r.iter().enumerate() {
            let x_rk = _mm512_set1_ps(x_rk);
            for ((a, block), &scale) in acc.iter_mut().zip(blocks).zip(&scales) {
                // SAFETY: `block.q[k]` is 16 i8 (one 128-bit load).
                let q = unsafe { _mm_loadu_si128(block.q[k].as_ptr() as *const __m128i) };
                // i8 -> i32 -> f32 (exact), times the column scales (exact: see `q8`).
                let w_k = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), scale);
                *a = _mm512_fmadd_ps(x_rk, w_k, *a);
            }
        }
        for (a, o) in acc.iter().zip(out_g.chunks_exact_mut(Q8_COLS)) {
            // SAFETY: `o` is 16 f32.
            unsafe { _mm512_storeu_ps(o.as_mut_ptr(), *a) };
        }
    }
}
// ANCHOR_END: strip_q8
