//! # Exercise 05 — one attention head, one query (自注意力)
//!
//! The seed article (§2.1): "the current token takes its Query, dots it with every token's
//! Key to get attention scores (注意力分数), normalises them with softmax, and uses them to
//! take a weighted sum (加权求和) of the Values." For one head that is
//!
//! ```text
//! score_t = q · k_t / sqrt(head_dim)      for t in 0..T
//! w       = softmax(score)
//! out     = sum_t w_t * v_t               // [head_dim]
//! ```
//!
//! Why `/ sqrt(head_dim)` (Vaswani et al. 2017, "Attention Is All You Need", §3.2.1): a dot
//! product of `head_dim` terms grows like `sqrt(head_dim)`; unscaled, the softmax would
//! saturate to one-hot and its gradients vanish. The trained weights expect the scale, so
//! leaving it out changes every output.
//!
//! This is the inner loop of every attention kvlab runs: the naive path calls it for every
//! position of the sequence at every step; the cached path, once per step for the new token.

/// Given (exercise 04): numerically stable softmax, in place.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in x.iter_mut() {
        *v /= sum;
    }
}

/// Scaled dot-product attention of one query over `T` keys and values.
///
/// `q: [head_dim]`, `keys: [T, head_dim]`, `values: [T, head_dim]` (row-major); returns `[head_dim]`.
pub fn attention_head(q: &[f32], keys: &[f32], values: &[f32], head_dim: usize) -> Vec<f32> {
    assert_eq!(q.len(), head_dim);
    assert_eq!(keys.len(), values.len());
    // TODO: the placeholder returns zeros. Questions:
    // - How many scores are there, one per what? Where does row t of `keys` start?
    // - The header's reason for scaling: how fast does a dot product of head_dim terms grow,
    //   so what must you divide by? (A test tells 1/head_dim from the right scale.)
    // - What turns the scores into weights that sum to 1, and which rows do the weights
    //   multiply: the keys or the values?
    let out = vec![0.0f32; head_dim];
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_close(got: &[f32], want: &[f32], tol: f32) {
        assert_eq!(got.len(), want.len(), "length: got {got:?}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= tol,
                "index {i}: got {g}, want {w} (all: {got:?})"
            );
        }
    }

    #[test]
    fn one_key_returns_its_value() {
        // softmax of a single score is exactly 1, whatever the score.
        let out = attention_head(&[0.3, -2.0, 5.0], &[1.0, 2.0, 3.0], &[7.0, -8.0, 9.0], 3);
        assert_eq!(out, vec![7.0, -8.0, 9.0]);
    }

    #[test]
    fn hand_values_with_scaling() {
        // scores = [1, 0] / sqrt(2) -> weights [0.6698, 0.3302].
        // Without the 1/sqrt(head_dim) scale you would get [1.5379, 2.5379].
        let out = attention_head(&[1.0, 0.0], &[1.0, 0.0, 0.0, 1.0], &[1.0, 2.0, 3.0, 4.0], 2);
        assert_close(&out, &[1.660_477, 2.660_477], 1e-5);
    }

    #[test]
    fn hand_values_three_keys() {
        // [T = 3, head_dim = 4], one row per line
        let keys = [
            1.0, 0.0, 0.0, 0.0, // k_0
            0.0, 1.0, 0.0, 0.0, // k_1
            0.0, 0.0, 1.0, 1.0, // k_2
        ];
        let values = [
            1.0, 0.0, 0.0, 0.0, // v_0
            0.0, 2.0, 0.0, 0.0, // v_1
            0.0, 0.0, 3.0, -3.0, // v_2
        ];
        let out = attention_head(&[1.0, 2.0, 0.0, -1.0], &keys, &values, 4);
        assert_close(&out, &[0.331_499, 1.093_099, 0.365_855, -0.365_855], 1e-5);
    }

    #[test]
    fn equal_keys_average_the_values() {
        let keys = [0.5, 0.5, 0.5, 0.5, 0.5, 0.5];
        let values = [1.0, 10.0, 2.0, 20.0, 6.0, 60.0];
        let out = attention_head(&[1.0, -1.0], &keys, &values, 2);
        assert_close(&out, &[3.0, 30.0], 1e-5);
    }

    #[test]
    fn a_strongly_matching_key_wins() {
        // q points along key 1; make it long so the softmax is nearly one-hot.
        let keys = [1.0, 0.0, 0.0, 1.0, -1.0, 0.0];
        let values = [1.0, 1.0, 5.0, -5.0, 9.0, 9.0];
        let out = attention_head(&[0.0, 40.0], &keys, &values, 2);
        assert_close(&out, &[5.0, -5.0], 1e-4);
    }
}
