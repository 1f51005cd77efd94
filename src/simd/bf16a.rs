//! bf16 weights times bf16 activations: the arithmetic of AVX-512 BF16's `vdpbf16ps`,
//! what llama.cpp's BF16 matmuls run on a CPU that has it (Zen 4, Sapphire Rapids).
//! Chapter "Making CPU decode fast" (book: weight-formats.md).
//!
//! `--dtype bf16` keeps the activations in f32: each bf16 weight is widened to f32 and
//! joins an f32 fused multiply-add, 16 products per instruction. `vdpbf16ps` takes *pairs*
//! of bf16 values in each 32-bit lane, 32 products per instruction, so the activations
//! must be bf16 too: `--dtype bf16a` rounds them once per matmul (round to nearest, ties
//! to even, [`round_to_bf16a`]).
//!
//! # The instruction, one lane
//!
//! Intel's manual defines `vdpbf16ps acc, a, b` lane by lane, as two fused multiply-adds,
//! the odd pair first, with denormal inputs read as zero and a denormal result flushed to
//! zero ("DAZ in, FTZ out", whatever MXCSR says):
//!
//! ```text
//! acc = ftz(fma(a[2j+1], b[2j+1], acc))
//! acc = ftz(fma(a[2j],   b[2j],   acc))
//! ```
//!
//! [`step`] is that lane in plain Rust; `tests/bf16a.rs` checks it against the instruction
//! on random lanes, bit for bit, on every CPU that has it.
//!
//! # Why every version gives the same bits
//!
//! Output `[r][j]` is one chain: [`step`] over the input pairs `p = 0, 1, 2, ...` in
//! order, from `acc = +0.0`. A vector lane holds one output, so AVX-512's instruction,
//! AVX2's two FMAs and two flushes, and the portable loop below run the same chain; tiles
//! and threads only choose which chains run side by side. Rows are rounded on their own,
//! so naive == cached == batched stays bitwise (`tests/paths_w8a8.rs` runs both activation modes).
//! What changes is the model: its activations lose 16 of their 24 bits at every matmul
//! (`kvlab eval --dtype bf16a` measures by how much).
//!
//! Denormals: the weights and activations are flushed to zero once, when they are
//! rounded, so the kernels never see one; only a result can be denormal, and every
//! version flushes it.

use super::q8::Q8_COLS;
use half::bf16;

/// Inputs (along `d_in`) per block: 16 pairs.
pub const BF16A_ROWS: usize = 32;
/// Outputs (along `d_out`) per block: one 512-bit register of pairs.
pub const BF16A_COLS: usize = Q8_COLS;
/// Input pairs per block.
pub const PAIRS: usize = BF16A_ROWS / 2;

// ANCHOR: bf16a_block
/// 32 inputs x 16 outputs of bf16 weights, laid out for `vdpbf16ps`: pair `p` of column
/// `j` (weights `[2p][j]` and `[2p+1][j]`) is the 32-bit word `pairs[p][j]`, the even one
/// in the low half. One row `pairs[p]` is one 64-byte register: 16 columns, one pair each.
/// 1 KiB, two bytes a weight, as bf16.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(64))]
pub struct Bf16aBlock {
    /// `[PAIRS, BF16A_COLS]`.
    pub pairs: [[u32; BF16A_COLS]; PAIRS],
}
// ANCHOR_END: bf16a_block

impl Bf16aBlock {
    /// The block of the weights `w(k, j)` (`k < 32`, `j < 16`), each rounded with
    /// [`round_to_bf16a`].
    pub fn from_fn(w: impl Fn(usize, usize) -> f32) -> Bf16aBlock {
        Bf16aBlock {
            pairs: std::array::from_fn(|p| {
                std::array::from_fn(|j| {
                    pair(round_to_bf16a(w(2 * p, j)), round_to_bf16a(w(2 * p + 1, j)))
                })
            }),
        }
    }

    /// The exact f32 value of weight `[k][j]`.
    #[inline(always)]
    pub fn weight(&self, k: usize, j: usize) -> f32 {
        half_of(self.pairs[k / 2][j], k % 2)
    }
}

/// `v` as the kernels read it: denormals flushed to zero (keeping the sign), then rounded
/// to bf16, to nearest, ties to even (NaN stays NaN, infinities stay infinite).
pub fn round_to_bf16a(v: f32) -> bf16 {
    bf16::from_f32(flush(v))
}

