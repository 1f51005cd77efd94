//! # Exercise 27 — speculative decoding: the greedy acceptance rule (投机解码)
//!
//! The seed article (§3.4): a cheap *drafter* guesses the next `k` tokens, and the model
//! (the *target*) checks all of them in **one** forward pass on top of its KV cache. The
//! pass is fed the last emitted token and the `k` drafts, so it returns `k + 1` rows of
//! logits: `rows[i]` is the target's prediction after the context and `drafts[..i]`.
//! `rows[0]` says what should follow the context, `rows[1]` what should follow
//! `drafts[0]`, and so on; `rows[k]` what should follow the last draft.
//!
//! Greedy decoding would have emitted `argmax(rows[0])` next. If that equals `drafts[0]`,
//! the draft was right, and `rows[1]` is exactly the logits plain decoding would have
//! computed at the next step; and so on. The round keeps the *longest agreeing prefix*
//! of the drafts, then emits the target's own token at the first disagreement, or after
//! the last draft when all of them agree (a free "bonus" token). So a round emits between
//! 1 and `k + 1` tokens, and they are exactly plain greedy decoding's.
//!
//! The cache: the pass wrote K and V for the fed tokens (the pending one and the `k`
//! drafts). Only the positions of tokens that are now part of the output may stay: the
//! rest are *rolled back* (exercise 29 does it to a block table).
//!
//! kvlab: `src/speculative/verify.rs` (`accept_greedy`), `src/speculative/decode.rs`
//! (the loop), book chapter "Speculative decoding".

/// Given: index of the largest logit, ties to the lowest index (exercise 07).
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] {
            best = i;
        }
    }
    best
}

/// What a round decided: `drafts[..accepted]` are kept, then `next` (the target's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub accepted: usize,
    pub next: u32,
}

/// Greedy verification of `drafts` against the target's `rows` (`drafts.len() + 1` rows).
pub fn accept_greedy(drafts: &[u32], rows: &[Vec<f32>]) -> Outcome {
    assert_eq!(rows.len(), drafts.len() + 1, "one row per draft, plus one");
    // Draft i is checked against the prediction *before* it (row i), and the first miss
    // ends the prefix: every later row was computed after a wrong token.
    let accepted = drafts
        .iter()
        .zip(rows)
        .take_while(|(&draft, row)| argmax(row) as u32 == draft)
        .count();
    // The row after the last accepted draft: a correction, or the bonus token.
    let next = argmax(&rows[accepted]) as u32;
    Outcome { accepted, next }
}

/// The tokens the round emits, in order.
pub fn emitted(drafts: &[u32], outcome: Outcome) -> Vec<u32> {
    let mut out = drafts[..outcome.accepted].to_vec();
    out.push(outcome.next);
    out
}

/// Positions the target's cache keeps after the round. Before the pass it held
/// `cache_len`; the pass was fed `pending` tokens (the last emitted one; the whole
/// prompt in the first round) and the drafts.
pub fn kept_len(cache_len: usize, pending: usize, accepted: usize) -> usize {
    // The pending tokens and the accepted drafts are the output's; `next` has no K and V
    // yet (it is fed, as pending, to the next round's pass).
    cache_len + pending + accepted
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Logits whose argmax is `token` (vocabulary of 8).
    fn row(token: u32) -> Vec<f32> {
        let mut r = vec![0.0; 8];
        r[token as usize] = 1.0;
        r
    }

    fn rows(tokens: &[u32]) -> Vec<Vec<f32>> {
        tokens.iter().map(|&t| row(t)).collect()
    }

    #[test]
    fn every_draft_right_gives_a_bonus_token() {
        let o = accept_greedy(&[3, 5, 1], &rows(&[3, 5, 1, 6]));
        assert_eq!(
            o,
            Outcome {
                accepted: 3,
                next: 6
            }
        );
        assert_eq!(emitted(&[3, 5, 1], o), vec![3, 5, 1, 6]);
    }

    #[test]
    fn the_first_draft_wrong_gives_the_targets_token() {
        let o = accept_greedy(&[3, 5, 1], &rows(&[4, 5, 1, 6]));
        assert_eq!(
            o,
            Outcome {
                accepted: 0,
                next: 4
            }
        );
        assert_eq!(emitted(&[3, 5, 1], o), vec![4]);
    }

    #[test]
    fn the_prefix_ends_at_the_first_disagreement() {
        // Draft 1 is wrong; drafts 2 and 3 happen to equal their rows' argmax, but those
        // rows were computed after the wrong token: they do not count.
        let o = accept_greedy(&[3, 5, 1, 2], &rows(&[3, 7, 1, 2, 0]));
        assert_eq!(
            o,
            Outcome {
                accepted: 1,
                next: 7
            }
        );
        assert_eq!(emitted(&[3, 5, 1, 2], o), vec![3, 7]);
    }

    #[test]
    fn each_draft_is_checked_against_the_row_before_it() {
        // rows[i + 1] agreeing with drafts[i] means nothing: that row predicts the token
        // *after* draft i.
        let o = accept_greedy(&[3, 5], &rows(&[6, 3, 5]));
        assert_eq!(
            o,
            Outcome {
                accepted: 0,
                next: 6
            }
        );
    }

    #[test]
    fn no_drafts_is_a_plain_decode_step() {
        let o = accept_greedy(&[], &rows(&[2]));
        assert_eq!(
            o,
            Outcome {
                accepted: 0,
                next: 2
            }
        );
        assert_eq!(emitted(&[], o), vec![2]);
    }

    #[test]
    fn ties_go_to_the_lowest_id_as_in_plain_greedy() {
        let mut tie = vec![0.0; 8];
        tie[2] = 1.0;
        tie[4] = 1.0;
        // Draft 4 ties with 2 for the largest logit: plain greedy emits 2, so 4 is wrong.
        let o = accept_greedy(&[4], &[tie, row(1)]);
        assert_eq!(
            o,
            Outcome {
                accepted: 0,
                next: 2
            }
        );
    }

    #[test]
    fn the_cache_keeps_pending_and_accepted_positions_only() {
        // 40 cached, fed the last token and 4 drafts (45 positions written), 2 accepted.
        assert_eq!(kept_len(40, 1, 2), 43);
        // First round: an empty cache fed a 12-token prompt and 3 drafts, all wrong.
        assert_eq!(kept_len(0, 12, 0), 12);
        // All 4 accepted: the bonus token is not in the cache yet.
        assert_eq!(kept_len(40, 1, 4), 45);
    }
}
