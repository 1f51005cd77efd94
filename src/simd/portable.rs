//! The portable kernels: plain Rust, `f32::mul_add` (one rounding, as the
//! hardware instruction). The reference the SIMD versions must match bit for bit,
//! and what runs on a CPU without AVX2.

use super::{WeightElem, PANEL};

/// Rows per prefill tile.
pub const TILE_ROWS: usize = 4;

/// `tile[r][c] = Σ_k x[r][k] · panel[k][c]`: see [`super::Isa::tile`].
pub fn tile(x: &[f32], d_in: usize, panel: &[f32], tile: &mut [f32]) {
    for (x_row, tile_row) in x.chunks_exact(d_in).zip(tile.chunks_exact_mut(PANEL)) {
        tile_row.fill(0.0);
        for (&x_k, w_k) in x_row.iter().zip(panel.chunks_exact(PANEL)) {
            for (acc, &w) in tile_row.iter_mut().zip(w_k) {
                *acc = x_k.mul_add(w, *acc);
            }
        }
    }
}

/// `out[r][c] = Σ_k x[r][k] · w[k][j0 + c]`: see [`super::Isa::strip`].
pub fn strip<W: WeightElem>(
    x: &[f32],
    d_in: usize,
    w: &[W],
    d_out: usize,
    j0: usize,
    out: &mut [f32],
) {
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
