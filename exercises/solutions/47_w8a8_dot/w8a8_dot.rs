//! # Exercise 47 — W8A8: a dot product in integers, with the bits fixed
//!
//! `--dtype int8` widens every int8 weight to its f32 value and runs f32 fused
//! multiply-adds: decode spends its time widening. `--dtype w8a8` (llama.cpp's Q8_0 x Q8_0
//! arithmetic) quantizes the *activations* too, in blocks of 32 with one scale each, and
//! multiplies codes by codes: the CPU's integer dot-product instruction (AVX-512 VNNI's
//! `vpdpbusd`) does 64 byte products per instruction.
//!
//! For one output, over the blocks `b = 0, 1, 2, ...` of the input:
//!
//! ```text
//! isum = Σ_{k < 32} xq[32 b + k] · wq[32 b + k]        an integer, exact
//! acc  = fma(dx[b] · dw[b], isum, acc)                  one rounding per block, b in order
//! ```
//!
//! `|isum| <= 32 · 127 · 127 < 2^24`: exact in f32 too, whatever order the 32 products are
//! added in. So a 16-lane instruction, an 8-lane one and a scalar loop give the same
//! integer; the only rounding is the fused multiply-add, and fixing the order of the blocks
//! fixes the bits. (kvlab also rounds each scale to f16, so `dx · dw` is exact as well;
//! here the scales stay f32 and the product is computed the same way everywhere.)
//!
//! `vpdpbusd` multiplies *unsigned* bytes by signed ones. The weight codes are signed
//! (`-127..=127`), so kvlab's AVX-512 kernel reads `wq + 128` (`1..=255`) and takes the
//! surplus back: `Σ x · w = Σ x · (w + 128) - 128 · Σ x`.
//!
//! kvlab: `src/simd/w8a8.rs` (`quantize_rows`, `strip`: the definition),
//! `src/simd/w8a8_x86.rs` (`strip_avx512`: the offset; `strip_avx2`), `src/simd/q8.rs`
//! (`quantize_q8_0`). Book: "Appendix: decode with fewer bytes", section "Integer
//! activations: W8A8".

/// Values per Q8_0 block.
pub const BLOCK: usize = 32;

/// (a) One block in Q8_0, as llama.cpp's reference quantizer makes it: the scale
/// `d = max|v| / 127` and the codes `round(v · (1/d))` (halves away from zero, what
/// `f32::round` does); a block of zeros has `d = 0` and zero codes.
pub fn quantize(values: &[f32; BLOCK]) -> (f32, [i8; BLOCK]) {
    let amax = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let inv_d = if d != 0.0 { 1.0 / d } else { 0.0 };
    (d, values.map(|v| (v * inv_d).round() as i8))
}

/// (b) The integer dot product of two blocks of codes.
pub fn block_dot(x: &[i8; BLOCK], w: &[i8; BLOCK]) -> i32 {
    x.iter().zip(w).map(|(&a, &b)| a as i32 * b as i32).sum()
}

/// (c) The same dot product as `vpdpbusd` must compute it: each weight code read as the
/// unsigned byte `w + 128`, times the signed `x`, then the surplus taken off.
pub fn block_dot_unsigned(x: &[i8; BLOCK], w: &[i8; BLOCK]) -> i32 {
    let shifted: i32 = x
        .iter()
        .zip(w)
        .map(|(&a, &b)| a as i32 * (b as i32 + 128) as u8 as i32)
        .sum();
    let x_sum: i32 = x.iter().map(|&a| a as i32).sum();
    shifted - 128 * x_sum
}

