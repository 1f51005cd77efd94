//! # Exercise 39 — split-K: many short sums instead of one long one
//!
//! A decode step (解码) multiplies one row `x` `[d_in]` by each weight matrix `W`
//! `[d_in, d_out]`. kvlab's plain GPU matmuls (v1, v2) give each output column one thread,
//! which adds its `d_in` products in order, `acc = fma(x[k], w[k][c], acc)` for k = 0, 1, ...:
//! the CPU's chain, bit for bit. On an H200 that read a 576 x 1536 weight at 139-187 GB/s,
//! 4 % of the GPU's 4,400 GB/s: 1,536 threads, each waiting on its own chain, cannot keep
//! the memory busy. Matmul v3 (`kernels/matmul.cu`) cuts each column's sum into
//! [`SLICES`] slices: slice `s` adds `k = s, s + 32, s + 64, ...` in order (its own chain,
//! `d_in / 32` long), and then the 32 slice sums are added in order, slice 0 first. Same
//! products, another order of addition: v3 agrees with the CPU to a rounding bound, not bit
//! for bit. And because that order depends on `d_in` alone, never on how many rows a launch
//! holds, the GPU's naive and cached paths still get the same bits.
//!
//! kvlab: `kernels/matmul.cu` (`matmul_v3`), `src/cuda/ops.rs` (`Gpu::matmul`); book
//! chapter "The CUDA backend", section "What the H200 measured".

/// Slices of k per output column (`V3_SLICES` in kernels/matmul.cu).
pub const SLICES: usize = 32;

/// Given: the plain chain of v1, v2 and the CPU (`ops::matmul`) for column `c` of `w`
/// (`[d_in, d_out]`, row-major): one fused multiply-add per k, in order, from 0.
pub fn chain_dot(x: &[f32], w: &[f32], d_out: usize, c: usize) -> f32 {
    let mut acc = 0.0f32;
    for (k, &xk) in x.iter().enumerate() {
        acc = xk.mul_add(w[k * d_out + c], acc);
    }
    acc
}

/// (a) Column `c` the way matmul v3 adds it, with `slices` slices: slice `s` is the chain
/// over `k = s, s + slices, s + 2·slices, ...` (fused multiply-adds from 0, in order of k),
/// and the result is slice 0's sum, then + slice 1's, + slice 2's, ... in order.
pub fn splitk_dot(x: &[f32], w: &[f32], d_out: usize, c: usize, slices: usize) -> f32 {
    let slice_sum = |s: usize| {
        let mut acc = 0.0f32;
        for k in (s..x.len()).step_by(slices) {
            acc = x[k].mul_add(w[k * d_out + c], acc);
        }
        acc
    };
    let mut sum = slice_sum(0);
    for s in 1..slices {
        sum += slice_sum(s);
    }
    sum
}

/// (b) `out[r][c]` for `n` rows of `x` (`[n, d_in]`), every column by [`splitk_dot`] with
/// [`SLICES`] slices: what one launch of matmul v3 writes.
pub fn matvec_v3(x: &[f32], w: &[f32], n: usize, d_in: usize, d_out: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n * d_out);
    for r in 0..n {
        let row = &x[r * d_in..(r + 1) * d_in];
        for c in 0..d_out {
            out.push(splitk_dot(row, w, d_out, c, SLICES));
        }
    }
    out
}

