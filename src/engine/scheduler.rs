//! Which rows run in the next iteration: the token budget, decodes first, then prefill
//! chunks (book: scheduling.md; exercises 30 and 31).
//!
//! Prefill and decode have opposite bottlenecks (book: roofline.md): a decode row
//! streams every weight for one token (memory-bound), a prefill row shares that read
//! with hundreds of others (compute-bound). An iteration that mixes them gives the
//! decodes a free ride on the prefill's weight reads, but its length is set by the
//! prefill: a 1000-token prompt prefilled whole stalls every running decode for the
//! whole prefill. Sarathi (Agrawal et al. 2023) caps the tokens of one iteration (the
//! *token budget*) and cuts prompts into chunks that fill what the decodes leave:
//! every iteration then takes about the same time, and the decodes never stall.
//!
//! These functions only count tokens; the engine (`engine.rs`) then checks that the
//! KV pool has blocks for what was picked, and preempts if it has not. What differs
//! between the scheduling policies is [`PolicyRules`], one small impl each.

use super::request::Policy;

// ANCHOR: policy_rules
/// What a scheduling policy decides, and nothing else: the rest of the loop is the same
/// for every policy. One small impl per [`Policy`], read here and nowhere else.
pub trait PolicyRules: Sync {
    /// Whether a prompt may run a part at a time under the token budget (Sarathi).
    fn chunked_prefill(&self) -> bool;
    /// Whether waiting requests may start in this iteration, with `running` in flight.
    fn may_admit(&self, running: usize) -> bool;
    /// The most requests running at once.
    fn max_running(&self) -> usize {
        usize::MAX
    }
}

/// One request at a time, to completion: the baseline.
pub struct Sequential;
impl PolicyRules for Sequential {
    fn chunked_prefill(&self) -> bool {
        false
    }
    fn may_admit(&self, running: usize) -> bool {
        running == 0
    }
    fn max_running(&self) -> usize {
        1
    }
}

/// A batch starts only when the last one is done: it waits for its slowest member.
pub struct Static;
impl PolicyRules for Static {
    fn chunked_prefill(&self) -> bool {
        false
    }
    fn may_admit(&self, running: usize) -> bool {
        running == 0
    }
}

/// Orca: requests join and leave at every iteration; a prompt is prefilled whole.
pub struct Continuous;
impl PolicyRules for Continuous {
    fn chunked_prefill(&self) -> bool {
        false
    }
    fn may_admit(&self, _: usize) -> bool {
        true
    }
}

/// Orca + Sarathi: joins at every iteration, prompts in chunks that fill the budget.
pub struct ContinuousChunked;
impl PolicyRules for ContinuousChunked {
    fn chunked_prefill(&self) -> bool {
        true
    }
    fn may_admit(&self, _: usize) -> bool {
        true
    }
}

impl Policy {
    /// The rules this policy schedules by.
    pub fn rules(self) -> &'static dyn PolicyRules {
        match self {
            Policy::Sequential => &Sequential,
            Policy::Static => &Static,
            Policy::Continuous => &Continuous,
            Policy::ContinuousChunked => &ContinuousChunked,
        }
    }
}
// ANCHOR_END: policy_rules

// ANCHOR: budget
/// What the scheduler knows of a running sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub id: u64,
    /// Rows still to run before its next token: 1 when decoding, the rest of its
    /// prompt when prefilling.
    pub rows_left: usize,
}

/// The limits of one iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Rows (tokens) one forward pass may run.
    pub max_tokens: usize,
    /// Sequences one forward pass may run.
    pub max_seqs: usize,
    /// Sarathi-style chunked prefill: a prompt may run a part at a time.
    pub chunked: bool,
}

/// Rows of one sequence in the next pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheduled {
    pub id: u64,
    pub rows: usize,
}
// ANCHOR_END: budget

