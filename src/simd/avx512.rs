//! The AVX-512 kernels: 16 f32 lanes per register, 32 registers.
//!
//! Prefill tile: 8 rows x 32 columns of sums = 16 registers that stay put for
//! the whole `k` loop; each step loads 2 panel vectors and broadcasts 8 `x`
//! values, for 16 fused multiply-adds (the FMA units, not the loads, are busy).

use super::{WeightElem, PANEL};
use std::arch::x86_64::*;

/// Rows per prefill tile.
pub const TILE_ROWS: usize = 8;

/// `tile[r][c] = Σ_k x[r][k] · panel[k][c]`: see [`super::Isa::tile`] (which checks the shapes).
///
/// # Safety
/// The CPU must support `avx512f`.
#[target_feature(enable = "avx512f")]
pub unsafe fn tile(x: &[f32], d_in: usize, panel: &[f32], tile: &mut [f32]) {
    let rows = x.len() / d_in;
    if rows == TILE_ROWS {
        tile_of::<TILE_ROWS>(x, d_in, panel, tile);
    } else {
        // Leftover rows one at a time: same chain per element, fewer side by side.
        for (x_row, tile_row) in x.chunks_exact(d_in).zip(tile.chunks_exact_mut(PANEL)) {
            tile_of::<1>(x_row, d_in, panel, tile_row);
        }
    }
}

#[target_feature(enable = "avx512f")]
fn tile_of<const R: usize>(x: &[f32], d_in: usize, panel: &[f32], tile: &mut [f32]) {
    let x_rows: [&[f32]; R] = std::array::from_fn(|r| &x[r * d_in..][..d_in]);
    let panel = &panel[..d_in * PANEL];
    let mut acc = [[_mm512_setzero_ps(); 2]; R]; // [R][32 columns]
    for (k, w_k) in panel.chunks_exact(PANEL).enumerate() {
        // SAFETY: `w_k` is one panel row of PANEL = 32 f32: two 16-lane loads.
        let (w_lo, w_hi) = unsafe {
            (
                _mm512_loadu_ps(w_k.as_ptr()),
                _mm512_loadu_ps(w_k.as_ptr().add(16)),
            )
        };
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
pub unsafe fn strip<W: WeightElem>(
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
