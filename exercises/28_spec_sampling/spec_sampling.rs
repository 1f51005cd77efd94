//! # Exercise 28 — speculative sampling: accept with min(1, p/q), else the residual
//!
//! With sampling there is no "the target's token" to agree with: the target has a
//! *distribution* `p` at each position, and the output must follow it exactly. The
//! drafter drew its guess `x` from its own distribution `q`. Leviathan et al. 2023 and
//! Chen et al. 2023 correct the draft with one random test:
//!
//! - accept `x` with probability `min(1, p(x) / q(x))`;
//! - on rejection, draw from the **residual** `normalize(max(0, p − q))`: the mass that
//!   `p` has and acceptance under-delivered.
//!
//! Then `P(out = y) = q(y)·min(1, p(y)/q(y)) + P(reject)·residual(y) = p(y)`: tokens the
//! draft over-proposes (`q > p`) are thinned out by the test, tokens it under-proposes
//! (`p > q`) are topped up by the residual, and `P(reject) = Σ max(0, p − q)` is exactly
//! the residual's mass. A draft equal to the target (`q = p`) is always accepted.
//!
//! `x` was drawn from `q`, so `q(x) > 0` in every call below.
//!
//! kvlab: `src/speculative/sampling.rs` (`accept_or_resample`), book chapter
//! "Speculative decoding", section "Sampling"; `tests/speculative.rs` checks the
//! output against the exact distribution with a chi-square test.

/// Given: draws from `probs` (summing to 1) with a uniform number `u` in `[0, 1)`, by
/// the inverse CDF: the first id whose cumulative probability exceeds `u`.
pub fn sample(probs: &[f32], u: f32) -> usize {
    let mut cdf = 0.0;
    for (id, &p) in probs.iter().enumerate() {
        cdf += p;
        if u < cdf {
            return id;
        }
    }
    probs.iter().rposition(|&p| p > 0.0).unwrap_or(0)
}

/// The probability of accepting the draft token `x`.
pub fn accept_prob(p: &[f32], q: &[f32], x: usize) -> f32 {
    // TODO: Questions:
    // - The target likes x *more* than the draft did (p(x) > q(x)): should a round ever
    //   reject it? What does p(x) / q(x) give then, and is that a probability?
    // - The target likes x less: how often must x survive so that, drafted q(x) of the
    //   time, it comes out exactly p(x) of the time?
    let _ = (p, q, x);
    0.0
}

/// `normalize(max(0, p − q))`; `None` when it has no mass (then `p = q`, and nothing is
/// ever rejected).
pub fn residual(p: &[f32], q: &[f32]) -> Option<Vec<f32>> {
    // TODO: Questions:
    // - After the accept test, token y comes out min(p(y), q(y)) of the time. How much of
    //   p(y) is still missing, and can that be negative?
    // - The residual is a distribution to sample from: what must its entries sum to?
    let _ = (p, q);
    None
}

/// The verdict on draft `x`, given the two uniform numbers of the round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    /// Rejected: this token instead.
    Reject(usize),
}

/// Accepts `x` when `u_accept < accept_prob`; otherwise draws the replacement from the
/// residual with `u_draw` (from `p` if the residual has no mass).
pub fn verify(p: &[f32], q: &[f32], x: usize, u_accept: f32, u_draw: f32) -> Verdict {
    // TODO: Which of the two numbers decides acceptance, and which picks the replacement?
    // Which distribution is the replacement drawn from: p, q, or something else?
    let _ = (p, q, x, u_accept, u_draw);
    Verdict::Accept
}

/// Given: the exact distribution of the token a round emits at this position, drafted
/// from `q`, then accepted or replaced, built from your two functions. (It must come out
/// as `p`.)
pub fn output_distribution(p: &[f32], q: &[f32]) -> Vec<f32> {
    // Drafted and accepted: q(y)·a(y). Rejected: Σ_x q(x)·(1 − a(x)), then the residual.
    let reject: f32 = (0..q.len())
        .filter(|&x| q[x] > 0.0)
        .map(|x| q[x] * (1.0 - accept_prob(p, q, x)))
        .sum();
    let r = residual(p, q).unwrap_or_else(|| vec![0.0; p.len()]);
    (0..p.len())
        .map(|y| {
            let accepted = if q[y] > 0.0 {
                q[y] * accept_prob(p, q, y)
            } else {
                0.0
            };
            accepted + reject * r[y]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5)
    }

    const P: [f32; 4] = [0.5, 0.3, 0.2, 0.0];
    const Q: [f32; 4] = [0.2, 0.6, 0.1, 0.1];

    #[test]
    fn acceptance_is_min_of_one_and_p_over_q() {
        assert!((accept_prob(&P, &Q, 0) - 1.0).abs() < 1e-6); // p > q: always
        assert!((accept_prob(&P, &Q, 1) - 0.5).abs() < 1e-6); // 0.3 / 0.6
        assert!((accept_prob(&P, &Q, 2) - 1.0).abs() < 1e-6); // 0.2 > 0.1
        assert_eq!(accept_prob(&P, &Q, 3), 0.0); // the target never says 3
    }

    #[test]
    fn the_residual_is_the_mass_p_lacks_normalised() {
        // max(0, p - q) = [0.3, 0, 0.1, 0], mass 0.4.
        let r = residual(&P, &Q).unwrap();
        assert!(close(&r, &[0.75, 0.0, 0.25, 0.0]), "{r:?}");
        assert!(residual(&P, &P).is_none(), "p = q leaves no residual");
    }

    #[test]
    fn the_output_follows_the_target_exactly() {
        let cases: [(&[f32], &[f32]); 4] = [
            (&P, &Q),
            (&Q, &P),
            (&[0.9, 0.05, 0.05], &[0.1, 0.1, 0.8]),
            (&[0.25, 0.25, 0.25, 0.25], &[0.7, 0.1, 0.1, 0.1]),
        ];
        for (p, q) in cases {
            let out = output_distribution(p, q);
            assert!(close(&out, p), "p {p:?}, q {q:?}: got {out:?}");
        }
    }

    #[test]
    fn a_draft_equal_to_the_target_is_always_accepted() {
        for x in 0..3 {
            assert_eq!(verify(&P, &P, x, 0.999, 0.5), Verdict::Accept);
        }
        assert!(close(&output_distribution(&P, &P), &P));
    }

    #[test]
    fn the_test_and_the_draw_use_their_own_numbers() {
        // x = 1 is accepted with probability 0.5.
        assert_eq!(verify(&P, &Q, 1, 0.49, 0.9), Verdict::Accept);
        // Rejected: the residual [0.75, 0, 0.25, 0] gives 0 for u < 0.75, else 2.
        assert_eq!(verify(&P, &Q, 1, 0.51, 0.1), Verdict::Reject(0));
        assert_eq!(verify(&P, &Q, 1, 0.51, 0.8), Verdict::Reject(2));
        // Never the rejected-for-being-overproposed token 1 itself, and never 3 (p = 0).
        for i in 0..100 {
            let u = i as f32 / 100.0;
            assert!(matches!(
                verify(&P, &Q, 1, 0.6, u),
                Verdict::Reject(0) | Verdict::Reject(2)
            ));
        }
    }

    #[test]
    fn a_token_the_target_rules_out_is_always_rejected() {
        for i in 0..10 {
            let u = i as f32 / 10.0;
            assert_ne!(verify(&P, &Q, 3, u, 0.3), Verdict::Accept);
        }
    }
}
