//! # Exercise 46 — split-K attention under a local layer's window
//!
//! Split-K attention (exercise 34) cuts a query's keys into chunks of [`CHUNK`], counted
//! from position 0: chunk `s` holds keys `s * CHUNK .. (s + 1) * CHUNK`. One GPU block per
//! chunk computes a partial softmax, and a second kernel merges the partials in order.
//!
//! Gemma 3's local layers see only a window: the query at `pos` reads its own key and the
//! `window - 1` before it (transformers: `kv_idx > q_idx - sliding_window`). On the GPU
//! (book: "The CUDA backend", section "A second architecture on the GPU") the chunks stay
//! where they are, so a window changes three things:
//!
//! - the first key a query reads moves up from 0;
//! - a chunk wholly below that key reads nothing (its block returns at once), and the chunk
//!   holding it starts inside itself, but still *ends where the chunk ends*;
//! - the merge starts at the chunk holding the first key, not at chunk 0, since the chunks
//!   below it wrote nothing (their scratch holds whatever an earlier layer left there).
//!
//! ```text
//! CHUNK 256, pos 600, window 512: keys 89..=600
//! chunk 0: keys  89..256   chunk 1: 256..512   chunk 2: 512..601   merge chunks 0..=2
//! pos 1000, window 512: keys 489..=1000, chunk 0 reads nothing; merge chunks 1..=3
//! ```
//!
//! kvlab: `kernels/attention_splitk.cu` (`attention_v3_split`: `first`, `last` and the early
//! return; `attention_v3_combine`: `from`), `kernels/attention.cu` (`first_key`).

use std::ops::Range;

/// Keys per chunk (`CHUNK` in kernels/attention_splitk.cu).
pub const CHUNK: usize = 256;

/// (a) The first key the query at `pos` reads: 0 for a global layer (`window` `None`),
/// else the oldest of the last `window` positions up to `pos` (0 while `pos < window`).
pub fn first_key(pos: usize, window: Option<usize>) -> usize {
    match window {
        None => 0,
        Some(w) => (pos + 1).saturating_sub(w),
    }
}

/// (b) The keys chunk `s` reads for the query at `pos`: the part of `s * CHUNK .. (s + 1) *
/// CHUNK` that lies in `first_key ..= pos`; `None` when that part is empty.
pub fn chunk_keys(s: usize, pos: usize, window: Option<usize>) -> Option<Range<usize>> {
    let first = (s * CHUNK).max(first_key(pos, window));
    let last = ((s + 1) * CHUNK).min(pos + 1); // one past the chunk's last key
    (first < last).then_some(first..last)
}

/// (c) The chunks the merge reads for the query at `pos`, in order.
pub fn chunks_merged(pos: usize, window: Option<usize>) -> Range<usize> {
    first_key(pos, window) / CHUNK..pos / CHUNK + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key the query reads, each exactly once, chunk by chunk in order.
    fn keys_read(pos: usize, window: Option<usize>) -> Vec<usize> {
        chunks_merged(pos, window)
            .flat_map(|s| chunk_keys(s, pos, window).expect("a merged chunk reads keys"))
            .collect()
    }

    #[test]
    fn a_global_layer_reads_every_key_from_zero() {
        assert_eq!(first_key(700, None), 0);
        assert_eq!(chunks_merged(700, None), 0..3);
        assert_eq!(chunk_keys(2, 700, None), Some(512..701));
        assert_eq!(keys_read(700, None), (0..=700).collect::<Vec<_>>());
    }

    #[test]
    fn the_window_counts_the_query_itself() {
        assert_eq!(first_key(600, Some(512)), 89, "600 - 512 + 1");
        assert_eq!(first_key(3, Some(512)), 0, "early queries see everything");
        assert_eq!(first_key(511, Some(512)), 0);
        assert_eq!(first_key(512, Some(512)), 1);
        assert_eq!(
            first_key(9, Some(1)),
            9,
            "a window of one: the query's own key"
        );
    }

    #[test]
    fn the_first_chunk_starts_inside_itself_and_ends_at_its_own_end() {
        // The bug this guards against: ending the chunk CHUNK keys after the window's first
        // key (89 + 256 = 345) reads keys 256..345 twice, once here and once in chunk 1.
        assert_eq!(chunk_keys(0, 600, Some(512)), Some(89..256));
        assert_eq!(chunk_keys(1, 600, Some(512)), Some(256..512));
        assert_eq!(chunk_keys(2, 600, Some(512)), Some(512..601));
        assert_eq!(chunk_keys(3, 600, Some(512)), None, "past the query");
    }

    #[test]
    fn chunks_below_the_window_read_nothing_and_are_not_merged() {
        assert_eq!(chunk_keys(0, 1000, Some(512)), None);
        assert_eq!(chunks_merged(1000, Some(512)), 1..4);
        // A window that starts exactly on a chunk boundary.
        assert_eq!(first_key(767, Some(512)), 256);
        assert_eq!(chunks_merged(767, Some(512)), 1..3);
        assert_eq!(chunk_keys(0, 767, Some(512)), None);
    }

    #[test]
    fn every_key_in_the_window_is_read_once_in_order() {
        for window in [
            None,
            Some(1),
            Some(3),
            Some(255),
            Some(256),
            Some(257),
            Some(512),
        ] {
            for pos in (0..1300).step_by(7).chain([255, 256, 511, 512, 767, 768]) {
                let want: Vec<usize> = (first_key(pos, window)..=pos).collect();
                assert_eq!(keys_read(pos, window), want, "pos {pos} window {window:?}");
            }
        }
    }
}
