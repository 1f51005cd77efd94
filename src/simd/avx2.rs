//! The AVX2 + FMA kernels: 8 f32 lanes per register, 16 registers.
//!
//! Prefill tile: 6 rows x 16 columns of sums = 12 registers (plus 2 for the
//! panel and 1 for the broadcast); a 32-column panel is done in two halves.
//!
//! int8 decode strip: two 8-lane registers per int8 block (16 columns), two blocks
//! side by side, their sums kept in registers over the block's 32 rows.

use super::elem::{Scalar, PANEL};
use super::q8::{Q8Block, Q8_COLS, Q8_ROWS};
use std::arch::x86_64::*;

/// Rows per prefill tile.
pub const TILE_ROWS: usize = 6;

/// `tile[r][c] = Σ_k x[r][k] · panel[k][c]`: see [`super::Isa::tile`] (which checks the shapes).
///
/// # Safety
/// The CPU must support `avx2` and `fma`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn tile<W: Scalar>(x: &[f32], d_in: usize, panel: &[W], tile: &mut [f32]) {
    let rows = x.len() / d_in;
    for half in [0, PANEL / 2] {
        if rows == TILE_ROWS {
            half_tile::<TILE_ROWS, W>(x, d_in, panel, half, tile);
        } else {
            for (x_row, tile_row) in x.chunks_exact(d_in).zip(tile.chunks_exact_mut(PANEL)) {
                half_tile::<1, W>(x_row, d_in, panel, half, tile_row);
            }
        }
    }
}

/// Columns `half..half + 16` of the tile.
#[target_feature(enable = "avx2,fma")]
fn half_tile<const R: usize, W: Scalar>(
    x: &[f32],
    d_in: usize,
    panel: &[W],
    half: usize,
    tile: &mut [f32],
) {
    let x_rows: [&[f32]; R] = std::array::from_fn(|r| &x[r * d_in..][..d_in]);
    let panel = &panel[..d_in * PANEL];
    let mut acc = [[_mm256_setzero_ps(); 2]; R]; // [R][16 columns]
    for (k, w_k) in panel.chunks_exact(PANEL).enumerate() {
        let w_k = &w_k[half..half + 16];
        // SAFETY: `w_k` is 16 weights: two 8-lane loads (widened to f32 when the panel
        // is bf16), and the CPU has avx2 and fma (this function's contract).
        let (w_lo, w_hi) = unsafe { (W::load8(w_k.as_ptr()), W::load8(w_k.as_ptr().add(8))) };
        for (acc_r, x_r) in acc.iter_mut().zip(&x_rows) {
            let x_rk = _mm256_set1_ps(x_r[k]);
            acc_r[0] = _mm256_fmadd_ps(x_rk, w_lo, acc_r[0]);
            acc_r[1] = _mm256_fmadd_ps(x_rk, w_hi, acc_r[1]);
        }
    }
    for (acc_r, out) in acc.iter().zip(tile.chunks_exact_mut(PANEL)) {
        let out = &mut out[half..half + 16];
        // SAFETY: `out` is 16 f32: two 8-lane stores.
        unsafe {
            _mm256_storeu_ps(out.as_mut_ptr(), acc_r[0]);
            _mm256_storeu_ps(out.as_mut_ptr().add(8), acc_r[1]);
        }
    }
}

