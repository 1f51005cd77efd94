//! # Exercise 48 — bf16 activations: `vdpbf16ps`, one lane, bit for bit
//!
//! `--dtype bf16` stores each weight in 16 bits but widens it to f32 and runs f32 fused
//! multiply-adds: 16 products per AVX-512 instruction. `--dtype bf16a` rounds the
//! *activations* to bf16 too, so that AVX-512 BF16's `vdpbf16ps` can take them in pairs:
//! each 32-bit lane holds two bf16 values, 32 products per instruction.
//!
//! bf16 is the top half of an f32: the same sign and 8-bit exponent, 7 mantissa bits. To
//! round an f32 to it, round its bit pattern at bit 16, to nearest, ties to even. Widening
//! back is exact: the 16 bits on top, zeros below.
//!
//! Intel's manual defines one lane of `vdpbf16ps acc, x, w` (pairs `x = (x0, x1)`,
//! `w = (w0, w1)`, the even value in the low half of the lane) as two fused multiply-adds,
//! the odd pair *first*, each result flushed to zero if it is denormal ("FTZ"):
//!
//! ```text
//! acc = ftz(fma(x1, w1, acc))
//! acc = ftz(fma(x0, w0, acc))
//! ```
//!
//! One output of a bf16a matmul is that step over the input pairs in order, from +0.0:
//! the AVX-512 kernel, the AVX2 twin (two FMAs, two flushes) and the portable loop run
//! the same chain, so they give the same bits.
//!
//! kvlab: `src/simd/bf16a.rs` (`round_to_bf16a`, `pair`, `step`, `strip`: the
//! definition), `src/simd/bf16a_x86.rs` (`strip_avx512`, `strip_avx2`). Book: "Appendix:
//! decode with fewer bytes", section "bf16 activations: bf16a".

/// (a) `v` rounded to bf16, as its 16 bits: to nearest, ties to even. A NaN stays a NaN
/// (quiet: set the top mantissa bit), and a denormal becomes zero of its sign first.
pub fn round_to_bf16(v: f32) -> u16 {
    let bits = if v.is_subnormal() {
        v.to_bits() & 0x8000_0000
    } else {
        v.to_bits()
    };
    if v.is_nan() {
        return (bits >> 16) as u16 | 0x0040;
    }
    let lsb = (bits >> 16) & 1;
    ((bits + 0x7fff + lsb) >> 16) as u16
}

