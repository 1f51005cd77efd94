//! # Exercise 03 — RoPE, rotary position embedding (旋转位置编码)
//!
//! Attention by itself does not know word order: q·k is the same wherever the tokens sit.
//! RoPE (Su et al. 2021, "RoFormer") writes the position into q and k by *rotating* pairs
//! of their dimensions by an angle proportional to the position. Because rotations compose,
//! `rope(q, m) · rope(k, n)` depends only on `m - n`: attention sees relative positions.
//!
//! For a head vector `x` of `head_dim` numbers at position `pos`, with `half = head_dim/2`:
//!
//! ```text
//! for i in 0..half:
//!     freq  = theta^(-2i / head_dim)      // i = 0 spins fastest, high i slowest
//!     angle = pos * freq
//!     (x[i], x[i + half]) <- (x[i] cos - x[i + half] sin,  x[i] sin + x[i + half] cos)
//! ```
//!
//! Which dimensions form a pair is a convention, and the two common ones are NOT
//! interchangeable. This is Hugging Face's "rotate-half" layout (`rotate_half` in
//! `modeling_llama.py`), which pairs `x[i]` with `x[i + half]`; Meta's original Llama code
//! and llama2.c pair neighbours `(x[2i], x[2i+1])`. Weights exported from HF expect
//! rotate-half, and so does kvlab. `theta` is the model's `rope_theta` (10 000 for Llama 2,
//! 100 000 for SmolLM2).
//!
//! In a KV cache (KV缓存) K is stored *after* RoPE, so `pos` must be the token's true
//! position in the sequence, not the row it happens to occupy in some buffer.

/// Rotates one head vector `x: [head_dim]` in place for position `pos`.
pub fn rope(x: &mut [f32], pos: usize, theta: f32) {
    let head_dim = x.len();
    assert_eq!(head_dim % 2, 0, "RoPE rotates pairs: head_dim must be even");
    let half = head_dim / 2;
    // TODO: rotate every pair by its angle (the header has the formula). Questions:
    // - In the rotate-half layout, who is x[i]'s partner? Who would it be in llama2.c?
    // - Which pair spins fastest as pos grows? What must pos = 0 do to the vector?
    // - When you compute the partner's new value, do you still have x[i]'s old value?
    // Work in f32, like Hugging Face does.
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_close(got: &[f32], want: &[f32], tol: f32) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= tol,
                "index {i}: got {g}, want {w} (all: {got:?})"
            );
        }
    }

    fn roped(x: &[f32], pos: usize, theta: f32) -> Vec<f32> {
        let mut v = x.to_vec();
        rope(&mut v, pos, theta);
        v
    }

    fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    /// Deterministic pseudo-random numbers in [-1, 1) (no crates: a tiny LCG).
    fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn hand_values_rotate_half_pairs() {
        // head_dim 4, theta 10000: freq_0 = 1, freq_1 = 10000^(-1/2) = 0.01. At pos 1:
        // dimension 0 pairs with dimension 2 (not 1!) and turns by 1 radian.
        assert_close(
            &roped(&[1.0, 0.0, 0.0, 0.0], 1, 10_000.0),
            &[0.540_302_3, 0.0, 0.841_470_96, 0.0],
            1e-6,
        );
        // dimension 1 pairs with dimension 3 and turns by 0.01 radian.
        assert_close(
            &roped(&[0.0, 1.0, 0.0, 0.0], 1, 10_000.0),
            &[0.0, 0.999_95, 0.0, 0.009_999_833],
            1e-6,
        );
        assert_close(
            &roped(&[1.0, 2.0, 3.0, 4.0], 2, 10_000.0),
            &[-3.144_039_2, 1.919_605_3, -0.339_143_1, 4.039_197_4],
            1e-5,
        );
    }

    #[test]
    fn hand_values_smollm2_theta() {
        // SmolLM2's rope_theta is 100 000; values from a float64 reference.
        let want = [
            -1.695_592_5,
            0.964_187_1,
            2.933_458,
            3.995_731_6,
            -4.808_842_5,
            6.250_627_4,
            7.028_145,
            8.002_133,
        ];
        assert_close(
            &roped(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], 3, 100_000.0),
            &want,
            1e-5,
        );
    }

    #[test]
    fn position_zero_is_identity() {
        let x = pseudo_random(64, 1);
        // cos 0 = 1 and sin 0 = 0 exactly, so this is bitwise equal.
        assert_eq!(roped(&x, 0, 10_000.0), x);
    }

    #[test]
    fn rotation_preserves_norm() {
        let x = pseudo_random(64, 2);
        for pos in [1, 7, 100, 4000] {
            let y = roped(&x, pos, 10_000.0);
            assert_ne!(y, x, "pos {pos} must change the vector");
            assert!(
                (dot(&y, &y) - dot(&x, &x)).abs() < 1e-4,
                "pos {pos}: norm changed"
            );
        }
    }

    #[test]
    fn dot_product_depends_only_on_relative_position() {
        // The reason RoPE exists: q at m and k at n score the same for any shift of both.
        let (q, k) = (pseudo_random(64, 3), pseudo_random(64, 4));
        let score = |m: usize, n: usize| dot(&roped(&q, m, 10_000.0), &roped(&k, n, 10_000.0));
        let base = score(5, 2);
        for (m, n) in [(6, 3), (13, 10), (103, 100), (1003, 1000)] {
            assert!(
                (score(m, n) - base).abs() < 2e-3,
                "({m},{n}): {} vs {base}",
                score(m, n)
            );
        }
        // ...and a different distance really does give a different score.
        assert!((score(5, 4) - base).abs() > 1e-2);
    }
}