/// (c) The two floors under one decode step, in ms: issuing `launches` kernels at
/// `launch_us` µs each, and reading `bytes` at `bytes_per_s`. The step takes at least the
/// larger of the two. Returns `(launch_ms, read_ms)`.
pub fn step_floors_ms(launches: usize, launch_us: f64, bytes: f64, bytes_per_s: f64) -> (f64, f64) {
    (launches as f64 * launch_us / 1e3, bytes / bytes_per_s * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(d_in: usize, d_out: usize) -> Vec<f32> {
        (0..d_in * d_out)
            .map(|i| ((i * 7919 % 1009) as f32 - 504.0) / 2048.0)
            .collect()
    }

    fn row(d_in: usize, seed: usize) -> Vec<f32> {
        (0..d_in)
            .map(|k| (((k + seed) * 104_729 % 997) as f32 - 498.0) / 499.0)
            .collect()
    }

    #[test]
    fn one_slice_is_the_plain_chain_bit_for_bit() {
        let (d_in, d_out) = (100, 7);
        let (x, w) = (row(d_in, 1), weights(d_in, d_out));
        for c in 0..d_out {
            assert_eq!(
                splitk_dot(&x, &w, d_out, c, 1).to_bits(),
                chain_dot(&x, &w, d_out, c).to_bits(),
                "column {c}"
            );
        }
    }

    #[test]
    fn slices_take_every_slices_th_k() {
        // 1e8 + 1 rounds back to 1e8 in f32, so the order of addition shows. Two slices of
        // x·w = [1e8, 1, -1e8, 1]: slice 0 is 1e8 + -1e8 = 0, slice 1 is 1 + 1 = 2.
        let x = [1.0f32; 4];
        let w = [1e8f32, 1.0, -1e8, 1.0]; // one column
        assert_eq!(
            splitk_dot(&x, &w, 1, 0, 2),
            2.0,
            "slice s takes k = s, s + 2"
        );
        assert_eq!(chain_dot(&x, &w, 1, 0), 1.0, "the chain loses the first 1");
    }

    #[test]
    fn each_product_is_one_fused_multiply_add() {
        // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: rounded to f32 on its own the 2^-24 is lost (a
        // tie, to even); fused into `-1 + a·a` it is kept.
        let a = 1.0 + 2f32.powi(-12);
        let (x, w) = ([1.0, a], [-1.0, a]);
        assert_eq!(
            splitk_dot(&x, &w, 1, 0, 1),
            2f32.powi(-11) + 2f32.powi(-24),
            "one slice: fma(a, a, -1)"
        );
        // Two slices: slice 1 is fma(a, a, 0), the rounded product; then -1 + it.
        assert_eq!(splitk_dot(&x, &w, 1, 0, 2), 2f32.powi(-11));
    }

    #[test]
    fn slice_sums_are_added_in_order_from_slice_0() {
        // Slices 0, 1, 2 sum to 1e8, 1, -1e8: in order (1e8 + 1) - 1e8 = 0; any other
        // order that adds the two big ones first keeps the 1.
        let x = [1.0f32; 3];
        let w = [1e8f32, 1.0, -1e8];
        assert_eq!(splitk_dot(&x, &w, 1, 0, 3), 0.0);
    }

    #[test]
    fn v3_is_within_the_rounding_bound_of_the_exact_sum() {
        let (d_in, d_out) = (1536, 5);
        let (x, w) = (row(d_in, 3), weights(d_in, d_out));
        let out = matvec_v3(&x, &w, 1, d_in, d_out);
        let u = f64::from(f32::EPSILON) / 2.0;
        let terms = (d_in.div_ceil(SLICES) + SLICES) as f64;
        for c in 0..d_out {
            let exact: f64 = (0..d_in)
                .map(|k| x[k] as f64 * w[k * d_out + c] as f64)
                .sum();
            let magnitude: f64 = (0..d_in)
                .map(|k| (x[k] as f64 * w[k * d_out + c] as f64).abs())
                .sum();
            let bound = terms * u / (1.0 - terms * u) * magnitude;
            assert!(
                (out[c] as f64 - exact).abs() <= bound,
                "column {c}: {} vs exact {exact} (bound {bound:e})",
                out[c]
            );
        }
    }

    #[test]
    fn a_row_gets_the_same_bits_alone_or_among_others() {
        let (d_in, d_out, n) = (96, 6, 4);
        let w = weights(d_in, d_out);
        let x: Vec<f32> = (0..n).flat_map(|r| row(d_in, 10 + r)).collect();
        let all = matvec_v3(&x, &w, n, d_in, d_out);
        assert_eq!(all.len(), n * d_out);
        for r in 0..n {
            let alone = matvec_v3(&x[r * d_in..(r + 1) * d_in], &w, 1, d_in, d_out);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&alone),
                bits(&all[r * d_out..(r + 1) * d_out]),
                "row {r}"
            );
            for (c, value) in alone.iter().enumerate() {
                assert_eq!(
                    value.to_bits(),
                    splitk_dot(&x[r * d_in..(r + 1) * d_in], &w, d_out, c, SLICES).to_bits()
                );
            }
        }
    }

    #[test]
    fn the_h200_decode_step_is_bound_by_its_launches() {
        // The unfused v3 step on the H200 (book: cuda.md): 483 launches at 4.5 µs, 545 MB
        // of f32 weights at 4,400 GB/s.
        let (launch_ms, read_ms) = step_floors_ms(483, 4.5, 544.7e6, 4.4e12);
        assert!((launch_ms - 2.1735).abs() < 1e-9, "{launch_ms}");
        assert!((read_ms - 0.1238).abs() < 1e-3, "{read_ms}");
        assert!(
            launch_ms > 10.0 * read_ms,
            "launching, not reading, is the floor"
        );
        assert_eq!(step_floors_ms(0, 4.5, 0.0, 1.0), (0.0, 0.0));
    }
}
