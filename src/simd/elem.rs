//! The number formats a weight matrix may be stored in, and how each becomes f32.
//!
//! A format is a [`WeightElem`]: the element type of a weight matrix's array, which says
//! how many weights one element holds, how to widen them to f32, and which decode
//! kernel reads them. Two are plain numbers ([`Scalar`], one weight each):
//!
//! - f32, as loaded;
//! - bf16 ("brain float", Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep Learning
//!   Training"): the top half of an f32, same sign and 8-bit exponent, 7 mantissa bits
//!   instead of 23. Widening is exact — put the 16 bits back on top, zeros below
//!   (`bits << 16`) — so the kernels run the very same f32 chain of fused multiply-adds
//!   on the widened value. Half the bytes per weight: half what memory-bound decode streams.
//!
//! The third, int8, is a block of 32 x 16 weights with 16 scales ([`super::q8::Q8Block`]).
//! The fourth, W8A8, holds the same codes reordered for integer dot products, and its
//! kernels quantize the activations too ([`super::w8a8::W8a8Block`]).

use super::isa::Isa;
use crate::device::WeightLayout;
use half::bf16;

// ANCHOR: weight_elem
/// A weight format: the element type of a `[d_in, d_out]` weight matrix's array.
///
/// One element holds `BLOCK_ROWS x BLOCK_COLS` weights (rows along `d_in`, columns along
/// `d_out`): 1 x 1 for f32 and bf16, 32 x 16 for int8 blocks, whose array is
/// `[d_in / 32, d_out / 16]`. Whatever the format, the kernels widen each weight to its
/// exact f32 value and run the same f32 fused multiply-adds on it.
pub trait WeightElem: Copy + Send + Sync + 'static {
    /// The format's name in reports ("f32", "bf16", "int8").
    const NAME: &'static str;
    /// Weights one element holds along `d_in` and along `d_out`.
    const BLOCK_ROWS: usize = 1;
    const BLOCK_COLS: usize = 1;
    /// How the elements lie in memory: rows (`[d_in, d_out]`, row after row) or panels
    /// (`[d_out / 32, d_in]` of 32 columns: see the impl for `[S; PANEL]`).
    const LAYOUT: WeightLayout = WeightLayout::Rows;
    /// Whether prefill may widen this format into f32 panels and run the f32 register tile
    /// (`ops::by_panels`): true for every format whose arithmetic is f32, false for W8A8,
    /// whose every row (prefill's or decode's) must take the same integer dot products.
    const PACKS: bool = true;

    /// The activations `x` (`[n, d_in]`) as this format's strips read them: the f32 rows
    /// themselves, or for W8A8 their int8 codes, made once per matmul and shared by
    /// every strip and thread ([`super::w8a8::Q8Rows`]).
    type Input<'a>: Sync;

    /// `x` (`[n, d_in]`) made into [`WeightElem::Input`].
    fn prepare(x: &[f32], d_in: usize) -> Self::Input<'_>;

    /// `dst[c]` = the exact f32 value of weight `[k][j0 + c]` of the `[d_in, d_out]`
    /// matrix stored in `w` (prefill packs its panels with this).
    fn widen_row(w: &[Self], d_out: usize, k: usize, j0: usize, dst: &mut [f32]);

    /// The decode strip of [`Isa::strip`] for this format (shapes already checked), on
    /// the activations as [`WeightElem::prepare`] made them.
    fn strip(
        isa: Isa,
        x: &Self::Input<'_>,
        d_in: usize,
        w: &[Self],
        d_out: usize,
        j0: usize,
        out: &mut [f32],
    );

    /// `(d_in, d_out)` of the matrix stored as the array `w`.
    fn dims(w: &ndarray::Array2<Self>) -> (usize, usize) {
        let (rows, cols) = w.dim();
        (rows * Self::BLOCK_ROWS, cols * Self::BLOCK_COLS)
    }

    /// Weights in the matrix stored as `w` (not elements: an int8 block holds 512).
    fn weights(w: &ndarray::Array2<Self>) -> usize {
        w.len() * Self::BLOCK_ROWS * Self::BLOCK_COLS
    }
}
// ANCHOR_END: weight_elem

/// A format of one weight per element, which the kernels load 16 (or 8) at a time.
pub trait Scalar: Copy + Send + Sync + 'static {
    /// The format's name in reports ("f32", "bf16").
    const NAME: &'static str;

    /// The exact f32 value of this weight.
    fn to_f32(self) -> f32;

    /// 16 consecutive weights from `p`, widened to f32.
    ///
    /// # Safety
    /// `p` must point to 16 readable elements, and the CPU must support `avx512f`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512;

    /// 8 consecutive weights from `p`, widened to f32.
    ///
    /// # Safety
    /// `p` must point to 8 readable elements, and the CPU must support `avx2`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
}

impl Scalar for f32 {
    const NAME: &'static str = "f32";

    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> std::arch::x86_64::__m512 {
        // SAFETY: the caller guarantees 16 readable f32 at `p` and avx512f.
        unsafe { std::arch::x86_64::_mm512_loadu_ps(p) }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        // SAFETY: the caller guarantees 8 readable f32 at `p` and avx2.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
}

impl Scalar for bf16 {
    const NAME: &'static str = "bf16";

    /// `bits << 16`: exact (what `half::bf16::to_f32` does too, spelled out).
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from_bits((self.to_bits() as u32) << 16)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const bf16) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees 16 readable bf16 (32 bytes) at `p` and avx512f;
        // zero-extend each u16 to u32, shift it to the top half: the exact f32.
        unsafe {
            let halves = _mm256_loadu_si256(p as *const __m256i);
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(halves)))
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const bf16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees 8 readable bf16 (16 bytes) at `p` and avx2.
        unsafe {
            let halves = _mm_loadu_si128(p as *const __m128i);
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(halves)))
        }
    }
}

/// Columns in one packed weight panel (prefill): two AVX-512 registers.
pub const PANEL: usize = 32;
