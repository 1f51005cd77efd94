//! W8A8: int8 weights times int8 activations, the arithmetic of llama.cpp's Q8_0 x Q8_0
//! dot product (what vLLM and SmoothQuant call "w8a8"). Chapter "Making CPU decode fast".
//!
//! `--dtype int8` keeps the activations in f32: each int8 weight is widened to its exact
//! f32 value and joins an f32 chain of fused multiply-adds, so decode spends its time
//! widening (instructions), not reading (bytes). W8A8 quantizes the activations too, each
//! row in blocks of 32 with the same Q8_0 quantizer as the weights ([`quantize_q8_0`]),
//! and multiplies codes by codes: the CPU's integer dot-product instructions (AVX-512
//! VNNI's `vpdpbusd`: 64 byte products summed into 16 lanes in one instruction) do the
//! work of 64 widenings and 64 FMAs.
//!
//! # Why every version gives the same bits
//!
//! Output `[r][j]` is one chain over the blocks `kb = 0, 1, 2, ...` of the input:
//!
//! ```text
//! isum = Σ_{k < 32} xq[r][32 kb + k] · wq[32 kb + k][j]         (an integer)
//! acc  = fma(dx[r][kb] · dw[kb][j], isum, acc)                  (from acc = +0.0)
//! ```
//!
//! - `|isum| <= 32 · 127 · 127 = 516,128 < 2^24`: exact in int32 *and* in f32, whatever
//!   order the 32 products are added in (integers are associative). AVX-512 VNNI adds
//!   them four at a time, AVX2's `maddubs` two then two, the portable loop one by one:
//!   the same integer.
//! - `dx · dw` is a product of two f16 values (11 significant bits each): at most 22
//!   bits, exact in f32.
//! - So the only rounding is the fused multiply-add, once per block, in the order of `kb`:
//!   the same in a vector lane as in `f32::mul_add` (`tests/w8a8.rs` checks every version
//!   this CPU runs, `w8a8_kernels.rs`, against [`strip`], bit for bit).
//!
//! Each row is quantized on its own (its own 32-value blocks, its own scales), so a row's
//! outputs still depend on that row alone: naive == cached == batched stays bitwise in
//! this mode (`tests/paths_w8a8.rs`). What changes is the *model*: its activations are
//! rounded to 8 bits at every matmul, so its logits move away from the f32 (and the
//! `--dtype int8`) model's; `kvlab eval --dtype w8a8` measures by how much.
//!
//! # Which quantizer
//!
//! llama.cpp has two Q8_0 quantizers that round differently: the reference
//! (`quantize_row_q8_0_ref`: `roundf`, halves away from zero) and its SIMD version
//! (`_mm256_round_ps` to nearest even). kvlab uses the reference one, the same function
//! that quantized the weights, in every ISA (it runs once per row and matmul, a few
//! hundred values: not where the time goes).

use super::q8::{quantize_q8_0, Q8Block, Q8_COLS, Q8_ROWS};

/// Codes of one column that one 32-bit lane of `vpdpbusd` multiplies by four activations.
pub const LANE_CODES: usize = 4;

// ANCHOR: w8a8_block
/// A [`Q8Block`] (32 inputs x 16 outputs of int8, one f16 scale per output) with its
/// codes reordered for integer dot products: code `[k][j]` sits at
/// `q[k / 4][j][k % 4]`, so that 64 consecutive bytes `q[g]` hold four consecutive
/// inputs of each of the 16 columns — one column per 32-bit lane, what `vpdpbusd`
/// multiplies by one broadcast group of four activation codes. 576 bytes, as a Q8Block.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(64))]
pub struct W8a8Block {
    /// One scale per column, an f16 value held as f32.
    pub scales: [f32; Q8_COLS],
    /// `[Q8_ROWS / 4, Q8_COLS, 4]`.
    pub q: [[[i8; LANE_CODES]; Q8_COLS]; Q8_ROWS / LANE_CODES],
}
// ANCHOR_END: w8a8_block

impl W8a8Block {
    /// The same codes and scales as `block`, reordered.
    pub fn from_q8(block: &Q8Block) -> W8a8Block {
        W8a8Block {
            scales: block.scales,
            q: std::array::from_fn(|g| {
                std::array::from_fn(|j| std::array::from_fn(|i| block.q[g * LANE_CODES + i][j]))
            }),
        }
    }

