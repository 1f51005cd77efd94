//! # Exercise 08 — top-p (nucleus) sampling (核采样)
//!
//! Greedy decoding (exercise 07) always takes the top token. Sampling takes a random one,
//! but sampling from the whole vocabulary lets the long tail of unlikely tokens through.
//! Nucleus sampling (Holtzman et al. 2019, "The Curious Case of Neural Text Degeneration")
//! keeps only the head of the distribution:
//!
//! ```text
//! 1. sort tokens by probability, largest first (ties: lower token id first)
//! 2. keep the smallest prefix whose cumulative probability is >= p (at least one token)
//! 3. renormalise the kept probabilities to sum to 1
//! 4. draw from them with a uniform u in [0, 1): the first token whose running sum exceeds u
//! ```
//!
//! The random number is a parameter, not drawn inside, so the function is a pure function
//! and the tests are deterministic; the sampler draws `u` from a seeded generator, so a
//! seed reproduces a whole generation.

/// The nucleus of `probs` for threshold `p`: `(token id, renormalised probability)`, most
/// probable first. `probs` must be a probability distribution (e.g. softmax output).
pub fn top_p_filter(probs: &[f32], p: f32) -> Vec<(usize, f32)> {
    let mut sorted: Vec<(usize, f32)> = probs.iter().copied().enumerate().collect();
    // sort_by is stable: equal probabilities keep their id order, so the result is
    // deterministic. total_cmp gives a total order even for NaN, so this cannot panic.
    sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut cumulative = 0.0f32;
    let mut keep = sorted.len(); // if rounding keeps the sum below p, keep everything
    for (i, &(_, prob)) in sorted.iter().enumerate() {
        cumulative += prob;
        if cumulative >= p {
            keep = i + 1; // the first token always counts, so at least one survives
            break;
        }
    }
    sorted.truncate(keep);
    let mass: f32 = sorted.iter().map(|&(_, prob)| prob).sum();
    for (_, prob) in &mut sorted {
        *prob /= mass;
    }
    sorted
}

/// Samples a token id from the nucleus of `probs`, using `u`, uniform in [0, 1).
pub fn sample_top_p(probs: &[f32], p: f32, u: f32) -> usize {
    let nucleus = top_p_filter(probs, p);
    let mut cdf = 0.0f32;
    for &(id, prob) in &nucleus {
        cdf += prob;
        if u < cdf {
            return id;
        }
    }
    // The renormalised sum can round to 0.99999994; a u above that takes the last token.
    nucleus.last().expect("the nucleus is never empty").0
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROBS: [f32; 4] = [0.1, 0.5, 0.15, 0.25];

    fn assert_nucleus(got: &[(usize, f32)], want: &[(usize, f32)]) {
        let ids: Vec<usize> = got.iter().map(|t| t.0).collect();
        let want_ids: Vec<usize> = want.iter().map(|t| t.0).collect();
        assert_eq!(
            ids, want_ids,
            "token ids, most probable first (got {got:?})"
        );
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g.1 - w.1).abs() < 1e-6,
                "token {}: got {}, want {}",
                g.0,
                g.1,
                w.1
            );
        }
    }

    #[test]
    fn keeps_the_smallest_prefix_reaching_p() {
        // sorted: 1 (0.5), 3 (0.25), 2 (0.15), 0 (0.1). 0.5 < 0.7 <= 0.75: keep two.
        assert_nucleus(
            &top_p_filter(&PROBS, 0.7),
            &[(1, 2.0 / 3.0), (3, 1.0 / 3.0)],
        );
        // 0.75 < 0.76 <= 0.9: keep three, renormalised by 0.9.
        assert_nucleus(
            &top_p_filter(&PROBS, 0.76),
            &[(1, 0.5 / 0.9), (3, 0.25 / 0.9), (2, 0.15 / 0.9)],
        );
    }

    #[test]
    fn reaching_p_exactly_is_enough() {
        // 0.5 + 0.25 is exactly 0.75 in f32: ">= p" stops here.
        assert_nucleus(
            &top_p_filter(&PROBS, 0.75),
            &[(1, 2.0 / 3.0), (3, 1.0 / 3.0)],
        );
    }

    #[test]
    fn tiny_p_is_greedy_and_p_one_keeps_everything() {
        assert_nucleus(&top_p_filter(&PROBS, 0.0), &[(1, 1.0)]);
        assert_nucleus(&top_p_filter(&PROBS, 0.01), &[(1, 1.0)]);
        assert_nucleus(
            &top_p_filter(&PROBS, 1.0),
            &[(1, 0.5), (3, 0.25), (2, 0.15), (0, 0.1)],
        );
    }

    #[test]
    fn ties_keep_the_lower_token_id_first() {
        assert_nucleus(&top_p_filter(&[0.25; 4], 0.5), &[(0, 0.5), (1, 0.5)]);
    }

    #[test]
    fn the_nucleus_sums_to_one() {
        let probs = [0.05, 0.3, 0.02, 0.13, 0.2, 0.1, 0.2];
        for p in [0.1, 0.5, 0.8, 0.95, 1.0] {
            let sum: f32 = top_p_filter(&probs, p).iter().map(|t| t.1).sum();
            assert!((sum - 1.0).abs() < 1e-6, "p = {p}: sum {sum}");
        }
    }

    #[test]
    fn sampling_walks_the_nucleus_cdf() {
        // nucleus for p = 0.7: token 1 on [0, 2/3), token 3 on [2/3, 1)
        assert_eq!(sample_top_p(&PROBS, 0.7, 0.0), 1);
        assert_eq!(sample_top_p(&PROBS, 0.7, 0.6), 1);
        assert_eq!(sample_top_p(&PROBS, 0.7, 0.67), 3);
        assert_eq!(sample_top_p(&PROBS, 0.7, 0.99), 3);
        // The largest f32 below 1 must not fall off the end.
        assert_eq!(sample_top_p(&PROBS, 0.7, 0.999_999_94), 3);
    }

    #[test]
    fn a_u_on_a_boundary_belongs_to_the_next_token() {
        // Dyadic probabilities, so the running sums are exact: token 1 owns [0, 0.5),
        // token 0 [0.5, 0.75), token 2 [0.75, 0.875), token 3 [0.875, 1). Half-open
        // intervals are what a seeded draw must reproduce in any implementation.
        let probs = [0.25, 0.5, 0.125, 0.125];
        assert_eq!(
            sample_top_p(&probs, 1.0, 0.5),
            0,
            "u = 0.5 is past token 1's [0, 0.5)"
        );
        assert_eq!(
            sample_top_p(&probs, 1.0, 0.75),
            2,
            "u = 0.75 is past token 0's [0.5, 0.75)"
        );
        assert_eq!(sample_top_p(&probs, 1.0, 0.874_999_94), 2);
    }

    #[test]
    fn tokens_outside_the_nucleus_are_never_drawn() {
        let mut counts = [0usize; 4];
        for k in 0..1000 {
            counts[sample_top_p(&PROBS, 0.7, k as f32 / 1000.0)] += 1;
        }
        assert_eq!(
            (counts[0], counts[2]),
            (0, 0),
            "tokens 0 and 2 are outside the nucleus"
        );
        // u = 0.000 .. 0.666 pick token 1: 667 of the 1000 grid points.
        assert!((666..=668).contains(&counts[1]), "counts: {counts:?}");
    }
}
