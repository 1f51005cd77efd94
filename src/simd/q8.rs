//! int8 weights: Q8_0 blocks (llama.cpp's `Q8_0`, the format of GGUF's `*.Q8_0.gguf`
//! files), regrouped for a column-vector kernel (chapter "Performance to the roof").
//!
//! Q8_0 stores every run of 32 consecutive weights of one output as 32 signed bytes `q`
//! and one f16 scale `d`: `w = q · d`, with `d = max|w| / 127` rounded to f16. Our
//! matrices are `[d_in, d_out]` and the kernels' vectors run across 16 output columns,
//! so a [`Q8Block`] holds sixteen Q8_0 blocks side by side — 32 rows of `k` by 16
//! columns `j` — with their 16 scales in one vector: the kernel loads the scales once,
//! then for each of the 32 rows widens 16 bytes to f32 and multiplies by them.
//!
//! # Why the weights are exact, and the model is an f32 model
//!
//! `q` has 8 significant bits and `d` (an f16) 11, so `q · d` needs at most 19 of f32's
//! 24: the product is *exact*, in any register width, in any order. An int8 model is
//! therefore bit for bit the f32 model whose weights are the dequantized values
//! (`Model::dequantize` builds that twin; `tests/paths_int8.rs` compares them), and the
//! naive == cached contract holds unchanged. Bytes per weight: (512 + 16 x 4) / 512 =
//! 1.125 (the scales are kept widened to f32 so that one load gives the 16 lanes; GGUF's
//! f16 scales would make it 1.0625).

use half::f16;
use ndarray::Array2;
use rayon::prelude::*;

/// Rows (along `d_in`) per block: a Q8_0 block.
pub const Q8_ROWS: usize = 32;
/// Columns (along `d_out`) per block: one AVX-512 vector of f32.
pub const Q8_COLS: usize = 16;

// ANCHOR: q8_block
/// 32 x 16 int8 weights with one scale per column: weight `[k][j]` of the block is
/// `q[k][j] as f32 * scales[j]`, exactly. 576 bytes, 9 cache lines.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(64))]
pub struct Q8Block {
    /// One scale per column, each an f16 value held as f32 (widening is exact).
    pub scales: [f32; Q8_COLS],
    /// `[Q8_ROWS, Q8_COLS]`: row `k` of the block holds that input's 16 columns.
    pub q: [[i8; Q8_COLS]; Q8_ROWS],
}
// ANCHOR_END: q8_block

impl Q8Block {
    /// The exact f32 value of weight `[k][j]` of the block.
    #[inline(always)]
    pub fn weight(&self, k: usize, j: usize) -> f32 {
        self.q[k][j] as f32 * self.scales[j]
    }
}

// ANCHOR: quantize
/// One Q8_0 block as llama.cpp's `quantize_row_q8_0_ref` makes it: `d = max|v| / 127`,
/// `q = round(v / d)` (computed as `v · (1/d)`, halves away from zero), and `d` stored
/// rounded to f16. Returns `(d as f32, q)`, or an error for values that have no Q8_0 form.
pub fn quantize_q8_0(values: &[f32; Q8_ROWS]) -> Result<(f32, [i8; Q8_ROWS]), String> {
    let amax = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if !values.iter().all(|v| v.is_finite()) {
        return Err("a weight is not finite (NaN or infinity)".into());
    }
    let d = amax / 127.0;
    let scale = f16::from_f32(d);
    if !scale.is_finite() {
        return Err(format!(
            "a weight of magnitude {amax} needs a scale of {d}, beyond f16's 65504"
        ));
    }
    let inv_d = if d != 0.0 { 1.0 / d } else { 0.0 };
    // |v · (1/d)| <= 127 up to one rounding, and `as` saturates: always in i8's range.
    let q = values.map(|v| (v * inv_d).round() as i8);
    Ok((scale.to_f32(), q))
}
// ANCHOR_END: quantize

/// `w` (`[d_in, d_out]`, `d_in` a multiple of 32, `d_out` of 16) as int8 blocks,
/// `[d_in / 32, d_out / 16]`: each column's runs of 32 rows quantized as Q8_0 blocks.
pub fn quantize(w: &Array2<f32>) -> Result<Array2<Q8Block>, String> {
    let (d_in, d_out) = w.dim();
    if !d_in.is_multiple_of(Q8_ROWS) || !d_out.is_multiple_of(Q8_COLS) || d_in == 0 {
        return Err(format!(
            "a {d_in} x {d_out} matrix does not split into int8 blocks of {Q8_ROWS} inputs x {Q8_COLS} outputs"
        ));
    }
    let blocks_per_row = d_out / Q8_COLS;
    // Each block on its own (the same bits however rayon shares them out): loading
    // SmolLM2 quantizes 263 k blocks.
    let blocks = (0..d_in / Q8_ROWS * blocks_per_row)
        .into_par_iter()
        .map(|i| {
            let (kb, jb) = (i / blocks_per_row, i % blocks_per_row);
            let mut block = Q8Block {
                scales: [0.0; Q8_COLS],
                q: [[0; Q8_COLS]; Q8_ROWS],
            };
            for c in 0..Q8_COLS {
                let column = std::array::from_fn(|r| w[[kb * Q8_ROWS + r, jb * Q8_COLS + c]]);
                let (scale, q) = quantize_q8_0(&column)?;
                block.scales[c] = scale;
                for (row, &q_r) in block.q.iter_mut().zip(&q) {
                    row[c] = q_r;
                }
            }
            Ok(block)
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(
        Array2::from_shape_vec((d_in / Q8_ROWS, d_out / Q8_COLS), blocks)
            .expect("one block per 32 x 16 weights"),
    )
}

/// The f32 matrix of the blocks' exact values, `[d_in, d_out]`: the int8 model's plain twin.
pub fn dequantize(w: &Array2<Q8Block>) -> Array2<f32> {
    let (row_blocks, col_blocks) = w.dim(); // [d_in / Q8_ROWS, d_out / Q8_COLS]
    Array2::from_shape_fn((row_blocks * Q8_ROWS, col_blocks * Q8_COLS), |(k, j)| {
        w[[k / Q8_ROWS, j / Q8_COLS]].weight(k % Q8_ROWS, j % Q8_COLS)
    })
}

/// A row of values (a multiple of 32 long) through Q8_0 and back: what an embedding row
/// holds in an int8 model, so that a tied LM head and its embedding hold the same values.
pub fn round_trip_q8_0(row: &[f32]) -> Result<Vec<f32>, String> {
    let mut out = Vec::with_capacity(row.len());
    for block in row.chunks(Q8_ROWS) {
        let values: &[f32; Q8_ROWS] = block.try_into().map_err(|_| {
            format!(
                "a row of {} values does not split into Q8_0 blocks of {Q8_ROWS}",
                row.len()
            )
        })?;
        let (d, q) = quantize_q8_0(values)?;
        out.extend(q.iter().map(|&q| q as f32 * d));
    }
    Ok(out)
}
