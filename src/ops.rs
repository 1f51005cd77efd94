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
//! whether it sits in a tile of 8 rows (prefill) or of 1 row (decode), in a
//! 16-lane AVX-512 register or an 8-lane AVX2 one ([`crate::simd`]: vectors run
//! across output columns, never across `k`).
//! (A fused multiply-add rounds once instead of twice: a different result from
//! `acc + x·w`, but the same one on both paths, which is what matters here.) So the
//! naive path (hundreds of rows per step) and the cached path (1 row per step)
//! produce *bitwise-identical* logits, and so will speculative decoding and
//! chunked prefill, which also change how many rows go through at once.
//!
//! Parallelism (rayon) only ever splits *which* output elements a thread
//! computes, never the sum inside one element.
// ANCHOR_END: row_independence

use crate::simd::{Isa, WeightElem, PANEL};
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
    matmul_on(Isa::detected(), x, w, out, d_in, d_out);
}

/// [`matmul`] with a chosen kernel version and weight format (f32, bf16 or int8
/// blocks: `w` is then the `[d_in / 32, d_out / 16]` array of blocks).
pub fn matmul_on<W: WeightElem>(
    isa: Isa,
    x: &[f32],
    w: &[W],
    out: &mut [f32],
    d_in: usize,
    d_out: usize,
) {
    assert_eq!(
        w.len() * W::BLOCK_ROWS * W::BLOCK_COLS,
        d_in * d_out,
        "w is not [d_in, d_out]"
    );
    matmuls_on(isa, x, d_in, vec![(w, out)]);
}

/// Several linear layers of the same input — Q, K and V; gate and up — as one
/// parallel region: in decode each matrix is small (Q is 576 x 576: 1.3 MB, a
/// few dozen microseconds of memory streaming), so handing the threads one
/// list of strips instead of three saves two rounds of thread wake-ups.
/// Each job is `(w: [d_in, d_out], out: [n, d_out])`.
pub fn matmuls<W: WeightElem>(x: &[f32], d_in: usize, jobs: Vec<(&[W], &mut [f32])>) {
    matmuls_on(Isa::detected(), x, d_in, jobs);
}

/// [`matmuls`] with a chosen kernel version.
pub fn matmuls_on<W: WeightElem>(isa: Isa, x: &[f32], d_in: usize, jobs: Vec<(&[W], &mut [f32])>) {
    let n = x.len() / d_in;
    assert_eq!(x.len(), n * d_in, "x is not [n, d_in]");
    for (w, out) in &jobs {
        assert!(
            out.len().is_multiple_of(n.max(1))
                && w.len() * W::BLOCK_ROWS * W::BLOCK_COLS * n == d_in * out.len(),
            "w is not [d_in, d_out] or out is not [n, d_out]"
        );
    }
    if n == 0 {
        return;
    }
    if n < PACKED_MIN_ROWS || !W::PACKS {
        by_strips(isa, x, d_in, jobs);
    } else {
        for (w, out) in jobs {
            by_panels(isa, x, d_in, w, out);
        }
    }
}

/// Below this many rows, the weight is read in place, strip by strip (decode:
/// memory-bound, streaming `w` once is all that counts); from it on, `w` is first
/// packed into panels for the register-tiled kernel (prefill: compute-bound).
/// Packing reads and writes the whole weight once more, so it only pays when enough
/// rows share it; a batch of a few to a few dozen decode rows (a serving engine's
/// iteration, a verify pass) stays in strips. What such a batch costs against a one-row
/// step is measured, not written here: `kvlab bench-verify` (2 to 17 rows) and `kvlab
/// bench-batch` (book: speculative.md, scheduling.md). Either way each output is the
/// same chain of FMAs: the threshold moves time, never bits.
const PACKED_MIN_ROWS: usize = 32;

/// Sums one strip keeps in L1 (`[n, width]`, 8 KiB): wide enough that each weight
/// row is read as one long contiguous run, small enough to stay in L1 while the
/// `k` loop adds into it.
const STRIP_FLOATS: usize = 2048;

/// Columns a strip covers at least: formats that are never packed (W8A8, bf16a) run
/// prefill's hundreds of rows in strips too, and their kernels tile four blocks of 16
/// columns at a time, each weight register shared by several rows (fewer columns would
/// leave them one block: four times the loads per product).
const MIN_STRIP_COLS: usize = 64;

