//! # Exercise 09 — temperature and top-k (采样温度, top-k 采样)
//!
//! Greedy decoding (the greedy exercise) always takes the top token, so it says the same
//! thing every time. Sampling draws a token from the softmax of the logits instead, and two
//! knobs shape what it draws from.
//!
//! **Temperature** (采样温度) `T` divides the logits before the softmax:
//!
//! ```text
//! p_i = exp(l_i / T) / sum_j exp(l_j / T)
//! ```
//!
//! Two tokens' odds are `p_i / p_j = exp((l_i - l_j) / T)`. A small `T` blows every logit
//! gap up, so the top token takes almost all the mass (sharper); a large `T` shrinks the
//! gaps towards 0, so every token gets nearly `1 / n` (flatter). In the limits, `T -> 0` is
//! greedy and `T -> inf` is uniform. `T = 1` is the model's own distribution. `T = 0` is
//! defined as greedy (the one-hot of the argmax, ties to the lowest index), as in kvlab.
//!
//! Computed as written, `l / T` breaks at both ends of the scale: logits of 1000 give
//! `exp(1000) = inf` and `inf / inf = NaN`, and a tiny `T` (1e-38) turns even small logits
//! into `inf`. Since `softmax(x) = softmax(x - c)` for any constant `c`, kvlab divides the
//! *differences* from the largest logit, `(l_i - max) / T`: every value is then `<= 0`, the
//! top token's is exactly 0 (`exp(0) = 1`), and the others go at worst to `-inf`, whose
//! `exp` is a clean 0. No overflow, no NaN, at any positive `T`.
//!
//! **Top-k** (Fan et al. 2018) keeps only the `k` most likely tokens and renormalises, so
//! the long tail can never be drawn, however hot the temperature. kvlab's sampler
//! (`src/sampler.rs`) does it in this order:
//!
//! ```text
//! 1. sort token ids by logit, largest first (ties: lower id first)
//! 2. keep the first k (k = 0 means no limit; k larger than the vocabulary keeps all)
//! 3. softmax((l - max) / T) over the kept logits only: they sum to 1 by construction
//! 4. draw with a uniform u in [0, 1): the first kept token whose running sum exceeds
//!    u * (the kept total)
//! ```
//!
//! Dividing by a positive `T` does not change the order of the logits, so the cut can be
//! made on the logits, before any `exp`: the softmax then runs over `k` values instead of
//! 49 152 (SmolLM2's vocabulary), and a softmax over the kept logits is the same as the
//! full softmax cut to the kept tokens and renormalised. Cutting *without* renormalising
//! leaves a distribution that sums to less than 1.
//!
//! kvlab: `kvlab generate --temperature 0.7 --top-k 40` (then top-p, the top-p exercise,
//! on what top-k kept). As there, `u` is a parameter, so these are pure functions and the
//! tests are deterministic; the sampler draws one `u` per token from a seeded generator.

/// Given (the greedy exercise): index of the largest logit; on ties, the lowest index.
pub fn argmax(logits: &[f32]) -> usize {
    assert!(!logits.is_empty(), "argmax of an empty slice");
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate().skip(1) {
        if x > logits[best] {
            best = i;
        }
    }
    best
}

/// `softmax(logits / temperature)`, computed from `(l - max) / temperature` so that no
/// logit and no temperature > 0 overflows. `temperature == 0` is greedy: the one-hot of
/// [`argmax`] (ties to the lowest index). `logits` must be non-empty and finite, and
/// `temperature` finite and `>= 0` (kvlab's `SamplerConfig::validate` refuses the rest).
pub fn probs_at_temperature(logits: &[f32], temperature: f32) -> Vec<f32> {
    // TODO: Questions:
    // - What must temperature 0 return, and what would the general formula give the top
    //   token there?
    // - Which number do you subtract from every logit so that no exp() can overflow? Does
    //   it go before or after the division by T? (Try T = 1e-38 with a logit of 30.)
    // - What turns the exp() values into a distribution, and can that step divide by 0?
    vec![0.0; logits.len()]
}

/// The `k` most likely tokens of `logits` (`k == 0`: all of them), most likely first
/// (ties: lower id first), each with its probability at `temperature`, renormalised over
/// the kept tokens only. At temperature 0 the first kept token has 1 and the rest 0.
pub fn top_k_filter(logits: &[f32], temperature: f32, k: usize) -> Vec<(usize, f32)> {
    // TODO: steps 1-3 of the header. Questions:
    // - Which comparison sorts ids largest logit first, and what decides between two
    //   equal logits?
    // - What does k = 0 keep? And a k larger than the number of logits?
    // - Which logits does the softmax see: all of them, or only the kept ones? If all,
    //   what do the kept probabilities sum to?
    // - Is there a function above that already does step 3?
    Vec::new()
}

