//! The numeric kernels of the forward pass, on the CPU, in f32.
//!
// ANCHOR: row_independence
//! # Row independence: why the naive and cached paths agree bit for bit
//!
//! Floating-point addition is not associative: `(a + b) + c` and `a + (b + c)`
//! can differ in the last bit. A kernel that sums in a different order when it
//! is handed 500 rows than when it is handed 1 row (a BLAS that picks another
//! blocking, a reduction split across threads) gives slightly different
//! numbers for the *same* row. That is why Hugging Face's `use_cache=True` and
//! `use_cache=False` logits differ in the 5th decimal (transformers #36536).
//!
//! Every kernel here is **row-independent**: the value computed for one row
//! (one token position) depends only on that row's inputs, always through the
//! same sequence of additions, however many rows are computed with it and
//! however rayon splits the work. In [`matmul`], every output element is the
//! chain `acc = fma(x[k], w[k][j], acc)` for `k = 0, 1, 2, ...` starting from 0,
//! whether it sits in a tile of 6 rows (prefill) or of 1 row (decode).
//! (A fused multiply-add rounds once instead of twice: a different result from
//! `acc + x·w`, but the same one on both paths, which is what matters here.) So the
//! naive path (hundreds of rows per step) and the cached path (1 row per step)
//! produce *bitwise-identical* logits, and so will speculative decoding and
//! chunked prefill, which also change how many rows go through at once.
//!
//! Parallelism (rayon) only ever splits *which* output elements a thread
//! computes, never the sum inside one element.
// ANCHOR_END: row_independence

use rayon::prelude::*;

// ANCHOR: dot
/// `x · w`, summed in 8 interleaved lanes folded by a fixed tree: the same
/// order for every call, so the result depends only on `x` and `w`.
pub fn dot(x: &[f32], w: &[f32]) -> f32 {
    debug_assert_eq!(x.len(), w.len());
    const LANES: usize = 8;
    let (x_blocks, x_tail) = x.as_chunks::<LANES>();
    let (w_blocks, w_tail) = w.as_chunks::<LANES>();
    let mut acc = [0.0f32; LANES];
    for (xb, wb) in x_blocks.iter().zip(w_blocks) {
        for l in 0..LANES {
            acc[l] = xb[l].mul_add(wb[l], acc[l]);
        }
    }
    let mut sum = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    for (a, b) in x_tail.iter().zip(w_tail) {
        sum = a.mul_add(*b, sum);
    }
    sum
}
// ANCHOR_END: dot

// ANCHOR: matmul
/// `out = x · w`: a linear layer.
///
/// `x` is `[n, d_in]` (one row per token), `w` is `[d_in, d_out]` — PyTorch's
/// `[d_out, d_in]` weight transposed once at load time, so that the inner loop
/// reads a contiguous run of output columns — and `out` is `[n, d_out]`.
///
/// Prefill calls it with many rows: a matrix-matrix product, ~6 FLOPs per
/// weight loaded from cache, compute-bound. Decode calls it with one row: a
/// matrix-vector product, 2 FLOPs per weight streamed from memory,
/// memory-bound (book: roofline.md). Same arithmetic per element either way.
pub fn matmul(x: &[f32], w: &[f32], out: &mut [f32], d_in: usize, d_out: usize) {
    let n = x.len() / d_in;
    assert_eq!(x.len(), n * d_in, "x is not [n, d_in]");
    assert_eq!(w.len(), d_in * d_out, "w is not [d_in, d_out]");
    assert_eq!(out.len(), n * d_out, "out is not [n, d_out]");
    let cols_per_task = 2048.min(
        d_out
            .div_ceil(rayon::current_num_threads())
            .next_multiple_of(16),
    );
    if (2..2 * PREFILL_ROWS).contains(&n) {
        // A few rows (a speculative verify pass, a short chunk): still memory-bound, so
        // stream each weight row once for all of them (see `rows_times_weight_rows`).
        let strips: Vec<(usize, Vec<f32>)> = (0..d_out)
            .step_by(cols_per_task)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|j0| {
                (
                    j0,
                    rows_times_weight_rows(x, w, j0, cols_per_task.min(d_out - j0), d_out),
                )
            })
            .collect();
        for (j0, strip) in strips {
            let width = strip.len() / n;
            for (dst, src) in out.chunks_exact_mut(d_out).zip(strip.chunks_exact(width)) {
                dst[j0..j0 + width].copy_from_slice(src);
            }
        }
    } else if n < 2 * PREFILL_ROWS {
        // Decode: one row at a time, its output columns split across threads.
        for (x_row, out_row) in x.chunks_exact(d_in).zip(out.chunks_exact_mut(d_out)) {
            out_row
                .par_chunks_mut(cols_per_task)
                .enumerate()
                .for_each(|(t, out_cols)| {
                    row_times_weight_rows(x_row, w, out_cols, t * cols_per_task, d_out);
                });
        }
    } else {
        // Prefill: rows split across threads; each thread walks the weight in
        // column tiles that stay in cache while all its rows use them.
        let tasks = 4 * rayon::current_num_threads();
        let rows_per_task = n.div_ceil(tasks).next_multiple_of(PREFILL_ROWS);
        x.par_chunks(rows_per_task * d_in)
            .zip(out.par_chunks_mut(rows_per_task * d_out))
            .for_each(|(x_rows, out_rows)| {
                let mut out_cols = vec![0.0f32; x_rows.len() / d_in * PREFILL_COLS];
                for j0 in (0..d_out).step_by(PREFILL_COLS) {
                    let width = PREFILL_COLS.min(d_out - j0);
                    let tile = &mut out_cols[..x_rows.len() / d_in * width];
                    matmul_rows::<PREFILL_ROWS, PREFILL_COLS>(x_rows, w, tile, j0, d_out);
                    for (dst, src) in out_rows
                        .chunks_exact_mut(d_out)
                        .zip(tile.chunks_exact(width))
                    {
                        dst[j0..j0 + width].copy_from_slice(src);
                    }
                }
            });
    }
}

