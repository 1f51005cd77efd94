//! # Exercise 06 — the causal mask: attention over a whole prompt (预填充 prefill)
//!
//! In prefill (预填充) the model runs the whole prompt at once: every position's query
//! attends to keys in one matrix of scores, `[seq, seq]`. A language model must not
//! peek at the future, so row `i` may only use keys `0..=i`. The causal mask (因果掩码)
//! enforces that by setting every score above the diagonal to `-inf` before the softmax;
//! `exp(-inf) = 0`, so those keys get weight exactly 0.
//!
//! ```text
//!            k_0   k_1   k_2
//!   q_0  [  s00  -inf  -inf ]
//!   q_1  [  s10   s11  -inf ]
//!   q_2  [  s20   s21   s22 ]
//! ```
//!
//! The consequence the whole KV cache rests on: row `i` does not depend on anything after
//! position `i`. So K and V of the past never change as tokens are added, and can be
//! cached (KV缓存) instead of recomputed. kvlab's naive path runs exactly this masked
//! attention over the full sequence at every step.

/// Given (exercise 04): numerically stable softmax, in place. A `-inf` score becomes 0.
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

pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Causal self-attention for one head over a whole sequence.
///
/// `q`, `k`, `v`: `[seq, head_dim]` row-major; returns `[seq, head_dim]` where row `i` is
/// the attention of `q_i` over `k_0..=k_i` and `v_0..=v_i`.
pub fn causal_attention(q: &[f32], k: &[f32], v: &[f32], head_dim: usize) -> Vec<f32> {
    assert!(
        q.len() == k.len() && k.len() == v.len(),
        "q, k, v must all be [seq, head_dim]"
    );
    assert_eq!(q.len() % head_dim, 0);
    let seq = q.len() / head_dim;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let mut out = vec![0.0f32; seq * head_dim];
    // One row of the [seq, seq] score matrix at a time, reused for every query.
    let mut scores = vec![0.0f32; seq];
    for i in 0..seq {
        let q_i = &q[i * head_dim..(i + 1) * head_dim];
        for (j, k_j) in k.chunks_exact(head_dim).enumerate() {
            // Why -inf rather than skipping j: this is the mask as prefill applies it to the
            // whole matrix, and softmax (max shift included) turns -inf into exactly 0.
            scores[j] = if j <= i {
                dot(q_i, k_j) * scale
            } else {
                f32::NEG_INFINITY
            };
        }
        softmax(&mut scores);
        let out_i = &mut out[i * head_dim..(i + 1) * head_dim];
        // The future has weight 0, so adding it would change nothing; skip it anyway.
        for (w, v_j) in scores.iter().zip(v.chunks_exact(head_dim)).take(i + 1) {
            for (o, x) in out_i.iter_mut().zip(v_j) {
                *o += w * x;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: attention of one query over the first `n` rows of k and v, in f64.
    fn reference_row(q_i: &[f32], k: &[f32], v: &[f32], n: usize, head_dim: usize) -> Vec<f32> {
        let scores: Vec<f64> = (0..n)
            .map(|j| {
                dot(q_i, &k[j * head_dim..(j + 1) * head_dim]) as f64 / (head_dim as f64).sqrt()
            })
            .collect();
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f64 = exps.iter().sum();
        (0..head_dim)
            .map(|d| {
                (0..n)
                    .map(|j| exps[j] / sum * v[j * head_dim + d] as f64)
                    .sum::<f64>() as f32
            })
            .collect()
    }

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

    const SEQ: usize = 6;
    const HD: usize = 8;

    fn qkv(seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        (
            pseudo_random(SEQ * HD, seed),
            pseudo_random(SEQ * HD, seed + 1),
            pseudo_random(SEQ * HD, seed + 2),
        )
    }

    #[test]
    fn output_has_the_input_shape() {
        let (q, k, v) = qkv(10);
        assert_eq!(causal_attention(&q, &k, &v, HD).len(), SEQ * HD);
    }

    #[test]
    fn first_token_sees_only_itself() {
        // Row 0 has a single unmasked key, weight 1: its output is v_0 exactly.
        let (q, k, v) = qkv(20);
        let out = causal_attention(&q, &k, &v, HD);
        assert_eq!(&out[..HD], &v[..HD]);
    }

    #[test]
    fn every_row_matches_the_reference_over_its_prefix() {
        let (q, k, v) = qkv(30);
        let out = causal_attention(&q, &k, &v, HD);
        for i in 0..SEQ {
            let want = reference_row(&q[i * HD..(i + 1) * HD], &k, &v, i + 1, HD);
            for (d, (g, w)) in out[i * HD..(i + 1) * HD].iter().zip(&want).enumerate() {
                assert!((g - w).abs() < 1e-5, "row {i} dim {d}: got {g}, want {w}");
            }
        }
    }

    #[test]
    fn the_last_row_sees_everything() {
        // The last position is the one whose output predicts the next token.
        let (q, k, v) = qkv(40);
        let out = causal_attention(&q, &k, &v, HD);
        let want = reference_row(&q[(SEQ - 1) * HD..], &k, &v, SEQ, HD);
        for (g, w) in out[(SEQ - 1) * HD..].iter().zip(&want) {
            assert!((g - w).abs() < 1e-5, "got {g}, want {w}");
        }
    }

    #[test]
    fn changing_a_future_token_does_not_change_the_past() {
        let (q, k, v) = qkv(50);
        let before = causal_attention(&q, &k, &v, HD);
        // Replace token 4's query, key and value with something wild.
        let (mut q2, mut k2, mut v2) = (q.clone(), k.clone(), v.clone());
        for buf in [&mut q2, &mut k2, &mut v2] {
            for x in &mut buf[4 * HD..5 * HD] {
                *x = *x * 100.0 + 3.0;
            }
        }
        let after = causal_attention(&q2, &k2, &v2, HD);
        // Rows 0..4 are not just close: they are equal, since token 4 never enters them.
        assert_eq!(&before[..4 * HD], &after[..4 * HD]);
        // Rows 4 and 5 do see it.
        assert_ne!(&before[4 * HD..], &after[4 * HD..]);
    }
}