/// Samples a token id: top-k at `temperature`, then the inverse CDF at `u`, uniform in
/// [0, 1). Temperature 0 gives the argmax whatever `u` is.
pub fn sample_with(logits: &[f32], temperature: f32, top_k: usize, u: f32) -> usize {
    // TODO: step 4. Questions:
    // - Which interval of [0, 1) belongs to the first kept token, which to the second?
    //   A u exactly on the boundary between them: whose is it?
    // - In f32 the kept probabilities may sum to 0.99999988: what must u = 0.99999994
    //   draw, and what do you return if the walk ends without a pick?
    // - Does temperature 0 need a case of its own here, or does it follow from above?
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_close(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: one probability per logit");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() < 1e-6,
                "{what}: token {i} got {g}, want {w} (all: {got:?})"
            );
        }
    }

    fn assert_kept(got: &[(usize, f32)], want: &[(usize, f32)], what: &str) {
        let ids: Vec<usize> = got.iter().map(|t| t.0).collect();
        let want_ids: Vec<usize> = want.iter().map(|t| t.0).collect();
        assert_eq!(
            ids, want_ids,
            "{what}: kept token ids, most likely first (got {got:?})"
        );
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g.1 - w.1).abs() < 1e-6,
                "{what}: token {} got {}, want {} (renormalised over the kept tokens)",
                g.0,
                g.1,
                w.1
            );
        }
    }

    #[test]
    fn low_temperature_sharpens_high_temperature_flattens() {
        assert_close(
            &probs_at_temperature(&[1.0, 2.0, 3.0], 1.0),
            &[0.090_030_57, 0.244_728_47, 0.665_240_96],
            "T = 1 on [1, 2, 3]: the plain softmax",
        );
        // T = 0.5 doubles every gap: softmax([2, 4, 6]).
        assert_close(
            &probs_at_temperature(&[1.0, 2.0, 3.0], 0.5),
            &[0.015_876_24, 0.117_310_43, 0.866_813_3],
            "T = 0.5 on [1, 2, 3] (divide the logits by T, do not multiply)",
        );
        // T = 2 halves them: softmax([0.5, 1, 1.5]).
        assert_close(
            &probs_at_temperature(&[1.0, 2.0, 3.0], 2.0),
            &[0.186_323_72, 0.307_195_9, 0.506_480_4],
            "T = 2 on [1, 2, 3]",
        );
    }

    #[test]
    fn temperature_zero_is_greedy() {
        let logits = [1.0, 5.0, 5.0, 2.0];
        assert_close(
            &probs_at_temperature(&logits, 0.0),
            &[0.0, 1.0, 0.0, 0.0],
            "T = 0 is the one-hot of the argmax, ties to the lowest index (no 0 / 0)",
        );
        for top_k in [0, 1, 3] {
            for u in [0.0, 0.3, 0.7, 0.999_999_94] {
                assert_eq!(
                    sample_with(&logits, 0.0, top_k, u),
                    argmax(&logits),
                    "T = 0, top_k = {top_k}, u = {u}: greedy, whatever u is"
                );
            }
        }
    }

    #[test]
    fn a_tiny_temperature_approaches_greedy_without_nan() {
        assert_close(
            &probs_at_temperature(&[1.0, 3.0, 2.0], 1e-30),
            &[0.0, 1.0, 0.0],
            "T = 1e-30: the greedy limit",
        );
        // 30 / 1e-38 overflows f32 (3e39 > 3.4e38): only the differences may be divided.
        assert_close(
            &probs_at_temperature(&[10.0, 30.0, 20.0], 1e-38),
            &[0.0, 1.0, 0.0],
            "T = 1e-38: logits / T alone is inf, and inf - inf is NaN",
        );
        // A tiny T is not T = 0: two exactly tied leaders keep half each.
        assert_close(
            &probs_at_temperature(&[5.0, 5.0, 1.0], 1e-30),
            &[0.5, 0.5, 0.0],
            "T = 1e-30 with a tie at the top",
        );
    }

    #[test]
    fn a_huge_temperature_is_near_uniform() {
        let probs = probs_at_temperature(&[1.0, 3.0, 2.0, -5.0], 1e7);
        assert_close(&probs, &[0.25; 4], "T = 1e7: every gap / T is about 0");
        assert!(
            probs[1] > probs[2] && probs[2] > probs[0] && probs[0] > probs[3],
            "a finite T flattens but keeps the order: {probs:?}"
        );
    }

    #[test]
    fn logits_of_1000_do_not_overflow() {
        // softmax is unchanged by a shift: [1000, 1001, 1002] is [1, 2, 3].
        assert_close(
            &probs_at_temperature(&[1000.0, 1001.0, 1002.0], 1.0),
            &[0.090_030_57, 0.244_728_47, 0.665_240_96],
            "T = 1 on [1000, 1001, 1002] (exp(1000) is inf in f32)",
        );
        assert_close(
            &probs_at_temperature(&[-1000.0, -999.0, -998.0], 0.5),
            &[0.015_876_24, 0.117_310_43, 0.866_813_3],
            "T = 0.5 on [-1000, -999, -998] (exp(-2000) is 0 in f32)",
        );
    }

    #[test]
    fn top_k_keeps_the_k_most_likely_renormalised() {
        let logits = [1.0, 3.0, 2.0, 0.0];
        // softmax([3, 2]): the two kept tokens share all the mass.
        assert_kept(
            &top_k_filter(&logits, 1.0, 2),
            &[(1, 0.731_058_6), (2, 0.268_941_4)],
            "k = 2, T = 1",
        );
        // softmax([3, 2, 1] / 2).
        assert_kept(
            &top_k_filter(&logits, 2.0, 3),
            &[(1, 0.506_480_4), (2, 0.307_195_9), (0, 0.186_323_72)],
            "k = 3, T = 2",
        );
        assert_kept(&top_k_filter(&logits, 0.7, 1), &[(1, 1.0)], "k = 1");
    }

    #[test]
    fn top_k_ties_keep_the_lower_id() {
        let logits = [2.0, 5.0, 5.0, 5.0, 1.0];
        assert_kept(
            &top_k_filter(&logits, 1.0, 2),
            &[(1, 0.5), (2, 0.5)],
            "three tokens tie for the top two places: lower ids first",
        );
        assert_kept(&top_k_filter(&logits, 1.0, 1), &[(1, 1.0)], "k = 1, tied");
        assert_kept(
            &top_k_filter(&logits, 0.0, 3),
            &[(1, 1.0), (2, 0.0), (3, 0.0)],
            "k = 3 at T = 0: the lowest tied id takes it all",
        );
    }

    #[test]
    fn k_zero_means_no_limit_and_k_above_len_keeps_all() {
        let logits = [1.0, 3.0, 2.0, 0.0];
        let want = [
            (1, 0.643_914_2),
            (2, 0.236_882_82),
            (0, 0.087_144_32),
            (3, 0.032_058_6),
        ];
        assert_kept(&top_k_filter(&logits, 1.0, 0), &want, "k = 0 (no limit)");
        assert_kept(&top_k_filter(&logits, 1.0, 4), &want, "k = len");
        assert_kept(&top_k_filter(&logits, 1.0, 10), &want, "k > len");
    }

    #[test]
    fn the_kept_probabilities_sum_to_one() {
        let logits = [0.3, -1.2, 2.5, 0.0, 1.7, -0.4, 2.5, 0.9];
        for t in [0.25, 0.7, 1.0, 1.5, 4.0] {
            for k in [0, 1, 2, 3, 5, 8, 20] {
                let kept = top_k_filter(&logits, t, k);
                let sum: f32 = kept.iter().map(|t| t.1).sum();
                assert!(
                    (sum - 1.0).abs() < 1e-6,
                    "T = {t}, k = {k}: the kept probabilities sum to {sum}, not 1 ({kept:?})"
                );
            }
        }
    }

    #[test]
    fn sampling_walks_the_cdf_of_the_kept_tokens() {
        // Four equal logits: exactly 0.25 each, so the interval ends are exact in f32.
        let flat = [0.0; 4];
        for (u, want) in [
            (0.0, 0),
            (0.249_999_99, 0),
            (0.25, 1),
            (0.5, 2),
            (0.75, 3),
            (0.999_999_94, 3),
        ] {
            assert_eq!(
                sample_with(&flat, 1.0, 0, u),
                want,
                "u = {u}: token n owns [n / 4, (n + 1) / 4)"
            );
        }
        // k = 2: tokens 0 and 1 split [0, 1) in halves; 2 and 3 are never drawn.
        assert_eq!(sample_with(&flat, 1.0, 2, 0.499_999_97), 0);
        assert_eq!(sample_with(&flat, 1.0, 2, 0.5), 1, "u = 0.5 with k = 2");
        assert_eq!(sample_with(&flat, 1.0, 2, 0.999_999_94), 1);
        // The kept [2, 0, 0] sum to 0.99999988 in f32: u = 0.99999994 still draws a kept
        // token, the last one (id 2), never the cut id 3 or a fallback of 0.
        assert_eq!(
            sample_with(&[0.0, 2.0, 0.0, -1.0], 1.0, 3, 0.999_999_94),
            2,
            "u just below 1 must draw the last kept token"
        );
        // k = 2, T = 1 on [1, 3, 2, 0]: token 1 on [0, 0.7310586), token 2 on the rest.
        let mut counts = [0usize; 4];
        for n in 0..1000 {
            counts[sample_with(&[1.0, 3.0, 2.0, 0.0], 1.0, 2, n as f32 / 1000.0)] += 1;
        }
        assert_eq!(
            (counts[0], counts[3]),
            (0, 0),
            "tokens 0 and 3 are outside the top 2: {counts:?}"
        );
        // u = 0.000 .. 0.731 pick token 1: 732 of the 1000 grid points.
        assert!((731..=733).contains(&counts[1]), "counts: {counts:?}");
    }
}