/// (b) The f32 value of a bf16 (exact).
pub fn widen(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// (c) `v` flushed to zero of its sign when it is denormal.
pub fn ftz(v: f32) -> f32 {
    if v.is_subnormal() {
        0.0f32.copysign(v)
    } else {
        v
    }
}

/// (d) One lane of `vdpbf16ps`: `acc` plus `x[1] · w[1]`, then plus `x[0] · w[0]`.
pub fn lane(acc: f32, x: [u16; 2], w: [u16; 2]) -> f32 {
    let acc = ftz(widen(x[1]).mul_add(widen(w[1]), acc));
    ftz(widen(x[0]).mul_add(widen(w[0]), acc))
}

/// (e) One bf16a output: the f32 activations `x` and weights `w` (the same even length)
/// rounded to bf16, then the lane over their pairs in order, from +0.0.
pub fn bf16a_dot(x: &[f32], w: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (xp, wp) in x.chunks_exact(2).zip(w.chunks_exact(2)) {
        let pair = |p: &[f32]| [round_to_bf16(p[0]), round_to_bf16(p[1])];
        acc = lane(acc, pair(xp), pair(wp));
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_goes_to_nearest_with_ties_to_even() {
        let one = 1.0f32.to_bits();
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa, 1.
        assert_eq!(round_to_bf16(f32::from_bits(one + 0x8000)), 0x3f80);
        // 1 + 3 · 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up, to even.
        assert_eq!(round_to_bf16(f32::from_bits(one + 0x18000)), 0x3f82);
        // Just above and below a half.
        assert_eq!(round_to_bf16(f32::from_bits(one + 0x8001)), 0x3f81);
        assert_eq!(round_to_bf16(f32::from_bits(one + 0x7fff)), 0x3f80);
        assert_eq!(round_to_bf16(-2.5), 0xc020);
        assert_eq!(widen(round_to_bf16(3.0)), 3.0);
        // The largest finite f32 rounds up to infinity; infinity stays.
        assert_eq!(round_to_bf16(f32::MAX), 0x7f80);
        assert_eq!(round_to_bf16(f32::NEG_INFINITY), 0xff80);
    }

    #[test]
    fn nans_stay_nans_and_denormals_become_zero() {
        // A NaN whose payload sits in the low bits: rounding its bits naively carries into
        // the exponent's all-ones and gives infinity.
        for nan in [0x7f80_0001u32, 0x7fff_ffff, 0xffc0_0000] {
            assert!(
                widen(round_to_bf16(f32::from_bits(nan))).is_nan(),
                "{nan:#x}"
            );
        }
        assert_eq!(round_to_bf16(f32::from_bits(0x0000_ffff)), 0x0000);
        assert_eq!(round_to_bf16(-f32::from_bits(0x007f_ffff)), 0x8000);
        assert_eq!(ftz(f32::MIN_POSITIVE / 2.0).to_bits(), 0);
        assert_eq!(ftz(-f32::MIN_POSITIVE / 2.0).to_bits(), 0x8000_0000);
        assert_eq!(ftz(f32::MIN_POSITIVE), f32::MIN_POSITIVE);
    }

    #[test]
    fn the_lane_adds_the_odd_product_first() {
        let b = round_to_bf16;
        // acc = 1, products 2^-24 (odd) and -1 (even). Odd first: 1 + 2^-24 rounds to 1
        // (a tie, to even), then 1 - 1 = 0. Even first: 0, then 2^-24.
        let acc = lane(
            1.0,
            [b(-1.0), b(2f32.powi(-12))],
            [b(1.0), b(2f32.powi(-12))],
        );
        assert_eq!(acc, 0.0);
    }

    #[test]
    fn the_lane_flushes_a_denormal_result() {
        let b = round_to_bf16;
        // 2^-64 · 2^-66 = 2^-130: below f32's smallest normal, 2^-126. In the odd pair
        // (the first step) and in the even one (the second).
        let (t, u) = (b(2f32.powi(-64)), b(2f32.powi(-66)));
        assert_eq!(lane(0.0, [b(0.0), t], [b(0.0), u]).to_bits(), 0);
        assert_eq!(lane(0.0, [t, b(0.0)], [u, b(0.0)]).to_bits(), 0);
        // The odd step's denormal is gone before the even product (2^-126) is added.
        let m = b(2f32.powi(-63));
        assert_eq!(lane(0.0, [m, t], [m, u]), f32::MIN_POSITIVE);
        let normal = lane(
            0.0,
            [b(0.0), b(2f32.powi(-60))],
            [b(0.0), b(2f32.powi(-60))],
        );
        assert_eq!(normal, 2f32.powi(-120));
    }

    /// The chain, written out with the rounding done by the definition: what every kvlab
    /// kernel must give, bit for bit.
    fn reference(x: &[f32], w: &[f32]) -> f32 {
        let r = |v: f32| widen(round_to_bf16(v));
        let mut acc = 0.0f32;
        for p in 0..x.len() / 2 {
            acc = ftz(r(x[2 * p + 1]).mul_add(r(w[2 * p + 1]), acc));
            acc = ftz(r(x[2 * p]).mul_add(r(w[2 * p]), acc));
        }
        acc
    }

    #[test]
    fn the_dot_is_the_chain_bit_for_bit() {
        for seed in 0..300u32 {
            let len = 2 * (1 + seed as usize % 40);
            let value = |i: usize, s: f32| (seed as f32 * 12.9898 + i as f32 * 78.233).sin() * s;
            let x: Vec<f32> = (0..len).map(|i| value(i, 40.0)).collect();
            let w: Vec<f32> = (0..len).map(|i| value(i + 1000, 0.3)).collect();
            assert_eq!(
                bf16a_dot(&x, &w).to_bits(),
                reference(&x, &w).to_bits(),
                "seed {seed}"
            );
        }
    }

    #[test]
    fn rounding_the_activations_moves_the_dot_a_little() {
        let x: Vec<f32> = (0..256).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let w: Vec<f32> = (0..256)
            .map(|i| widen(round_to_bf16((i as f32 * 0.11).cos() * 0.1)))
            .collect();
        let exact: f64 = x.iter().zip(&w).map(|(&a, &b)| a as f64 * b as f64).sum();
        let ours = bf16a_dot(&x, &w) as f64;
        let scale: f64 = x
            .iter()
            .zip(&w)
            .map(|(&a, &b)| (a as f64 * b as f64).abs())
            .sum();
        assert!(
            ours != exact && (ours - exact).abs() < scale * 2f64.powi(-8),
            "{ours} vs {exact}"
        );
    }
}