/// `out[r][c] = Σ_k x[r][k] · w[k][j0 + c]`: see [`super::Isa::strip`] (which checks the shapes).
///
/// # Safety
/// The CPU must support `avx2` and `fma`.
#[target_feature(enable = "avx2,fma")]
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
    let vector_cols = width / 8 * 8;
    out.fill(0.0);
    // Four weight rows per load and store of the sums, as in `avx512::strip` (same
    // chain of FMAs per sum: `k, k + 1, k + 2, k + 3` in order).
    let k4 = d_in / 4 * 4;
    for k in (0..k4).step_by(4) {
        let w_k: [&[W]; 4] = std::array::from_fn(|u| &w[(k + u) * d_out + j0..][..width]);
        for (x_r, out_r) in x.chunks_exact(d_in).zip(out.chunks_exact_mut(width)) {
            let x_rk: [__m256; 4] = std::array::from_fn(|u| _mm256_set1_ps(x_r[k + u]));
            for c in (0..vector_cols).step_by(8) {
                // SAFETY: c + 8 <= vector_cols <= width = w_k[u].len() = out_r.len(),
                // and the CPU has the feature (this function's contract).
                unsafe {
                    let mut acc = _mm256_loadu_ps(out_r.as_ptr().add(c));
                    for u in 0..4 {
                        acc = _mm256_fmadd_ps(x_rk[u], W::load8(w_k[u].as_ptr().add(c)), acc);
                    }
                    _mm256_storeu_ps(out_r.as_mut_ptr().add(c), acc);
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
            let x_rk = _mm256_set1_ps(x_r[k]);
            for c in (0..vector_cols).step_by(8) {
                // SAFETY: c + 8 <= vector_cols <= width = w_k.len() = out_r.len(),
                // and the CPU has the feature (this function's contract).
                unsafe {
                    let w_kc = W::load8(w_k.as_ptr().add(c));
                    let acc = _mm256_loadu_ps(out_r.as_ptr().add(c));
                    _mm256_storeu_ps(out_r.as_mut_ptr().add(c), _mm256_fmadd_ps(x_rk, w_kc, acc));
                }
            }
            for c in vector_cols..width {
                out_r[c] = x_r[k].mul_add(w_k[c].to_f32(), out_r[c]);
            }
        }
    }
}

/// int8 blocks whose chains run side by side in [`strip_q8`].
pub const Q8_GROUP: usize = 2;

/// [`super::portable::strip_q8`]'s sums (same chains, same order), 8 columns a register.
///
/// # Safety
/// The CPU must support `avx2` and `fma`.
#[target_feature(enable = "avx2,fma")]
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
/// strip) into `out`, for every row of `x`; each block is two 8-column halves.
#[target_feature(enable = "avx2,fma")]
fn q8_blocks<const G: usize>(
    x: &[f32],
    d_in: usize,
    kb: usize,
    blocks: &[Q8Block; G],
    c0: usize,
    width: usize,
    out: &mut [f32],
) {
    let mut scales = [[_mm256_setzero_ps(); 2]; G];
    for (s, block) in scales.iter_mut().zip(blocks) {
        // SAFETY: `block.scales` is 16 f32: two 8-lane loads.
        *s = unsafe {
            [
                _mm256_loadu_ps(block.scales.as_ptr()),
                _mm256_loadu_ps(block.scales.as_ptr().add(8)),
            ]
        };
    }
    for (x_r, out_r) in x.chunks_exact(d_in).zip(out.chunks_exact_mut(width)) {
        let x_r = &x_r[kb * Q8_ROWS..][..Q8_ROWS];
        let out_g = &mut out_r[c0..][..G * Q8_COLS];
        let mut acc = [[_mm256_setzero_ps(); 2]; G]; // [G][16 columns]
        for (a, o) in acc.iter_mut().zip(out_g.chunks_exact(Q8_COLS)) {
            // SAFETY: `o` is 16 f32: two 8-lane loads.
            *a = unsafe {
                [
                    _mm256_loadu_ps(o.as_ptr()),
                    _mm256_loadu_ps(o.as_ptr().add(8)),
                ]
            };
        }
        for (k, &x_rk) in x_r.iter().enumerate() {
            let x_rk = _mm256_set1_ps(x_rk);
            for ((a, block), scale) in acc.iter_mut().zip(blocks).zip(&scales) {
                for half in 0..2 {
                    // SAFETY: `block.q[k][8 * half..]` holds 8 i8 (one 64-bit load).
                    let q = unsafe {
                        _mm_loadl_epi64(block.q[k].as_ptr().add(8 * half) as *const __m128i)
                    };
                    let w_k =
                        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), scale[half]);
                    a[half] = _mm256_fmadd_ps(x_rk, w_k, a[half]);
                }
            }
        }
        for (a, o) in acc.iter().zip(out_g.chunks_exact_mut(Q8_COLS)) {
            // SAFETY: `o` is 16 f32: two 8-lane stores.
            unsafe {
                _mm256_storeu_ps(o.as_mut_ptr(), a[0]);
                _mm256_storeu_ps(o.as_mut_ptr().add(8), a[1]);
            }
        }
    }
}
