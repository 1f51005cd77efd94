//! # Exercise 26 — heavy hitters: which tokens H2O keeps
//!
//! A sliding window (exercise 24) forgets a token by its age. H2O (Zhang et al. 2023)
//! forgets by *use*: attention is concentrated on few tokens, and a token that has
//! received much attention so far is likely to receive more. Under a fixed budget of
//! positions, H2O keeps the `recent` latest tokens and fills the rest with the *heavy
//! hitters*, the tokens with the largest **accumulated attention**.
//!
//! Accumulated attention of a cached row `j`: the sum, over every query that has seen
//! it, of the probability that query put on `j` (row `j` of the softmax output, column
//! by column). A forward pass of `m` query rows and `h` heads produces `m * h`
//! probability rows over the cached rows; each row sums to 1. kvlab sums over every
//! head of a layer, so the layer keeps one set of tokens; the paper's code keeps one
//! score per head.
//!
//! When the cache is over budget, it evicts the lowest scores among the rows *outside*
//! the recent window (the recent ones have had little time to collect attention); the
//! earliest row on a tie, so the choice is reproducible.
//!
//! kvlab: `src/cache/h2o.rs` (`observe`, `choose_evictions`), `attention_observed` in
//! `src/attention.rs`, book chapter "Eviction and sliding windows".

/// Adds one pass's attention to the scores of the cached rows.
/// `probs`: `[m * n_heads, rows]`, one softmax row per (query, head), flattened;
/// `scores`: `[rows]`.
pub fn accumulate(scores: &mut [f32], probs: &[f32]) {
    // TODO: Questions:
    // - `probs` holds one softmax row per (query, head): which of its numbers belong to
    //   cached row j?
    // - "Received": do you sum along a probability row, or across the rows?
    // - The scores already hold earlier passes' attention: keep it, or start over?
    let _ = (scores, probs);
}

/// The rows to evict, in increasing order: the `need` lowest `scores` among rows
/// `0..candidates` (those older than the recent window); the earliest on a tie.
pub fn choose_evictions(scores: &[f32], candidates: usize, need: usize) -> Vec<usize> {
    // TODO: Questions:
    // - Which rows may be evicted at all? Which order puts the first to go first?
    // - Two rows with the same score: which one goes, and how does the row index help?
    // - The caller removes the rows from the back: in which order must they come?
    let _ = (scores, candidates, need);
    Vec::new()
}

/// Given: rows outside the recent window, for rows at `positions` (increasing) when the
/// next `n` tokens arrive: those that will not be among the `recent` latest.
pub fn candidates(positions: &[usize], next_pos: usize, n: usize, recent: usize) -> usize {
    let protected = (next_pos + n).saturating_sub(recent);
    positions.iter().take_while(|&&p| p < protected).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_sum_the_attention_each_row_received() {
        let mut scores = vec![0.0; 3];
        // Two (query, head) rows over 3 cached rows.
        accumulate(&mut scores, &[0.5, 0.25, 0.25, 0.75, 0.125, 0.125]);
        assert_eq!(scores, vec![1.25, 0.375, 0.375]);
        // A second pass adds to what is there.
        accumulate(&mut scores, &[1.0, 0.0, 0.0]);
        assert_eq!(scores, vec![2.25, 0.375, 0.375]);
    }

    #[test]
    fn a_sink_collects_the_most() {
        // Every query puts 0.5 on row 0 and spreads the rest: row 0 is the heavy hitter.
        let mut scores = vec![0.0; 4];
        for _ in 0..4 {
            accumulate(&mut scores, &[0.5, 0.1, 0.3, 0.1]);
        }
        assert!(scores[0] > scores[2] && scores[2] > scores[1]);
        assert_eq!(choose_evictions(&scores, 4, 2), vec![1, 3]);
    }

    #[test]
    fn the_lowest_scores_go() {
        let scores = [3.0, 0.5, 2.0, 0.25, 1.0];
        assert_eq!(choose_evictions(&scores, 5, 1), vec![3]);
        assert_eq!(choose_evictions(&scores, 5, 2), vec![1, 3]);
        assert_eq!(choose_evictions(&scores, 5, 3), vec![1, 3, 4]);
        assert_eq!(choose_evictions(&scores, 5, 0), Vec::<usize>::new());
    }

    #[test]
    fn the_recent_window_is_never_evicted() {
        // Rows 3 and 4 are recent: their low scores do not matter.
        let scores = [3.0, 0.5, 2.0, 0.0, 0.0];
        assert_eq!(choose_evictions(&scores, 3, 1), vec![1]);
        assert_eq!(choose_evictions(&scores, 3, 2), vec![1, 2]);
    }

    #[test]
    fn ties_go_to_the_earliest_row() {
        let scores = [1.0, 0.5, 0.5, 0.5, 2.0];
        assert_eq!(choose_evictions(&scores, 5, 1), vec![1]);
        assert_eq!(choose_evictions(&scores, 5, 2), vec![1, 2]);
    }

    #[test]
    fn candidates_are_the_rows_older_than_the_recent_window() {
        // Positions held 0, 3, 7, 8, 9; next token at 10; 3 recent: 8, 9, 10 are recent.
        assert_eq!(candidates(&[0, 3, 7, 8, 9], 10, 1, 3), 3);
        assert_eq!(candidates(&[0, 3, 7, 8, 9], 10, 1, 0), 5);
    }

    #[test]
    fn a_budget_run_keeps_the_heavy_and_the_recent() {
        // Budget 4, recent 2: every new token attends 0.6 to position 0, 0.3 to
        // position 2, and the rest evenly. 0 and 2 stay; so do the 2 latest.
        let (budget, recent) = (4, 2);
        let mut positions: Vec<usize> = Vec::new();
        let mut scores: Vec<f32> = Vec::new();
        for pos in 0..12 {
            if positions.len() + 1 > budget {
                let c = candidates(&positions, pos, 1, recent);
                for r in choose_evictions(&scores, c, positions.len() + 1 - budget)
                    .into_iter()
                    .rev()
                {
                    positions.remove(r);
                    scores.remove(r);
                }
            }
            positions.push(pos);
            scores.push(0.0);
            let rest = positions.iter().filter(|&&p| p != 0 && p != 2).count() as f32;
            let probs: Vec<f32> = positions
                .iter()
                .map(|&p| match p {
                    0 => 0.6,
                    2 => 0.3,
                    _ => 0.1 / rest,
                })
                .collect();
            accumulate(&mut scores, &probs);
        }
        assert_eq!(positions, vec![0, 2, 10, 11]);
    }
}