/// `out[c] = Σ_k x[k] · w[k][j0 + c]` for one row, accumulating in `out` itself
/// while walking `w` row by row: each step reads one contiguous run of a weight
/// row, the access pattern memory streams fastest (decode is memory-bound).
/// The operations per element are those of [`tile`]: fused multiply-adds from
/// 0.0, in order of `k` — so decode and prefill agree bit for bit.
fn row_times_weight_rows(x_row: &[f32], w: &[f32], out: &mut [f32], j0: usize, d_out: usize) {
    out.fill(0.0);
    for (k, &x_k) in x_row.iter().enumerate() {
        let w_k = &w[k * d_out + j0..][..out.len()];
        for (o, &wv) in out.iter_mut().zip(w_k) {
            *o = x_k.mul_add(wv, *o);
        }
    }
}

/// Columns `j0..j0 + width` of `x · w` for a few rows (2-11), `[n, width]`, in register
/// tiles of all `n` rows x 16 columns ([`tile`]): each weight value is loaded once and
/// used by every row while the sums stay in registers, so a few rows cost about one
/// row's memory traffic. Each element is still the chain of fused multiply-adds from 0.0
/// in order of `k`: bit for bit the one-row result.
fn rows_times_weight_rows(x: &[f32], w: &[f32], j0: usize, width: usize, d_out: usize) -> Vec<f32> {
    let d_in = w.len() / d_out;
    let mut out = vec![0.0f32; x.len() / d_in * width];
    // Groups of up to 6 rows (12 accumulator registers of 8 lanes): 9 rows = 6 + 3.
    let group = PREFILL_ROWS;
    for (x_g, out_g) in x.chunks(group * d_in).zip(out.chunks_mut(group * width)) {
        match x_g.len() / d_in {
            1 => matmul_rows::<1, PREFILL_COLS>(x_g, w, out_g, j0, d_out),
            2 => matmul_rows::<2, PREFILL_COLS>(x_g, w, out_g, j0, d_out),
            3 => matmul_rows::<3, PREFILL_COLS>(x_g, w, out_g, j0, d_out),
            4 => matmul_rows::<4, PREFILL_COLS>(x_g, w, out_g, j0, d_out),
            5 => matmul_rows::<5, PREFILL_COLS>(x_g, w, out_g, j0, d_out),
            _ => matmul_rows::<PREFILL_ROWS, PREFILL_COLS>(x_g, w, out_g, j0, d_out),
        }
    }
    out
}

/// Rows per register tile in prefill, and columns (2 AVX2 registers of 8).
const PREFILL_ROWS: usize = 6;
const PREFILL_COLS: usize = 16;

/// `out[r][c] = Σ_k x[r][k] · w[k][j0 + c]` for every row `r` of `x` and every
/// column `c` of `out` (`out` is `[rows, width]`, a window of the full output).
/// Works in tiles of `R` rows x `C` columns whose sums live in registers;
/// leftover rows take `1 x C` tiles and leftover columns `1 x 1` tiles. Every
/// tile size performs the same additions in the same order for a given element.
fn matmul_rows<const R: usize, const C: usize>(
    x: &[f32],
    w: &[f32],
    out: &mut [f32],
    j0: usize,
    d_out: usize,
) {
    let d_in = w.len() / d_out;
    let rows = x.len() / d_in;
    let width = out.len() / rows;
    let full_cols = width / C * C;
    let full_rows = rows / R * R;
    for r in (0..full_rows).step_by(R) {
        for c in (0..full_cols).step_by(C) {
            tile::<R, C>(x, w, out, d_in, d_out, width, r, j0, c);
        }
    }
    for r in full_rows..rows {
        for c in (0..full_cols).step_by(C) {
            tile::<1, C>(x, w, out, d_in, d_out, width, r, j0, c);
        }
    }
    for r in 0..rows {
        for c in full_cols..width {
            tile::<1, 1>(x, w, out, d_in, d_out, width, r, j0, c);
        }
    }
}

