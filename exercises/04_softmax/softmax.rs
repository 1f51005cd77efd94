//! # Exercise 04 — softmax: scores into attention weights (softmax归一化)
//!
//! Self-attention (自注意力) dots the current token's Query with every Key to get
//! attention scores (注意力分数), then softmax turns the scores into weights that are
//! positive and sum to 1:
//!
//! ```text
//! softmax(x)_i = exp(x_i) / sum_j exp(x_j)
//! ```
//!
//! Written like that it breaks on real logits: `exp(89.0)` is already `inf` in f32, and
//! `inf / inf` is NaN; `exp(-104.0)` is already `0`, and `0 / 0` is NaN too. One property
//! of softmax gets you out: multiply the numerator and the denominator by the same
//! `exp(-c)` and nothing changes, which is the same as subtracting `c` from every logit.
//! The exercise is choosing `c` so that no logit, however large or small, can break it.
//!
//! kvlab uses this same in-place softmax in attention (naive and cached paths alike) and in
//! the sampler, where the scores are a vocabulary's logits.

/// Numerically stable softmax, in place (like llama2.c's `softmax(float* x, int size)`):
/// on return `x` holds probabilities that sum to 1.
pub fn softmax(x: &mut [f32]) {
    if x.is_empty() {
        return;
    }
    // TODO: this is the textbook formula, and the tests feed it real logits. Questions:
    // - What is exp(x) in f32 when x = 1000? When x = -1000? What is the sum then?
    // - Which constant c can you subtract from every logit without changing the result?
    // - Which choice of c guarantees that at least one term is exactly exp(0) and none is
    //   larger, wherever in `x` the large logit sits, even next to a -inf?
    let mut sum = 0.0f32;
    for v in x.iter_mut() {
        *v = v.exp();
        sum += *v;
    }
    for v in x.iter_mut() {
        *v /= sum;
    }
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

    #[test]
    fn small_logits_match_hand_values() {
        let mut x = [1.0, 2.0, 3.0];
        softmax(&mut x);
        // exp(1), exp(2), exp(3) divided by their sum
        assert_close(&x, &[0.090_030_57, 0.244_728_48, 0.665_240_94], 1e-6);
    }

    #[test]
    fn large_logits_do_not_overflow() {
        // Real logits can be this large; exp(1000.0) is inf in f32.
        let mut x = [1000.0, 1001.0];
        softmax(&mut x);
        assert!(
            x.iter().all(|v| v.is_finite()),
            "got {x:?}: overflow to inf/NaN"
        );
        // Only the difference matters: the same as softmax([0, 1]).
        assert_close(&x, &[0.268_941_43, 0.731_058_6], 1e-6);
    }

    #[test]
    fn the_largest_logit_need_not_come_first() {
        // Shifting by some other logit (the first, the mean) is not enough: exp(1000 - 0)
        // still overflows.
        let mut x = [0.0, 1000.0];
        softmax(&mut x);
        assert_close(&x, &[0.0, 1.0], 1e-6);
        // A masked (-inf) score first, then a real one.
        let mut x = [f32::NEG_INFINITY, 1.0, 1.0];
        softmax(&mut x);
        assert_close(&x, &[0.0, 0.5, 0.5], 1e-6);
    }

    #[test]
    fn very_negative_logits_do_not_underflow_to_nan() {
        // exp(-1000.0) is 0 in f32: without the max shift the sum is 0 and 0/0 is NaN.
        let mut x = [-1000.0, -1000.0, -1001.0];
        softmax(&mut x);
        assert!(x.iter().all(|v| v.is_finite()), "got {x:?}");
        assert!((x[0] - x[1]).abs() < 1e-7 && x[0] > x[2]);
    }

    #[test]
    fn sums_to_one_and_keeps_order() {
        let mut x = [3.5, -2.0, 0.0, 7.25, 7.25, -40.0, 12.0];
        let before = x;
        softmax(&mut x);
        let sum: f32 = x.iter().sum();
        assert!((sum - 1.0).abs() < 1e-6, "sum = {sum}");
        assert!(x.iter().all(|&p| (0.0..=1.0).contains(&p)));
        // softmax is monotonic: a larger score never gets a smaller weight.
        for i in 0..x.len() {
            for j in 0..x.len() {
                if before[i] > before[j] {
                    assert!(x[i] >= x[j]);
                }
            }
        }
    }

    #[test]
    fn masked_scores_get_zero_weight() {
        // A causal mask (exercise 06) sets future scores to -inf; they must become exactly 0.
        let mut x = [0.5, f32::NEG_INFINITY, 1.5, f32::NEG_INFINITY];
        softmax(&mut x);
        assert_eq!(x[1], 0.0);
        assert_eq!(x[3], 0.0);
        assert_close(&x, &[0.268_941_43, 0.0, 0.731_058_6, 0.0], 1e-6);
    }
}
