//! # Exercise 21 — how much of the cache a new turn can reuse (多轮对话复用)
//!
//! The seed article (§5.2): a chat model sees the whole conversation at every turn, and
//! everything up to the new question was already in the cache at the end of the last
//! turn. Keep the cache, and the next turn prefills only what is new.
//!
//! What can be kept is decided by token ids, not by "the last turn": the K and V of
//! position `i` depend on tokens `0..=i`, so a cached position is valid for the new
//! prompt exactly when every token up to it is the same. The reusable part is the
//! *longest common prefix* (LCP) of the cached ids and the new prompt's ids. It is often
//! shorter than the cache: the chat template writes an end-of-turn token the model never
//! fed back, re-tokenizing a reply can spell it with other ids, a client edits a message.
//!
//! Two more limits, as in exercise 20:
//! - the last prompt token is always computed, even when the whole prompt is cached: its
//!   logits are the first output token (llama.cpp's server and kvlab's `chat` both do this);
//! - an engine that caches whole blocks (vLLM's prefix caching) reuses only whole blocks;
//!   a partly matching block is recomputed.
//!
//! kvlab: `src/chat.rs` (`kvlab chat`, book chapter "Multi-turn conversations").

/// Length of the longest common prefix of `cached` and `prompt`.
pub fn common_prefix_len(cached: &[u32], prompt: &[u32]) -> usize {
    // Stop at the first difference: a later equal token has a different past.
    cached
        .iter()
        .zip(prompt)
        .take_while(|(a, b)| a == b)
        .count()
}

/// Positions of `prompt` whose K and V can be taken from a cache holding `cached`.
pub fn reusable_tokens(cached: &[u32], prompt: &[u32]) -> usize {
    // The last prompt token is always computed: its logits are the first output.
    common_prefix_len(cached, prompt).min(prompt.len().saturating_sub(1))
}

/// The same, for a cache that keeps and hands out whole blocks of `block_size` positions.
pub fn reusable_tokens_in_blocks(cached: &[u32], prompt: &[u32], block_size: usize) -> usize {
    assert!(block_size > 0, "block_size must be at least 1");
    // Apply the last-token rule first, then round down to whole blocks: rounding first
    // can land on the last token's block boundary and keep a partial block.
    reusable_tokens(cached, prompt) / block_size * block_size
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Token ids of a made-up conversation: turn 1's prompt, the reply, and turn 2's.
    fn turn1_prompt() -> Vec<u32> {
        (100..141).collect() // 41 tokens: system prompt and question 1
    }
    fn reply() -> Vec<u32> {
        (500..529).collect() // 29 sampled tokens; the end-of-turn token was not fed back
    }
    const IM_END: u32 = 2;

    #[test]
    fn the_next_turn_reuses_the_whole_cached_conversation() {
        let cached = [turn1_prompt(), reply()].concat(); // 70 positions
                                                         // Turn 2's template: the history, the end-of-turn token, question 2 (18 tokens).
        let turn2 = [cached.clone(), vec![IM_END], (300..317).collect()].concat();
        assert_eq!(turn2.len(), 88);
        assert_eq!(common_prefix_len(&cached, &turn2), 70);
        assert_eq!(reusable_tokens(&cached, &turn2), 70);
    }

    #[test]
    fn the_prefix_ends_at_the_first_difference() {
        let cached = [turn1_prompt(), reply()].concat();
        // The client edited one token of the question (position 30): everything after it
        // must be recomputed, even the 39 later tokens that are equal to the cached ones.
        let mut edited = cached.clone();
        edited[30] = 999;
        edited.push(IM_END);
        assert_eq!(common_prefix_len(&cached, &edited), 30);
        assert_eq!(reusable_tokens(&cached, &edited), 30);
        assert_eq!(common_prefix_len(&[1, 2, 3], &[9, 2, 3, 4]), 0);
    }

    #[test]
    fn the_last_prompt_token_is_always_computed() {
        let cached = turn1_prompt();
        // The same prompt again: 40 of its 41 positions are reusable, not 41.
        assert_eq!(reusable_tokens(&cached, &cached), 40);
        // A prompt that is a prefix of the cache (regenerate an earlier answer).
        assert_eq!(reusable_tokens(&cached, &cached[..10]), 9);
        assert_eq!(reusable_tokens(&cached, &cached[..1]), 0);
    }

    #[test]
    fn empty_inputs_reuse_nothing() {
        assert_eq!(reusable_tokens(&[], &[1, 2, 3]), 0);
        assert_eq!(reusable_tokens(&[1, 2, 3], &[]), 0);
        assert_eq!(reusable_tokens_in_blocks(&[1, 2, 3], &[], 16), 0);
    }

    #[test]
    fn a_block_cache_reuses_whole_blocks_only() {
        let cached = [turn1_prompt(), reply()].concat();
        let turn2 = [cached.clone(), vec![IM_END], (300..317).collect()].concat();
        // 70 common positions: 4 whole blocks of 16 = 64; the other 6 are recomputed.
        assert_eq!(reusable_tokens_in_blocks(&cached, &turn2, 16), 64);
        // Block size 1 is the token-granular answer.
        assert_eq!(reusable_tokens_in_blocks(&cached, &turn2, 1), 70);
        // A 32-token prompt, fully cached: the last token's block cannot be reused, so
        // only the first block (16), not 31 and not 32.
        let prompt: Vec<u32> = (0..32).collect();
        assert_eq!(reusable_tokens_in_blocks(&prompt, &prompt, 16), 16);
        // One token more and both blocks are reusable.
        let longer: Vec<u32> = (0..33).collect();
        assert_eq!(reusable_tokens_in_blocks(&prompt, &longer, 16), 32);
    }
}