// ANCHOR: tile
/// One `R x C` register tile: `C` output columns of `R` rows, summed over all of `k`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn tile<const R: usize, const C: usize>(
    x: &[f32],
    w: &[f32],
    out: &mut [f32],
    d_in: usize,
    d_out: usize,
    width: usize,
    r: usize,
    j0: usize,
    c: usize,
) {
    // The R rows of x, each sliced to its length once, so the loop below needs no bounds checks.
    let x_rows: [&[f32]; R] = std::array::from_fn(|i| &x[(r + i) * d_in..][..d_in]);
    let mut acc = [[0.0f32; C]; R];
    for (k, w_row) in w.chunks_exact(d_out).enumerate() {
        let w_k = &w_row[j0 + c..][..C];
        for (acc_row, x_row) in acc.iter_mut().zip(x_rows) {
            let x_rk = x_row[k];
            for (a, &wv) in acc_row.iter_mut().zip(w_k) {
                *a = x_rk.mul_add(wv, *a);
            }
        }
    }
    for (i, acc_row) in acc.iter().enumerate() {
        out[(r + i) * width + c..][..C].copy_from_slice(acc_row);
    }
}
// ANCHOR_END: tile
// ANCHOR_END: matmul

// ANCHOR: rmsnorm
/// RMSNorm (Zhang & Sennrich 2019): `out = x / sqrt(mean(x²) + eps) * weight`, per row.
///
/// Llama normalises with the root mean square only (no mean subtraction, no bias).
pub fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let dim = weight.len();
    for (x_row, out_row) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let mean_square = x_row.iter().map(|v| v * v).sum::<f32>() / dim as f32;
        let inv_rms = 1.0 / (mean_square + eps).sqrt();
        for ((o, &xi), &wi) in out_row.iter_mut().zip(x_row).zip(weight) {
            *o = wi * (xi * inv_rms);
        }
    }
}
// ANCHOR_END: rmsnorm

// ANCHOR: softmax
/// Softmax in place. Subtracting the maximum first keeps `exp` from overflowing
/// (`exp(1000.0)` is `inf` in f32) without changing the result:
/// `softmax(x) = softmax(x - c)` for any constant `c`.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for xi in x.iter_mut() {
        *xi = (*xi - max).exp();
        sum += *xi;
    }
    for xi in x.iter_mut() {
        *xi /= sum;
    }
}
// ANCHOR_END: softmax

// ANCHOR: rope
/// The cos and sin tables of rotary position embeddings (Su et al. 2021) for one position.
///
/// Pair `i` (of `head_dim / 2`) turns by the angle `pos * theta^(-2i / head_dim)`:
/// early pairs spin fast (fine position), late pairs slowly (coarse position).
/// Computed in f64 and rounded once, so the table is exact to f32 precision.
pub fn rope_cos_sin(pos: usize, head_dim: usize, theta: f64) -> (Vec<f32>, Vec<f32>) {
    let half = head_dim / 2;
    (0..half)
        .map(|i| {
            let inv_freq = theta.powf(-((2 * i) as f64) / head_dim as f64);
            let angle = pos as f64 * inv_freq;
            (angle.cos() as f32, angle.sin() as f32)
        })
        .unzip()
}

/// Rotates every head of one token's query or key vector, in place.
///
/// Hugging Face's "rotate half" layout: dimension `i` pairs with `i + head_dim/2`
/// (not `2i` with `2i+1` as in the paper and llama2.c; the GGUF importer undoes
/// llama.cpp's permutation so that this layout holds):
/// `x'[i] = x[i] cos - x[i+half] sin`, `x'[i+half] = x[i+half] cos + x[i] sin`.
/// The position is the token's true position in the sequence, never a cache row.
pub fn apply_rope(heads: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
    let half = head_dim / 2;
    for head in heads.chunks_exact_mut(head_dim) {
        let (x1, x2) = head.split_at_mut(half);
        for i in 0..half {
            let (a, b) = (x1[i], x2[i]);
            x1[i] = a * cos[i] - b * sin[i];
            x2[i] = b * cos[i] + a * sin[i];
        }
    }
}
// ANCHOR_END: rope

// ANCHOR: swiglu
/// SwiGLU (Shazeer 2020): `gate = silu(gate) * up`, in place, with `silu(x) = x·σ(x)`.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    // Element-wise, so splitting it across threads cannot change a bit; worth it
    // in prefill, where it is 1536 `exp`s per token per layer.
    gate.par_chunks_mut(4096)
        .zip(up.par_chunks(4096))
        .for_each(|(gate, up)| {
            for (g, &u) in gate.iter_mut().zip(up) {
                let silu = *g / (1.0 + (-*g).exp());
                *g = silu * u;
            }
        });
}
// ANCHOR_END: swiglu

/// `x += y`, element by element: the residual connection.
pub fn add_inplace(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// `x[row] += bias` for every row: the optional q/k/v biases of Qwen2-style models.
pub fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        add_inplace(row, bias);
    }
}

/// Index of the largest value; ties go to the lowest index (as `torch.argmax`).
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}
