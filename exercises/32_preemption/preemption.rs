//! # Exercise 32 — preemption when the KV pool runs out (抢占)
//!
//! A paged KV cache (KV缓存) hands out blocks of `block_size` positions. A running request
//! holds the blocks its positions fill, and it keeps growing: every decoded token (解码) is
//! one more position, and every `block_size` positions one more block. The engine admits a
//! request when the pool can hold its prompt, not its whole future (nobody knows how long
//! an answer will be), so a pool admitted optimistically can run dry while its requests
//! decode. Then somebody must give their blocks back: that is **preemption** (抢占).
//!
//! There are two ways to give blocks back (Kwon et al. 2023, *PagedAttention*, §4.5):
//!
//! - **swap**: copy the request's blocks out to host memory and back in later. It pays on
//!   a GPU, where the pool is scarce device memory and host RAM is a second, larger pool;
//! - **recompute**: free the blocks, and later prefill (预填充) the request's whole sequence
//!   again, prompt and generated tokens, as if it were a new, longer prompt. A prefill is
//!   compute-bound and fast per token, and a prefix cache often finds the blocks again.
//!
//! kvlab recomputes, as vLLM does by default: its pool already *is* host RAM, so swapping
//! would copy between two parts of the same memory. Nothing changes for the user either:
//! kvlab's kernels are row-independent, so the logits after a recompute are bitwise the
//! ones before, and the request goes on with the same tokens.
//!
//! Whom to preempt? The **youngest** running request, the last admitted: it has done the
//! least work, so the least is recomputed; the oldest requests are served first and always
//! progress, so every request finishes and none starves. The victim goes to the **front**
//! of the waiting queue, ahead of requests that have not started, and is the first admitted
//! again. A request that already has its rows in this step's batch is never the victim
//! (its blocks are spoken for); if the request being served is itself the youngest one
//! left, it preempts itself.
//!
//! This file models one step of that: the running requests are served in the batch's
//! order (decodes first, then prefill chunks, as in the batch-budget exercise), each takes
//! the blocks its rows need, and whoever does not fit makes room by preemption.
//!
//! kvlab: `src/engine/engine.rs` (`Engine::schedule`, `Engine::preempt`); every preemption
//! counts in `kvlab_preemptions_total` at `/metrics`; book chapter "Scheduling prefill and
//! decode", section "Preemption by recompute".

use std::collections::VecDeque;

/// A running request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Req {
    pub id: u64,
    /// The prompt it was admitted with.
    pub prompt: Vec<u32>,
    /// The tokens it has generated since.
    pub generated: Vec<u32>,
    /// Positions it holds in the cache (its blocks hold them, the last one maybe in part).
    pub held: usize,
    /// Rows it runs in this step: 1 for a decode, a chunk of its prompt for a prefill.
    pub rows: usize,
}

/// A waiting request and the prompt it will be prefilled with when admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub id: u64,
    pub prompt: Vec<u32>,
}

/// What one step decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepPlan {
    /// `(id, rows)` of the requests in this step's batch, in the order served.
    pub scheduled: Vec<(u64, usize)>,
    /// The preempted requests, in the order they were preempted.
    pub preempted: Vec<u64>,
    /// Blocks left in the pool after the step's allocations and preemptions.
    pub free_blocks: usize,
    /// The waiting queue after the step, the next to admit first.
    pub waiting: VecDeque<Waiting>,
}

/// Given (the batch-budget exercise's order): the indices of `running`, decodes (1 row)
/// first, then the others, each group oldest first.
pub fn serve_order(running: &[Req]) -> Vec<usize> {
    let decodes = (0..running.len()).filter(|&i| running[i].rows == 1);
    let others = (0..running.len()).filter(|&i| running[i].rows != 1);
    decodes.chain(others).collect()
}

/// Blocks a request that holds `held_positions` must add to run `new_rows` more rows.
pub fn blocks_needed(held_positions: usize, new_rows: usize, block_size: usize) -> usize {
    // TODO: Questions:
    // - Blocks of 16: a request holds 15 positions and runs one more row. Does it need a
    //   new block? And with 16 held? With 17?
    // - How many blocks hold 100 positions, when the last one is only partly filled?
    // - You know how many blocks hold the positions before the step, and after it: what
    //   must the step add?
    let _ = (held_positions, new_rows, block_size);
    0
}