    /// Code `[k][j]` of the block.
    #[inline(always)]
    pub fn code(&self, k: usize, j: usize) -> i8 {
        self.q[k / LANE_CODES][j][k % LANE_CODES]
    }

    /// The exact f32 value of weight `[k][j]`: `code · scale`.
    pub fn weight(&self, k: usize, j: usize) -> f32 {
        self.code(k, j) as f32 * self.scales[j]
    }
}

// ANCHOR: q8_rows
/// Activations `[n, d_in]` quantized row by row in Q8_0 blocks of 32: what a W8A8 matmul
/// multiplies its weight codes by. Made once per matmul ([`quantize_rows`]) and read by
/// every strip and thread.
#[derive(Debug, Clone)]
pub struct Q8Rows {
    /// Rows and inputs per row (a multiple of 32).
    pub n: usize,
    pub d_in: usize,
    /// `[n, d_in]`: each value's code, in `-127..=127`.
    pub codes: Vec<i8>,
    /// `[n, d_in / 32]`: each block's scale (an f16 value), NaN for a block that has
    /// no Q8_0 form (a value not finite, or beyond f16's range times 127), so that its
    /// outputs are NaN, as the f32 model's would be non-finite, and the sampler refuses them.
    pub scales: Vec<f32>,
    /// `[n, d_in / 32]`: each block's sum of codes (the AVX-512 kernel's correction for
    /// reading the weight codes as unsigned bytes: see `w8a8_x86.rs`).
    pub sums: Vec<i32>,
}

/// `x` (`[n, d_in]`, `d_in` a multiple of 32) quantized as [`Q8Rows`].
pub fn quantize_rows(x: &[f32], d_in: usize) -> Q8Rows {
    assert!(
        d_in > 0 && d_in.is_multiple_of(Q8_ROWS) && x.len().is_multiple_of(d_in),
        "x is not [n, d_in] with d_in a multiple of 32"
    );
    let blocks = x.len() / Q8_ROWS;
    let mut rows = Q8Rows {
        n: x.len() / d_in,
        d_in,
        codes: Vec::with_capacity(x.len()),
        scales: Vec::with_capacity(blocks),
        sums: Vec::with_capacity(blocks),
    };
    for values in x.as_chunks::<Q8_ROWS>().0 {
        let (scale, codes) = quantize_q8_0(values).unwrap_or((f32::NAN, [0; Q8_ROWS]));
        rows.codes.extend_from_slice(&codes);
        rows.scales.push(scale);
        rows.sums.push(codes.iter().map(|&c| c as i32).sum());
    }
    rows
}
// ANCHOR_END: q8_rows

impl Q8Rows {
    /// Block `kb` of row `r`: its 32 codes and its scale.
    #[inline(always)]
    pub fn block(&self, r: usize, kb: usize) -> (&[i8; Q8_ROWS], f32) {
        let b = r * (self.d_in / Q8_ROWS) + kb;
        let codes = self.codes[b * Q8_ROWS..][..Q8_ROWS]
            .try_into()
            .expect("32 codes");
        (codes, self.scales[b])
    }
}

// ANCHOR: strip
/// The W8A8 strip, plainly: `out[r][c]` (`[n, width]`) for columns `j0..j0 + width` of
/// the `[d_in, d_out]` matrix `w` (`[d_in / 32, d_out / 16]` blocks), each the chain of
/// the module's doc, block after block. The reference every ISA's version must match.
pub fn strip(x: &Q8Rows, w: &[W8a8Block], d_out: usize, j0: usize, out: &mut [f32]) {
    let width = out.len() / x.n;
    let blocks_per_row = d_out / Q8_COLS;
    out.fill(0.0);
    for kb in 0..x.d_in / Q8_ROWS {
        // This strip's blocks of block row `kb`: contiguous in memory.
        let row = &w[kb * blocks_per_row + j0 / Q8_COLS..][..width / Q8_COLS];
        for (r, out_r) in out.chunks_exact_mut(width).enumerate() {
            let (codes, dx) = x.block(r, kb);
            for (block, out_b) in row.iter().zip(out_r.chunks_exact_mut(Q8_COLS)) {
                for (j, (acc, &dw)) in out_b.iter_mut().zip(&block.scales).enumerate() {
                    let isum: i32 = (0..Q8_ROWS)
                        .map(|k| codes[k] as i32 * block.code(k, j) as i32)
                        .sum();
                    *acc = (dx * dw).mul_add(isum as f32, *acc);
                }
            }
        }
    }
}
// ANCHOR_END: strip