// ANCHOR: prefill_chunk
/// How many of a prefill's `rows_left` rows run now, with `tokens_left` of the budget
/// unused; 0 when it must wait.
///
/// - chunked: as many as fit, `min(rows_left, tokens_left)`: the prompt is cut into
///   chunks that fill the budget (the rest runs in later iterations);
/// - whole prompts: all of them if they fit. A prompt longer than the whole budget
///   would never fit, so it runs when it is the first prefill of the iteration
///   (the decodes of that iteration wait for it: the stall chunking removes).
pub fn prefill_chunk(
    rows_left: usize,
    tokens_left: usize,
    chunked: bool,
    first_prefill: bool,
) -> usize {
    if tokens_left == 0 {
        return 0;
    }
    if chunked {
        rows_left.min(tokens_left)
    } else if rows_left <= tokens_left || first_prefill {
        rows_left
    } else {
        0
    }
}
// ANCHOR_END: prefill_chunk

// ANCHOR: pick_batch
/// The rows of the running sequences (oldest first) for the next pass: every decode
/// first (one row each, they keep their token rate), then prefills with what is left
/// of the budget, oldest first. Never more than `budget.max_tokens` rows (but for one
/// whole prompt longer than the budget, see [`prefill_chunk`]) nor `budget.max_seqs`
/// sequences.
pub fn pick_batch(running: &[Candidate], budget: &Budget) -> Vec<Scheduled> {
    let mut picked = Vec::new();
    let mut tokens_left = budget.max_tokens;
    let decodes = running.iter().filter(|c| c.rows_left == 1);
    for c in decodes {
        if picked.len() == budget.max_seqs || tokens_left == 0 {
            return picked;
        }
        picked.push(Scheduled { id: c.id, rows: 1 });
        tokens_left -= 1;
    }
    let mut first_prefill = true;
    for c in running.iter().filter(|c| c.rows_left > 1) {
        if picked.len() == budget.max_seqs {
            break;
        }
        let rows = prefill_chunk(c.rows_left, tokens_left, budget.chunked, first_prefill);
        if rows == 0 {
            break;
        }
        picked.push(Scheduled { id: c.id, rows });
        tokens_left = tokens_left.saturating_sub(rows);
        first_prefill = false;
    }
    picked
}
// ANCHOR_END: pick_batch

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: u64, rows_left: usize) -> Candidate {
        Candidate { id, rows_left }
    }

    #[test]
    fn each_policy_admits_and_chunks_as_its_table_row_says() {
        // (policy, chunked, admits with 0 running, admits with 3 running, max running)
        let rows = [
            (Policy::Sequential, false, true, false, 1),
            (Policy::Static, false, true, false, usize::MAX),
            (Policy::Continuous, false, true, true, usize::MAX),
            (Policy::ContinuousChunked, true, true, true, usize::MAX),
        ];
        for (policy, chunked, idle, busy, max) in rows {
            let rules = policy.rules();
            let got = (
                rules.chunked_prefill(),
                rules.may_admit(0),
                rules.may_admit(3),
                rules.max_running(),
            );
            assert_eq!(got, (chunked, idle, busy, max), "{}", policy.name());
        }
    }

    #[test]
    fn decodes_go_first_then_chunks_fill_the_budget() {
        let budget = Budget {
            max_tokens: 10,
            max_seqs: 8,
            chunked: true,
        };
        let picked = pick_batch(&[c(0, 30), c(1, 1), c(2, 1), c(3, 5)], &budget);
        let rows: Vec<(u64, usize)> = picked.iter().map(|s| (s.id, s.rows)).collect();
        assert_eq!(rows, vec![(1, 1), (2, 1), (0, 8)]);
    }

    #[test]
    fn whole_prompts_wait_unless_first() {
        let budget = Budget {
            max_tokens: 10,
            max_seqs: 8,
            chunked: false,
        };
        let picked = pick_batch(&[c(1, 1), c(0, 30), c(3, 5)], &budget);
        let rows: Vec<(u64, usize)> = picked.iter().map(|s| (s.id, s.rows)).collect();
        assert_eq!(rows, vec![(1, 1), (0, 30)]);
        assert_eq!(prefill_chunk(5, 4, false, false), 0);
        assert_eq!(prefill_chunk(5, 4, true, false), 4);
    }
}