/// Decode: every matrix cut into strips of output columns, all strips of all
/// matrices shared out among the threads; each strip reads its columns of `w`
/// row by row ([`Isa::strip`]).
fn by_strips<W: WeightElem>(isa: Isa, x: &[f32], d_in: usize, mut jobs: Vec<(&[W], &mut [f32])>) {
    let n = x.len() / d_in;
    let threads = rayon::current_num_threads();
    let mut strips = Vec::new(); // (job, j0, width)
    for (job, (_, out)) in jobs.iter().enumerate() {
        let d_out = out.len() / n;
        let width = (STRIP_FLOATS / n)
            .max(MIN_STRIP_COLS)
            .min(d_out.div_ceil(threads))
            .next_multiple_of(W::BLOCK_COLS.max(16)); // a vector's columns, a block's, a panel's
        for j0 in (0..d_out).step_by(width) {
            strips.push((job, j0, width.min(d_out - j0)));
        }
    }
    let weights: Vec<(&[W], usize)> = jobs.iter().map(|(w, out)| (*w, out.len() / n)).collect();
    // Once for every strip (W8A8 quantizes the activations here; the others borrow them).
    let input = W::prepare(x, d_in);
    let sums: Vec<Vec<f32>> = strips
        .par_iter()
        .map(|&(job, j0, width)| {
            let (w, d_out) = weights[job];
            let mut sums = vec![0.0f32; n * width]; // [n, width]
            W::strip(isa, &input, d_in, w, d_out, j0, &mut sums);
            sums
        })
        .collect();
    for (&(job, j0, width), sums) in strips.iter().zip(&sums) {
        let out = &mut jobs[job].1;
        let d_out = out.len() / n;
        for (dst, src) in out.chunks_exact_mut(d_out).zip(sums.chunks_exact(width)) {
            dst[j0..j0 + width].copy_from_slice(src);
        }
    }
}

/// Prefill: `w` packed once into panels of [`PANEL`] columns, `[d_in, PANEL]`
/// each (contiguous, zero-padded at the right edge, bf16 or int8 widened to f32), then
/// the rows split among threads; each thread runs every panel over its rows in
/// tiles of [`Isa::tile_rows`] rows whose sums live in registers.
fn by_panels<W: WeightElem>(isa: Isa, x: &[f32], d_in: usize, w: &[W], out: &mut [f32]) {
    let n = x.len() / d_in;
    let d_out = out.len() / n;
    let panel_len = d_in * PANEL;
    let mut panels = vec![0.0f32; d_out.div_ceil(PANEL) * panel_len]; // [panels, d_in, PANEL]
    panels
        .par_chunks_mut(panel_len)
        .enumerate()
        .for_each(|(p, panel)| {
            let (j0, width) = (p * PANEL, PANEL.min(d_out - p * PANEL));
            for (k, dst) in panel.chunks_exact_mut(PANEL).enumerate() {
                W::widen_row(w, d_out, k, j0, &mut dst[..width]);
            }
        });
    let tile_rows = isa.tile_rows();
    let rows_per_task = n
        .div_ceil(4 * rayon::current_num_threads())
        .next_multiple_of(tile_rows);
    x.par_chunks(rows_per_task * d_in)
        .zip(out.par_chunks_mut(rows_per_task * d_out))
        .for_each(|(x_rows, out_rows)| {
            let mut tile = vec![0.0f32; tile_rows * PANEL]; // [tile_rows, PANEL]
            for (p, panel) in panels.chunks_exact(panel_len).enumerate() {
                let (j0, width) = (p * PANEL, PANEL.min(d_out - p * PANEL));
                for (x_tile, out_tile) in x_rows
                    .chunks(tile_rows * d_in)
                    .zip(out_rows.chunks_mut(tile_rows * d_out))
                {
                    let tile = &mut tile[..x_tile.len() / d_in * PANEL];
                    isa.tile(x_tile, d_in, panel, tile);
                    for (dst, src) in out_tile
                        .chunks_exact_mut(d_out)
                        .zip(tile.chunks_exact(PANEL))
                    {
                        dst[j0..j0 + width].copy_from_slice(&src[..width]);
                    }
                }
            }
        });
}
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

// ANCHOR: geglu
/// √(2/π), the constant of GELU's tanh approximation.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// GELU, tanh approximation (Hendrycks & Gimpel 2016; PyTorch's `gelu(approximate="tanh")`,
/// transformers' `gelu_pytorch_tanh`): `x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
pub fn gelu_tanh(x: f32) -> f32 {
    let inner = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    0.5 * x * (1.0 + inner.tanh())
}

/// GeGLU (Shazeer 2020), Gemma's MLP: `gate = gelu_tanh(gate) * up`, in place.
pub fn geglu(gate: &mut [f32], up: &[f32]) {
    gate.par_chunks_mut(4096)
        .zip(up.par_chunks(4096))
        .for_each(|(gate, up)| {
            for (g, &u) in gate.iter_mut().zip(up) {
                *g = gelu_tanh(*g) * u;
            }
        });
}
// ANCHOR_END: geglu

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
