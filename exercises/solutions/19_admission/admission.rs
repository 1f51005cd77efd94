//! # Exercise 19 — admission under a memory budget: preallocated vs paged
//!
//! A server has a fixed number of bytes for KV caches. How many requests can it run at
//! once? (The seed's §3.3 and §3.4; kvlab: `kvlab capacity`, `src/lab/capacity.rs`.)
//!
//! - **Preallocated** (exercise 10): a request reserves `prompt + max_new_tokens`
//!   positions before its first token, because nobody knows when the model will stop.
//!   Most requests stop early; the rest of the reservation is never written, and no other
//!   request can use it.
//! - **Paged** (exercise 18): the budget is cut into blocks of `block_size` positions, and
//!   a request holds only the blocks its tokens fill so far. Its one loss is the unused
//!   tail of its last block (internal fragmentation), always less than a block.
//!
//! Every answer here is a whole number: a request either fits or does not, a block is
//! used whole or not at all, and a budget's leftover bytes smaller than a block hold
//! nothing. Which way each division rounds is the exercise.

/// Requests of `prompt_len + max_new_tokens` positions each that fit in `budget_bytes`
/// when each reserves its worst case up front.
pub fn preallocated_admits(
    budget_bytes: u64,
    kv_bytes_per_token: u64,
    prompt_len: u64,
    max_new_tokens: u64,
) -> u64 {
    let reserve = (prompt_len + max_new_tokens) * kv_bytes_per_token;
    assert!(reserve > 0, "a request reserves at least one position");
    // Only whole requests run: round down.
    budget_bytes / reserve
}

/// Blocks of `block_size` positions needed to hold `tokens` positions.
pub fn blocks_for(tokens: u64, block_size: u64) -> u64 {
    assert!(block_size > 0, "block_size must be at least 1");
    // A partly filled block is still a whole block: round up.
    tokens.div_ceil(block_size)
}

/// Whole blocks a budget of `budget_bytes` holds.
pub fn pool_blocks(budget_bytes: u64, kv_bytes_per_token: u64, block_size: u64) -> u64 {
    let block_bytes = block_size * kv_bytes_per_token;
    assert!(block_bytes > 0, "a block holds at least one byte");
    // The leftover bytes, less than a block, hold no block: round down.
    budget_bytes / block_bytes
}

/// Requests that fit when each holds `tokens_held` positions, paged in blocks.
pub fn paged_admits(
    budget_bytes: u64,
    kv_bytes_per_token: u64,
    block_size: u64,
    tokens_held: u64,
) -> u64 {
    // An admitted request holds at least one block (and the division needs a divisor).
    let per_request = blocks_for(tokens_held, block_size).max(1);
    pool_blocks(budget_bytes, kv_bytes_per_token, block_size) / per_request
}

/// Positions a request holding `tokens` positions reserves but does not use: the unused
/// tail of its last block.
pub fn paged_waste(tokens: u64, block_size: u64) -> u64 {
    blocks_for(tokens, block_size) * block_size - tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M's K and V per token in f32: 2 x 30 layers x 3 KV heads x 64 x 4 bytes.
    const KV: u64 = 46_080;
    const GIB: u64 = 1 << 30;

    #[test]
    fn blocks_round_up() {
        assert_eq!(blocks_for(0, 16), 0);
        assert_eq!(blocks_for(1, 16), 1);
        assert_eq!(blocks_for(16, 16), 1);
        assert_eq!(blocks_for(17, 16), 2);
        assert_eq!(blocks_for(700, 16), 44);
    }

    #[test]
    fn waste_is_the_tail_of_the_last_block() {
        assert_eq!(paged_waste(16, 16), 0);
        assert_eq!(paged_waste(17, 16), 15);
        assert_eq!(paged_waste(700, 16), 4);
        assert_eq!(paged_waste(2000, 16), 0);
        for tokens in 1..200 {
            assert!(paged_waste(tokens, 16) < 16);
        }
    }

    #[test]
    fn preallocation_reserves_the_worst_case() {
        // 500-token prompts with max_new_tokens = 1500: 2000 positions, 92 MB each.
        assert_eq!(preallocated_admits(GIB, KV, 500, 1500), 11);
        // Counting the prompt alone would claim four times as many.
        assert_eq!(preallocated_admits(GIB, KV, 500, 0), 46);
    }

    #[test]
    fn a_budget_is_whole_blocks() {
        // 1 GiB in blocks of 16 SmolLM2 positions (737 280 bytes): 1456 blocks.
        assert_eq!(pool_blocks(GIB, KV, 16), 1456);
        // One byte short of 11 blocks is 10 blocks.
        let block = 16 * KV;
        assert_eq!(pool_blocks(11 * block - 1, KV, 16), 10);
        assert_eq!(paged_admits(11 * block - 1, KV, 16, 16), 10);
    }

    #[test]
    fn paging_gains_when_requests_stop_early() {
        // Every request runs to max_new_tokens: paging fits the same 11.
        assert_eq!(paged_admits(GIB, KV, 16, 2000), 11);
        // They stop after 200 new tokens (700 positions, 44 blocks): 33 fit, 3x.
        assert_eq!(paged_admits(GIB, KV, 16, 700), 33);
        // One block per request at most wasted: 17 positions take two blocks.
        assert_eq!(paged_admits(GIB, KV, 16, 17), 728);
    }

    #[test]
    fn a_request_holding_nothing_yet_still_takes_a_block() {
        // Admitted before its first position is written, a request already owns one
        // block: a pool of 10 blocks admits 10 such requests, not a division by zero.
        assert_eq!(paged_admits(10 * 16 * KV, KV, 16, 0), 10);
    }
}