/// One step: `running` in admission order (the last is the youngest), `waiting` the queue
/// before the step, `free_blocks` of `block_size` positions in the pool.
pub fn schedule_step(
    running: &[Req],
    waiting: &VecDeque<Waiting>,
    free_blocks: usize,
    block_size: usize,
) -> StepPlan {
    // TODO: Questions:
    // - In which order are the requests served, and how many blocks does each one take?
    // - The pool is short for the request being served. Who gives their blocks back: who
    //   has done the least work, and who must always make progress so that nobody starves?
    // - Who can no longer be the victim: a request whose rows are already in this step's
    //   batch? One preempted a moment ago? And when the request being served is the only
    //   candidate left, what happens to it?
    // - How many blocks does a victim hand back (does its part-filled last block count)?
    // - When it comes back, what prompt must it be prefilled with so that no token it
    //   generated is lost, and where in the waiting queue does it wait?
    // The placeholder serves everyone and never looks at the pool.
    let _ = block_size;
    StepPlan {
        scheduled: (serve_order(running).into_iter())
            .map(|i| (running[i].id, running[i].rows))
            .collect(),
        preempted: Vec::new(),
        free_blocks,
        waiting: waiting.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decode: `held` positions in the cache, one row this step.
    fn decode(id: u64, held: usize) -> Req {
        Req {
            id,
            prompt: vec![id as u32; held],
            generated: vec![7],
            held,
            rows: 1,
        }
    }

    fn queue(ids: &[u64]) -> VecDeque<Waiting> {
        ids.iter()
            .map(|&id| Waiting {
                id,
                prompt: vec![1, 2, 3],
            })
            .collect()
    }

    fn ids(waiting: &VecDeque<Waiting>) -> Vec<u64> {
        waiting.iter().map(|w| w.id).collect()
    }

    #[test]
    fn blocks_are_added_only_at_block_boundaries() {
        // Block size 16: the 1st, 17th, 33rd... position opens a block; the others do not.
        assert_eq!(
            blocks_needed(0, 1, 16),
            1,
            "the first position needs a block"
        );
        assert_eq!(
            blocks_needed(15, 1, 16),
            0,
            "the 16th position fills the block the 15 before it are in"
        );
        assert_eq!(
            blocks_needed(16, 1, 16),
            1,
            "the 17th position crosses into a new block"
        );
        assert_eq!(
            blocks_needed(17, 1, 16),
            0,
            "the 18th position goes in the part-filled block it already holds"
        );
        // A prefill chunk: 100 positions need ceil(100 / 16) = 7 blocks, not 6.
        assert_eq!(
            blocks_needed(0, 100, 16),
            7,
            "a part-filled last block counts"
        );
        // 10 held (1 block), 40 more = 50 positions in ceil(50 / 16) = 4 blocks: 3 new.
        assert_eq!(blocks_needed(10, 40, 16), 3);
        assert_eq!(blocks_needed(10, 0, 16), 0, "no rows, no blocks");
    }

    #[test]
    fn everything_fits_and_nobody_is_preempted() {
        // Block size 4: 8 held needs a block for the 9th, 5 held does not, 4 held does.
        let running = [decode(0, 8), decode(1, 5), decode(2, 4)];
        let plan = schedule_step(&running, &queue(&[9]), 3, 4);
        assert_eq!(plan.scheduled, vec![(0, 1), (1, 1), (2, 1)]);
        assert!(plan.preempted.is_empty(), "the pool had room: {plan:?}");
        assert_eq!(plan.free_blocks, 1, "3 free, 2 taken (by requests 0 and 2)");
        assert_eq!(
            ids(&plan.waiting),
            vec![9],
            "the waiting queue is untouched"
        );
    }

    #[test]
    fn a_short_pool_preempts_the_youngest_not_the_oldest() {
        // The pool is empty; request 0 (the oldest) needs a block, 1 and 2 do not.
        let running = [decode(0, 8), decode(1, 6), decode(2, 3)];
        let plan = schedule_step(&running, &VecDeque::new(), 0, 4);
        assert_eq!(
            plan.preempted,
            vec![2],
            "the youngest (the last admitted) gives its block back, so the oldest progresses"
        );
        assert_eq!(plan.scheduled, vec![(0, 1), (1, 1)]);
        assert_eq!(
            plan.free_blocks, 0,
            "request 2's one block went to request 0"
        );
    }

    #[test]
    fn the_victim_returns_all_its_blocks_and_recomputes_its_whole_sequence() {
        let old = decode(0, 8); // needs a 3rd block for its 9th position
        let young = Req {
            id: 1,
            prompt: vec![10, 11, 12, 13, 14],
            generated: vec![20, 21],
            held: 6, // 2 blocks of 4, the second part-filled
            rows: 1,
        };
        let plan = schedule_step(&[old, young], &VecDeque::new(), 0, 4);
        assert_eq!(plan.preempted, vec![1]);
        assert_eq!(
            plan.free_blocks, 1,
            "both of its blocks come back (the part-filled one too), one goes to request 0"
        );
        assert_eq!(
            plan.waiting.front(),
            Some(&Waiting {
                id: 1,
                prompt: vec![10, 11, 12, 13, 14, 20, 21],
            }),
            "recompute: prompt + generated is the new prompt, so no token is lost"
        );
    }

    #[test]
    fn the_victim_goes_to_the_front_of_the_waiting_queue() {
        let running = [decode(0, 4), decode(1, 2)];
        let plan = schedule_step(&running, &queue(&[5, 6]), 0, 4);
        assert_eq!(plan.preempted, vec![1]);
        assert_eq!(
            ids(&plan.waiting),
            vec![1, 5, 6],
            "the preempted request is admitted again before requests that never started"
        );
    }

    #[test]
    fn several_preemptions_in_one_step() {
        // Four decodes at a block boundary, one block each, an empty pool: 0 takes 3's
        // block, 1 takes 2's, and 2 and 3 are gone.
        let running = [decode(0, 4), decode(1, 4), decode(2, 4), decode(3, 4)];
        let plan = schedule_step(&running, &queue(&[9]), 0, 4);
        assert_eq!(plan.scheduled, vec![(0, 1), (1, 1)]);
        assert_eq!(plan.preempted, vec![3, 2], "youngest first");
        assert_eq!(plan.free_blocks, 0);
        assert_eq!(
            ids(&plan.waiting),
            vec![2, 3, 9],
            "each victim goes to the front, so the older victim ends up first"
        );
        // One prefill chunk that needs 3 blocks takes the blocks of two younger prefills
        // (6 positions in 2 blocks each, whose last 2 rows need no new block).
        let prefill = |id, held, rows| Req {
            id,
            prompt: vec![1; held + rows],
            generated: vec![],
            held,
            rows,
        };
        let running = [prefill(0, 0, 12), prefill(1, 6, 2), prefill(2, 6, 2)];
        let plan = schedule_step(&running, &queue(&[]), 0, 4);
        assert_eq!(plan.preempted, vec![2, 1]);
        assert_eq!(plan.scheduled, vec![(0, 12)]);
        assert_eq!(plan.free_blocks, 1, "4 blocks back, 3 taken");
    }

    #[test]
    fn the_last_one_standing_preempts_itself() {
        // Request 1 is the youngest and does not fit once request 0 has the last block.
        let plan = schedule_step(&[decode(0, 4), decode(1, 8)], &queue(&[]), 1, 4);
        assert_eq!(plan.scheduled, vec![(0, 1)]);
        assert_eq!(plan.preempted, vec![1], "nobody younger is left to preempt");
        assert_eq!(plan.free_blocks, 2, "its own 2 blocks are back in the pool");
        // Alone, with no free block: it gives its blocks back and waits.
        let plan = schedule_step(&[decode(0, 8)], &queue(&[4]), 0, 4);
        assert!(plan.scheduled.is_empty(), "it does not fit: {plan:?}");
        assert_eq!(plan.preempted, vec![0]);
        assert_eq!(plan.free_blocks, 2);
        assert_eq!(ids(&plan.waiting), vec![0, 4]);
    }

    #[test]
    fn a_request_already_in_the_batch_is_never_the_victim() {
        // Request 0 (the oldest) is prefilling; request 1 decodes, so it is served first
        // and takes the only free block. Then request 0's chunk needs 2 blocks: the
        // youngest request is 1, but its block is in this step's batch, so 0 preempts itself.
        let prefill = Req {
            id: 0,
            prompt: vec![1; 12],
            generated: vec![],
            held: 4,
            rows: 8,
        };
        let plan = schedule_step(&[prefill, decode(1, 4)], &queue(&[]), 1, 4);
        assert_eq!(plan.scheduled, vec![(1, 1)], "the decode keeps its row");
        assert_eq!(
            plan.preempted,
            vec![0],
            "only a request without rows in this step can give its blocks back"
        );
        assert_eq!(plan.free_blocks, 1, "request 0's one block is back");
        assert_eq!(plan.waiting[0].prompt, vec![1; 12]);
    }
}
