//! The portable kernels: plain Rust, `f32::mul_add` (one rounding, as the
//! hardware instruction). The reference the SIMD versions must match bit for bit,
//! and what runs on a CPU without AVX2.

use super::elem::{Scalar, PANEL};
use super::q8::{Q8Block, Q8_COLS, Q8_ROWS};

/// Rows per prefill tile.
pub const TILE_ROWS: usize = 4;

/// `tile[r][c] = Σ_k x[r][k] · panel[k][c]`: see [`super::Isa::tile`].
pub fn tile<W: Scalar>(x: &[f32], d_in: usize, panel: &[W], tile: &mut [f32]) {
    for (x_row, tile_row) in x.chunks_exact(d_in).zip(tile.chunks_exact_mut(PANEL)) {
        tile_row.fill(0.0);
        for (&x_k, w_k) in x_row.iter().zip(panel.chunks_exact(PANEL)) {
            for (acc, &w) in tile_row.iter_mut().zip(w_k) {
                *acc = x_k.mul_add(w.to_f32(), *acc);
            }
        }
    }
}

/// `out[r][c] = Σ_k x[r][k] · w[k][j0 + c]`: see [`super::Isa::strip`].
pub fn strip<W: Scalar>(x: &[f32], d_in: usize, w: &[W], d_out: usize, j0: usize, out: &mut [f32]) {
    let width = out.len() / (x.len() / d_in);
    out.fill(0.0);
    for k in 0..d_in {
        let w_k = &w[k * d_out + j0..][..width];
        for (x_r, out_r) in x.chunks_exact(d_in).zip(out.chunks_exact_mut(width)) {
            for (acc, &w) in out_r.iter_mut().zip(w_k) {
                *acc = x_r[k].mul_add(w.to_f32(), *acc);
            }
        }
    }
}

// ANCHOR: strip_q8
/// [`strip`] on int8 blocks: for each block, each row `r` of `x` and each of the block's
/// 32 rows `k`, the 16 columns' weights `q · scale` (exact) join the same chains of
/// fused multiply-adds, `k` in increasing order, as in the f32 strip.
pub fn strip_q8(x: &[f32], d_in: usize, w: &[Q8Block], d_out: usize, j0: usize, out: &mut [f32]) {
    let width = out.len() / (x.len() / d_in);
    let blocks_per_row = d_out / Q8_COLS;
    out.fill(0.0);
    for kb in 0..d_in / Q8_ROWS {
        // This strip's blocks of block row `kb`: contiguous in memory.
        let row = &w[kb * blocks_per_row + j0 / Q8_COLS..][..width / Q8_COLS];
        for (c, block) in row.iter().enumerate() {
            for (x_r, out_r) in x.chunks_exact(d_in).zip(out.chunks_exact_mut(width)) {
                let acc = &mut out_r[c * Q8_COLS..][..Q8_COLS];
                for (q_k, &x_rk) in block.q.iter().zip(&x_r[kb * Q8_ROWS..][..Q8_ROWS]) {
                    for ((a, &q), &scale) in acc.iter_mut().zip(q_k).zip(&block.scales) {
                        *a = x_rk.mul_add(q as f32 * scale, *a);
                    }
                }
            }
        }
    }
}
// ANCHOR_END: strip_q8
