//! # Exercise 25 — a sliding window in paged blocks
//!
//! Exercise 24 kept a window with sinks in a ring of slots: evicting the oldest recent
//! row frees its slot, and the next token is written there. A paged pool (exercise 18)
//! cannot hand back a slot, only a whole **block** of `block_size` positions. So a
//! window in blocks works the other way round: new positions are always appended at the
//! end of the block table, as for a full cache, and a block goes back to the pool once
//! *every* position in it has left the window. Its place in the table becomes a *hole*;
//! attention skips it and reads the rows still held in position order.
//!
//! The sinks are positions `0..sinks` and never leave. After `evicted` positions have
//! gone, the dropped positions are `sinks..sinks + evicted`: the oldest recent ones.
//! A block can straddle the sinks and the dropped run (it keeps a sink: it stays), or the
//! dropped run and the kept recent positions (it keeps a recent row: it stays).
//!
//! The payoff: however long the sequence runs, it never holds more than a bounded number
//! of blocks, so a pool sized for that bound serves it forever.
//!
//! kvlab: `src/cache/paged/retention.rs` (`PagedCache::slide_plan`, `Retention::max_blocks`),
//! book chapter "Eviction and sliding windows", section "A window in blocks".

use std::ops::Range;

/// The table indices of the blocks whose every position is among the dropped positions
/// `sinks..sinks + evicted`, in a table of `n_blocks` blocks of `block_size`.
pub fn blocks_gone(
    sinks: usize,
    evicted: usize,
    block_size: usize,
    n_blocks: usize,
) -> Range<usize> {
    // The first block that holds no sink, and the first block that holds a kept position.
    let first = sinks.div_ceil(block_size);
    let end = ((sinks + evicted) / block_size).min(n_blocks);
    first..end.max(first)
}

/// The most blocks a sequence keeping `sinks` sinks and `window` rows in all ever holds
/// (holes not counted), with blocks of `block_size` positions.
pub fn max_blocks(window: usize, sinks: usize, block_size: usize) -> usize {
    // The sinks' blocks, plus the blocks a run of `window - sinks` consecutive positions
    // can touch when it starts anywhere inside a block: one more than it fills.
    sinks.div_ceil(block_size) + (window - sinks).div_ceil(block_size) + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocks held after `len` positions, `evicted` of them dropped: every block of
    /// the table that is not wholly dropped (the sure way, position by position).
    fn held_brute(len: usize, sinks: usize, evicted: usize, bs: usize) -> Vec<usize> {
        let dropped = |p: usize| p >= sinks && p < sinks + evicted;
        (0..len.div_ceil(bs))
            .filter(|&b| !(b * bs..((b + 1) * bs).min(len)).all(dropped))
            .collect()
    }

    #[test]
    fn no_block_goes_before_a_whole_block_is_dropped() {
        // Blocks of 4, 1 sink: block 0 holds the sink, so it never goes.
        assert_eq!(blocks_gone(1, 3, 4, 10), 1..1);
        assert_eq!(blocks_gone(1, 6, 4, 10), 1..1); // positions 1..7 dropped: block 1 keeps 7
        assert_eq!(blocks_gone(1, 7, 4, 10), 1..2); // 1..8: block 1 (4..8) all gone
        assert_eq!(blocks_gone(0, 8, 4, 10), 0..2);
    }

    #[test]
    fn a_block_shared_with_a_sink_stays() {
        // 5 sinks in blocks of 4: block 1 holds sink 4.
        assert_eq!(blocks_gone(5, 20, 4, 10), 2..6);
        // Exactly a block of sinks: block 1 is the first that can go.
        assert_eq!(blocks_gone(4, 4, 4, 10), 1..2);
    }

    #[test]
    fn only_blocks_in_the_table_can_go() {
        // 3 blocks in the table, the dropped run would reach block 5.
        assert_eq!(blocks_gone(0, 24, 4, 3), 0..3);
        // Nothing dropped, nothing gone, even with sinks beyond the table.
        assert_eq!(blocks_gone(9, 0, 4, 2), 3..3);
    }

    #[test]
    fn blocks_gone_match_the_positions() {
        for bs in 1..6usize {
            for sinks in 0..7usize {
                for evicted in 0..20 {
                    let len = sinks + evicted + 1 + (evicted % 5);
                    let n_blocks = len.div_ceil(bs);
                    let gone: Vec<usize> = blocks_gone(sinks, evicted, bs, n_blocks).collect();
                    let held = held_brute(len, sinks, evicted, bs);
                    let expected: Vec<usize> =
                        (0..n_blocks).filter(|b| !held.contains(b)).collect();
                    assert_eq!(
                        gone, expected,
                        "bs {bs}, sinks {sinks}, evicted {evicted}, len {len}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_window_never_holds_more_than_max_blocks() {
        for bs in 1..7 {
            for window in 1..14 {
                for sinks in 0..window {
                    let mut most = 0;
                    // Every length a sequence can reach, one token at a time: before each
                    // token the oldest recent rows go until it fits the window.
                    for len in 1..80usize {
                        let evicted = len.saturating_sub(window);
                        most = most.max(held_brute(len, sinks, evicted, bs).len());
                    }
                    assert!(
                        most <= max_blocks(window, sinks, bs),
                        "window {window}, sinks {sinks}, bs {bs}: held {most} > {}",
                        max_blocks(window, sinks, bs)
                    );
                    // ... and the bound is not loose by more than one block.
                    assert!(
                        most + 1 >= max_blocks(window, sinks, bs),
                        "window {window}, sinks {sinks}, bs {bs}: held at most {most}"
                    );
                }
            }
        }
    }
}