/// (d) One W8A8 output: the chain of the header over the blocks, in order, from +0.0.
/// `x` and `w` are the blocks of the activation row and of the weight column, each
/// `(scale, codes)`.
pub fn w8a8_dot(x: &[(f32, [i8; BLOCK])], w: &[(f32, [i8; BLOCK])]) -> f32 {
    let mut acc = 0.0f32;
    for ((dx, xq), (dw, wq)) in x.iter().zip(w) {
        acc = (dx * dw).mul_add(block_dot(xq, wq) as f32, acc);
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(seed: u32, scale: f32) -> [f32; BLOCK] {
        std::array::from_fn(|i| (seed as f32 * 12.9898 + i as f32 * 78.233).sin() * scale)
    }

    #[test]
    fn quantize_scales_the_largest_value_to_127() {
        let mut v = values(1, 3.0);
        v[7] = -4.0;
        let (d, q) = quantize(&v);
        assert_eq!(d, 4.0 / 127.0);
        assert_eq!(q[7], -127);
        assert!(q.iter().all(|&c| (-127..=127).contains(&c)));
        for (c, v) in q.iter().zip(&v) {
            assert!(
                (*c as f32 * d - v).abs() <= d / 2.0 + 1e-6,
                "half a step at most"
            );
        }
        assert_eq!(quantize(&[0.0; BLOCK]), (0.0, [0; BLOCK]));
    }

    #[test]
    fn quantize_rounds_halves_away_from_zero() {
        // 127 and 63.5 steps: the second is a half, which rounds up in magnitude.
        let mut v = [0.0f32; BLOCK];
        v[0] = 127.0;
        v[1] = 63.5;
        v[2] = -63.5;
        v[3] = 0.4;
        let (d, q) = quantize(&v);
        assert_eq!(d, 1.0);
        assert_eq!(&q[..4], &[127, 64, -64, 0]);
    }

    #[test]
    fn the_block_dot_is_exact() {
        let extreme = [127i8; BLOCK];
        assert_eq!(block_dot(&extreme, &extreme), 32 * 127 * 127);
        assert_eq!(block_dot(&extreme, &[-127; BLOCK]), -32 * 127 * 127);
        let x = quantize(&values(2, 1.0)).1;
        let w = quantize(&values(3, 0.2)).1;
        let want: i64 = x.iter().zip(&w).map(|(&a, &b)| a as i64 * b as i64).sum();
        assert_eq!(block_dot(&x, &w) as i64, want);
        assert!(
            block_dot(&extreme, &extreme) < 1 << 24,
            "exact in f32 as well"
        );
    }

    #[test]
    fn the_unsigned_form_gives_the_same_integer() {
        for seed in 0..50 {
            let x = quantize(&values(seed, 1.0)).1;
            let w = quantize(&values(seed + 100, 0.3)).1;
            assert_eq!(block_dot_unsigned(&x, &w), block_dot(&x, &w), "seed {seed}");
        }
        for (x, w) in [(127, -127), (-127, 127), (-127, -127), (0, -127)] {
            let (x, w) = ([x; BLOCK], [w; BLOCK]);
            assert_eq!(block_dot_unsigned(&x, &w), block_dot(&x, &w));
        }
    }

    /// The chain, written out: what every kvlab kernel must give, bit for bit.
    fn reference(x: &[(f32, [i8; BLOCK])], w: &[(f32, [i8; BLOCK])]) -> f32 {
        let mut acc = 0.0f32;
        for b in 0..x.len() {
            let isum: i64 = (0..BLOCK)
                .map(|k| x[b].1[k] as i64 * w[b].1[k] as i64)
                .sum();
            acc = (x[b].0 * w[b].0).mul_add(isum as f32, acc);
        }
        acc
    }

    #[test]
    fn the_dot_is_the_chain_bit_for_bit() {
        for seed in 0..200u32 {
            let blocks = 1 + seed as usize % 9;
            let x: Vec<_> = (0..blocks)
                .map(|b| quantize(&values(seed * 31 + b as u32, 5.0)))
                .collect();
            let w: Vec<_> = (0..blocks)
                .map(|b| quantize(&values(seed * 17 + b as u32 + 7, 0.1)))
                .collect();
            assert_eq!(
                w8a8_dot(&x, &w).to_bits(),
                reference(&x, &w).to_bits(),
                "seed {seed}"
            );
        }
    }
}
