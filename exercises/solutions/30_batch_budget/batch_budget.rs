//! # Exercise 30 — one iteration's batch under a token budget
//!
//! A serving engine runs many requests at once (continuous batching, Orca 2022): every
//! iteration it picks rows from the running requests and runs them in **one** forward
//! pass, so every weight is streamed once for all of them. A request that is *decoding*
//! (解码) needs one row: its last token. A request that is *prefilling* (预填充) needs the
//! rest of its prompt, which may be thousands of rows.
//!
//! The iteration has a **token budget**: at most `max_tokens` rows, at most `max_seqs`
//! requests. Sarathi (Agrawal et al. 2023) fills it in this order:
//!
//! 1. every decode first, one row each, oldest first: their users are waiting for the
//!    next token, and a decode row is almost free (decode is memory-bound);
//! 2. then prefills, oldest first, each with as many rows as the budget still has: a
//!    prompt longer than what is left runs a *chunk* now and the rest later.
//!
//! kvlab: `src/engine/scheduler.rs` (`pick_batch`), chapter "Scheduling prefill and decode".

/// A running request: its id and the rows it still needs before its next token
/// (1 when decoding, the rest of its prompt when prefilling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Running {
    pub id: u64,
    pub rows_left: usize,
}

/// The rows of the next iteration, `(id, rows)`, decodes first, then prefill chunks;
/// `running` is oldest first. Never more than `max_tokens` rows nor `max_seqs` requests,
/// and never a request with 0 rows.
pub fn pick_batch(running: &[Running], max_tokens: usize, max_seqs: usize) -> Vec<(u64, usize)> {
    let mut picked = Vec::new();
    let mut tokens_left = max_tokens;
    // Decodes first (one row each), then prefills (the rest of the budget, in chunks).
    let decodes = running.iter().filter(|r| r.rows_left == 1);
    let prefills = running.iter().filter(|r| r.rows_left > 1);
    for r in decodes.chain(prefills) {
        if picked.len() == max_seqs || tokens_left == 0 {
            break;
        }
        let rows = r.rows_left.min(tokens_left);
        picked.push((r.id, rows));
        tokens_left -= rows;
    }
    picked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(id: u64, rows_left: usize) -> Running {
        Running { id, rows_left }
    }

    #[test]
    fn decodes_go_first_even_when_younger() {
        // Request 0 (oldest) is prefilling 300 rows; 1 and 2 decode.
        let batch = pick_batch(&[r(0, 300), r(1, 1), r(2, 1)], 64, 8);
        assert_eq!(batch, vec![(1, 1), (2, 1), (0, 62)]);
    }

    #[test]
    fn prompts_are_cut_into_chunks_that_fill_the_budget() {
        let batch = pick_batch(&[r(0, 40), r(1, 40), r(2, 1)], 64, 8);
        assert_eq!(batch, vec![(2, 1), (0, 40), (1, 23)]);
        let total: usize = batch.iter().map(|b| b.1).sum();
        assert_eq!(total, 64);
    }

    #[test]
    fn small_prompts_run_whole_and_the_budget_is_a_ceiling() {
        let batch = pick_batch(&[r(0, 5), r(1, 7), r(2, 1)], 512, 8);
        assert_eq!(batch, vec![(2, 1), (0, 5), (1, 7)]);
    }

    #[test]
    fn no_request_gets_zero_rows() {
        // The budget is spent by the first prefill: the second waits (not (1, 0)).
        let batch = pick_batch(&[r(0, 100), r(1, 100)], 16, 8);
        assert_eq!(batch, vec![(0, 16)]);
        // More decodes than budget: the oldest decodes run, the rest wait.
        let decodes: Vec<Running> = (0..10).map(|i| r(i, 1)).collect();
        assert_eq!(
            pick_batch(&decodes, 4, 8),
            vec![(0, 1), (1, 1), (2, 1), (3, 1)]
        );
    }

    #[test]
    fn at_most_max_seqs_requests() {
        let running: Vec<Running> = (0..10).map(|i| r(i, if i < 5 { 1 } else { 3 })).collect();
        let batch = pick_batch(&running, 100, 6);
        assert_eq!(batch.len(), 6);
        assert_eq!(batch[5], (5, 3));
        assert!(pick_batch(&[], 10, 4).is_empty());
    }
}
