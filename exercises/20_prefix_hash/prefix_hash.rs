//! # Exercise 20 — naming blocks by their prefix: prefix caching
//!
//! The seed article (§3.4): when many requests start with the same system prompt, its K and
//! V are the same for all of them, so compute and store them once. The K and V of position
//! `i` depend on tokens `0..=i` and on nothing else, so a *full* block of positions
//! `b * block_size..(b + 1) * block_size` is determined by every token up to its end.
//!
//! vLLM's automatic prefix caching names each full block with a *chained* hash:
//! `hash(block b) = H(hash(block b - 1), tokens of block b)`, with no parent for block 0.
//! Equal names mean equal prefixes; a one-token difference changes the name of its block
//! and of every block after it. A new request walks its prompt block by block and reuses
//! the cached ones it can (kvlab: `src/cache/paged/prefix.rs`); which ones it can is the question.
//!
//! Two details every engine has:
//! - only full blocks are named (a partial block's content is still changing);
//! - at least the last prompt token is computed, even when every block is cached: its
//!   logits are the first output token.

use std::collections::HashSet;

/// Given: 64-bit FNV-1a over the parent's name (if any) and the block's tokens
/// (kvlab's `cache::prefix::block_hash`, byte for byte).
pub fn block_hash(parent: Option<u64>, tokens: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    match parent {
        None => eat(&[0]),
        Some(p) => {
            eat(&[1]);
            eat(&p.to_le_bytes());
        }
    }
    for t in tokens {
        eat(&t.to_le_bytes());
    }
    h
}

/// The names of the full blocks of `tokens`, in order (a trailing partial block has none).
pub fn block_hashes(tokens: &[u32], block_size: usize) -> Vec<u64> {
    // TODO: Questions:
    // - Which blocks get a name: does a trailing partial block?
    // - What is block 0's parent? Block b's? What does that chain buy (see the header)?
    let _ = (tokens, block_size);
    Vec::new()
}

/// How many positions of `prompt` a request can take from a cache holding the blocks named
/// in `cached`: whole blocks, from the start, up to the first miss, and never the last
/// prompt token.
pub fn reusable_len(cached: &HashSet<u64>, prompt: &[u32], block_size: usize) -> usize {
    // TODO: Questions:
    // - The last prompt token's logits must be computed: which blocks may be reused at all?
    //   How many, for a prompt of exactly 3 blocks?
    // - Block 1 was evicted, block 2 is still cached: can block 2's K and V be used without
    //   block 1's? So where does the count stop?
    let _ = (cached, prompt, block_size);
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache_of(tokens: &[u32], block_size: usize) -> HashSet<u64> {
        block_hashes(tokens, block_size).into_iter().collect()
    }

    #[test]
    fn only_full_blocks_are_named_and_names_chain() {
        let tokens: Vec<u32> = (0..10).collect();
        let names = block_hashes(&tokens, 4);
        assert_eq!(
            names.len(),
            2,
            "10 tokens = 2 full blocks of 4 and a partial one"
        );
        assert_eq!(names[0], block_hash(None, &[0, 1, 2, 3]));
        assert_eq!(names[1], block_hash(Some(names[0]), &[4, 5, 6, 7]));
        assert!(block_hashes(&tokens[..3], 4).is_empty());
    }

    #[test]
    fn the_same_block_after_another_prefix_has_another_name() {
        let a = [1, 2, 3, 4, 9, 9, 9, 9];
        let b = [5, 6, 7, 8, 9, 9, 9, 9];
        assert_ne!(block_hashes(&a, 4)[1], block_hashes(&b, 4)[1]);
    }

    #[test]
    fn a_shared_system_prompt_is_reused() {
        let system: Vec<u32> = (100..112).collect(); // 3 blocks of 4
        let first = [&system[..], &[1, 2, 3]].concat();
        let cached = cache_of(&first, 4);
        let second = [&system[..], &[7, 8]].concat();
        assert_eq!(reusable_len(&cached, &second, 4), 12);
        // A different system prompt reuses nothing.
        let other: Vec<u32> = (200..214).collect();
        assert_eq!(reusable_len(&cached, &other, 4), 0);
        assert_eq!(reusable_len(&HashSet::new(), &second, 4), 0);
    }

    #[test]
    fn one_different_token_misses_from_its_block_on() {
        let prompt: Vec<u32> = (0..17).collect();
        let cached = cache_of(&prompt, 4);
        let mut edited = prompt.clone();
        edited[9] = 99; // in block 2 (positions 8..12)
        assert_eq!(reusable_len(&cached, &edited, 4), 8);
        // Block 3 has the same tokens as before, but its parent changed: a miss too.
        let names = block_hashes(&edited, 4);
        assert!(!cached.contains(&names[3]));
    }

    #[test]
    fn an_evicted_block_ends_the_reuse() {
        // The cache held blocks 0, 1 and 2 of this prompt; block 1 was evicted since.
        let prompt: Vec<u32> = (0..13).collect();
        let names = block_hashes(&prompt, 4);
        let mut cached = cache_of(&prompt, 4);
        assert!(cached.remove(&names[1]));
        // Block 2 is still cached, but the prompt's positions 4..8 must be computed again,
        // and a prefill fills the cache from its first missing position on: reuse stops at
        // the hole (a `filter` that skips it would count 8).
        assert!(cached.contains(&names[2]));
        assert_eq!(reusable_len(&cached, &prompt, 4), 4);
        // Block 0 evicted: nothing is reusable, though blocks 1 and 2 are cached.
        let mut cached = cache_of(&prompt, 4);
        cached.remove(&names[0]);
        assert_eq!(reusable_len(&cached, &prompt, 4), 0);
    }

    #[test]
    fn the_last_prompt_token_is_always_computed() {
        let prompt: Vec<u32> = (0..12).collect(); // exactly 3 blocks
        let cached = cache_of(&prompt, 4);
        assert_eq!(reusable_len(&cached, &prompt, 4), 8);
        let longer = [&prompt[..], &[50]].concat();
        assert_eq!(reusable_len(&cached, &longer, 4), 12);
        assert_eq!(reusable_len(&cached, &[0], 4), 0);
    }
}
