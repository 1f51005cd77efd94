//! # Exercise 07 — greedy decoding: argmax (贪心解码)
//!
//! The model's last step gives one logit per vocabulary entry. Greedy decoding picks the
//! largest. It is deterministic, which is why kvlab's golden tests use it: the naive and
//! the cached path, or kvlab and a reference implementation, must produce exactly the same
//! token ids, and any difference is a bug, not sampling noise.
//!
//! For that, ties need a rule. Exact ties are rare in f32 logits but do happen (and are
//! common in bf16, which keeps only 8 bits of mantissa), and two implementations that
//! break them differently diverge from that token on. kvlab, like `torch.argmax`, takes the
//! *lowest* index. Careful: `Iterator::max_by` returns the *last* of several equal maxima.

/// Index of the largest logit; on ties, the lowest index. Panics on an empty slice.
pub fn argmax(logits: &[f32]) -> usize {
    assert!(!logits.is_empty(), "argmax of an empty slice");
    // TODO: Questions:
    // - What do you compare the first logit against, when every logit may be negative?
    // - A later logit *equal* to the best so far: should it win? Does `>` or `>=` decide
    //   that, and which of the two does `max_by` behave like?
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_largest() {
        assert_eq!(argmax(&[0.1, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[0.1, 2.0, 3.0]), 2);
    }

    #[test]
    fn all_negative_logits() {
        // Logits are often all negative; the answer is still the largest.
        assert_eq!(argmax(&[-3.0, -1.5, -2.0, -7.0]), 1);
    }

    #[test]
    fn ties_go_to_the_lowest_index() {
        assert_eq!(argmax(&[1.0, 5.0, 5.0]), 1);
        assert_eq!(argmax(&[2.0, 9.0, 1.0, 9.0, 9.0]), 1);
        assert_eq!(argmax(&[4.0, 4.0, 4.0]), 0);
    }

    #[test]
    fn a_single_logit() {
        assert_eq!(argmax(&[-42.0]), 0);
    }

    #[test]
    fn a_vocabulary_sized_slice() {
        // 49 152 entries, like SmolLM2's vocabulary; the winner near the end.
        let mut logits: Vec<f32> = (0..49_152)
            .map(|i| ((i * 7919) % 1000) as f32 * -0.01)
            .collect();
        logits[49_000] = 3.5;
        logits[49_100] = 3.5;
        assert_eq!(argmax(&logits), 49_000);
    }
}
