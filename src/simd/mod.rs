//! Hand-written SIMD for the two matmul kernels (chapter "Performance to the roof").
//!
//! The compiler already turns the plain loops of [`crate::ops`] into 8-wide AVX2
//! code, but it cannot keep a 8 x 32 block of sums in registers across the whole
//! `k` loop, nor read a bf16 weight as f32 with one shift (or an int8 one with a
//! widening and one multiply by its block's scale, [`q8`]). These kernels do, with
//! three versions of each, picked once at run time by [`Isa::detected`]:
//!
//! | version                 | vector    | prefill tile       | where                     |
//! |-------------------------|-----------|--------------------|---------------------------|
//! | [`avx512`]              | 16 x f32  | 8 rows x 32 cols   | AMD Zen 4+, Intel Xeon    |
//! | [`avx2`]                | 8 x f32   | 6 rows x 16 cols   | any x86-64 since 2013     |
//! | [`portable`]            | (scalar)  | 4 rows x 32 cols   | everywhere (the reference) |
//!
//! # Why the three give the same bits
//!
//! A vector register holds 16 (or 8) *output columns*, never 16 values of `k`.
//! Lane `j` performs exactly the scalar chain of [`crate::ops`]'s row-independence
//! contract — `acc = fma(x[k], w[k][j], acc)` for `k = 0, 1, 2, ...` starting from
//! `+0.0` — and a fused multiply-add is correctly rounded by IEEE 754, so it gives
//! the same bits in a 512-bit register, a 256-bit one or `f32::mul_add`. Tile
//! sizes, vector widths and thread counts only change *which* chains run side by
//! side, never the arithmetic inside one (`tests/simd.rs` checks every version
//! this CPU can run against the portable one, bit for bit).
//!
//! W8A8 ([`w8a8`]: int8 weights times int8 activations) has three versions of its own
//! ([`w8a8_kernels`]: AVX-512 VNNI, AVX2, portable), integer dot products whose sums are
//! exact integers in any order: the same bits by another argument (`tests/w8a8.rs`).
//! bf16a ([`bf16a`]: bf16 weights times bf16 activations) has three too
//! ([`bf16a_kernels`]: AVX-512 BF16's `vdpbf16ps`, AVX2, portable), one chain of the
//! instruction's lane per output (`tests/bf16a.rs`).

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx512;
pub mod bf16a;
pub mod bf16a_kernels;
#[cfg(target_arch = "x86_64")]
mod bf16a_x86;
mod elem;
mod formats;
mod isa;
pub mod portable;
pub mod q8;
pub mod w8a8;
pub mod w8a8_kernels;
#[cfg(target_arch = "x86_64")]
mod w8a8_x86;

pub use bf16a::Bf16aBlock;
pub use elem::{Scalar, WeightElem, PANEL};
pub use isa::Isa;
pub use q8::Q8Block;
pub use w8a8::W8a8Block;

// The dispatch: which version of each kernel runs on `self`. It lives here, above the
// three versions, because each of them reads the formats of `elem.rs` and none of them
// needs to know the others exist.
impl Isa {
    /// Rows of `x` one prefill tile covers (its sums fill the register file).
    pub fn tile_rows(self) -> usize {
        match self {
            Isa::Avx512 => avx512_tile_rows(),
            Isa::Avx2 => avx2_tile_rows(),
            Isa::Portable => portable::TILE_ROWS,
        }
    }

    /// Prefill tile: `tile[r][c] = Σ_k x[r][k] · panel[k][c]`, the sums in registers for
    /// the whole `k` loop. `x`: `[rows, d_in]` with `rows <= tile_rows()`, `panel`:
    /// `[d_in, PANEL]` of f32 (prefill's packed panels) or of a stored panel model's
    /// format (f32 or bf16, widened as it is loaded: decode on `[S; PANEL]` weights),
    /// `tile`: `[rows, PANEL]`.
    pub fn tile<W: Scalar>(self, x: &[f32], d_in: usize, panel: &[W], tile: &mut [f32]) {
        assert!(x.len().is_multiple_of(d_in) && x.len() / d_in <= self.tile_rows());
        assert_eq!(panel.len(), d_in * PANEL, "panel is not [d_in, PANEL]");
        assert_eq!(
            tile.len(),
            x.len() / d_in * PANEL,
            "tile is not [rows, PANEL]"
        );
        match self {
            // SAFETY: `Isa::Avx512` is only handed out by `available()` after
            // `is_x86_feature_detected!("avx512f")` said yes on this CPU.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { avx512::tile(x, d_in, panel, tile) },
            // SAFETY: as above, for `avx2` and `fma`.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { avx2::tile(x, d_in, panel, tile) },
            _ => portable::tile(x, d_in, panel, tile),
        }
    }

    /// Decode strip: `out[r][c] = Σ_k x[r][k] · w[k][j0 + c]`, reading `w`
    /// (`[d_in, d_out]` in any [`WeightElem`] format: f32, bf16, int8 blocks) in place —
    /// the memory-bound case, where streaming the weight once is all that matters.
    /// `x`: `[n, d_in]`, `out`: `[n, width]` with `j0 + width <= d_out`.
    pub fn strip<W: WeightElem>(
        self,
        x: &[f32],
        d_in: usize,
        w: &[W],
        d_out: usize,
        j0: usize,
        out: &mut [f32],
    ) {
        let n = x.len() / d_in;
        assert!(n > 0 && x.len() == n * d_in, "x is not [n, d_in]");
        assert_eq!(
            w.len() * W::BLOCK_ROWS * W::BLOCK_COLS,
            d_in * d_out,
            "w is not [d_in, d_out]"
        );
        assert!(out.len().is_multiple_of(n) && j0 + out.len() / n <= d_out);
        W::strip(self, &W::prepare(x, d_in), d_in, w, d_out, j0, out);
    }
}

#[cfg(target_arch = "x86_64")]
fn avx512_tile_rows() -> usize {
    avx512::TILE_ROWS
}
#[cfg(not(target_arch = "x86_64"))]
fn avx512_tile_rows() -> usize {
    portable::TILE_ROWS
}
#[cfg(target_arch = "x86_64")]
fn avx2_tile_rows() -> usize {
    avx2::TILE_ROWS
}
#[cfg(not(target_arch = "x86_64"))]
fn avx2_tile_rows() -> usize {
    portable::TILE_ROWS
}