/// Two bf16 values in one 32-bit word, `even` in the low half (how `vdpbf16ps` reads a lane).
#[inline(always)]
pub fn pair(even: bf16, odd: bf16) -> u32 {
    even.to_bits() as u32 | (odd.to_bits() as u32) << 16
}

/// Half `i` (0: low, even; 1: high, odd) of a pair, as its exact f32 value.
#[inline(always)]
pub fn half_of(pair: u32, i: usize) -> f32 {
    f32::from_bits(if i == 0 {
        pair << 16
    } else {
        pair & 0xffff_0000
    })
}

/// A denormal `v` flushed to zero of its sign; any other value as it is.
#[inline(always)]
pub fn flush(v: f32) -> f32 {
    if v.is_subnormal() {
        0.0f32.copysign(v)
    } else {
        v
    }
}

// ANCHOR: step
/// One lane of `vdpbf16ps`: `acc` plus the two products of the pairs `x` and `w`, the odd
/// one first, each a fused multiply-add (the products of two bf16 values are exact in
/// f32 anyway: 8 x 8 significant bits), each result flushed if denormal.
#[inline(always)]
pub fn step(acc: f32, x: u32, w: u32) -> f32 {
    let acc = flush(half_of(x, 1).mul_add(half_of(w, 1), acc));
    flush(half_of(x, 0).mul_add(half_of(w, 0), acc))
}
// ANCHOR_END: step

// ANCHOR: bf16_rows
/// Activations `[n, d_in]` rounded to bf16 ([`round_to_bf16a`]) and paired as
/// `vdpbf16ps` reads them: made once per matmul, read by every strip and thread.
#[derive(Debug, Clone)]
pub struct Bf16Rows {
    /// Rows and inputs per row (a multiple of 32).
    pub n: usize,
    pub d_in: usize,
    /// `[n, d_in / 2]`: input pair `p` of row `r` as one word ([`pair`]).
    pub pairs: Vec<u32>,
}

/// `x` (`[n, d_in]`, `d_in` a multiple of 32) rounded and paired as [`Bf16Rows`].
pub fn round_rows(x: &[f32], d_in: usize) -> Bf16Rows {
    assert!(
        d_in > 0 && d_in.is_multiple_of(BF16A_ROWS) && x.len().is_multiple_of(d_in),
        "x is not [n, d_in] with d_in a multiple of 32"
    );
    Bf16Rows {
        n: x.len() / d_in,
        d_in,
        pairs: x
            .as_chunks::<2>()
            .0
            .iter()
            .map(|&[even, odd]| pair(round_to_bf16a(even), round_to_bf16a(odd)))
            .collect(),
    }
}
// ANCHOR_END: bf16_rows

impl Bf16Rows {
    /// The 16 pairs of row `r` that meet block row `kb` of the weights.
    #[inline(always)]
    pub fn block(&self, r: usize, kb: usize) -> &[u32; PAIRS] {
        self.pairs[r * (self.d_in / 2) + kb * PAIRS..][..PAIRS]
            .try_into()
            .expect("16 pairs")
    }
}

// ANCHOR: strip
/// The bf16a strip, plainly: `out[r][c]` (`[n, width]`) for columns `j0..j0 + width` of
/// the `[d_in, d_out]` matrix `w` (`[d_in / 32, d_out / 16]` blocks), each output the
/// chain of [`step`] over its input pairs in order. The reference every ISA's version
/// must match.
pub fn strip(x: &Bf16Rows, w: &[Bf16aBlock], d_out: usize, j0: usize, out: &mut [f32]) {
    let width = out.len() / x.n;
    let blocks_per_row = d_out / BF16A_COLS;
    out.fill(0.0);
    for kb in 0..x.d_in / BF16A_ROWS {
        let row = &w[kb * blocks_per_row + j0 / BF16A_COLS..][..width / BF16A_COLS];
        for (r, out_r) in out.chunks_exact_mut(width).enumerate() {
            let x_pairs = x.block(r, kb);
            for (block, out_b) in row.iter().zip(out_r.chunks_exact_mut(BF16A_COLS)) {
                for (j, acc) in out_b.iter_mut().enumerate() {
                    for (p, &x_pair) in x_pairs.iter().enumerate() {
                        *acc = step(*acc, x_pair, block.pairs[p][j]);
                    }
                }
            }
        }
    }
}
// ANCHOR_END: strip
