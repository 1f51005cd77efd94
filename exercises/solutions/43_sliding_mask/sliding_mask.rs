//! # Exercise 43 — a sliding window per query (滑动窗口), with attention sinks
//!
//! Exercises 24 and 25 kept a window by *evicting*: before each forward pass the oldest
//! recent rows leave the cache, and every query of the pass attends to whatever is left.
//! What a token sees then depends on how its prompt was cut into passes: with a window of
//! 8 and no sinks, a prompt of 16 prefilled in two passes of 8 evicts all 8 rows before
//! the second pass, so token 8 sees only itself; fed one token at a time, it sees
//! positions 1..=8. A serving engine's scheduler cuts prompts into chunks as the load
//! allows, and a prefix cache skips a cached prefix's pass altogether, so under that rule
//! the same prompt can give different bits from one run to the next.
//!
//! A window *per query* names positions only. The query at position `pos` sees the first
//! `sinks` positions of the text (StreamingLLM's attention sinks) and the last
//! `size - sinks` positions up to and including its own:
//!
//! ```text
//! pos sees   0..sinks   and   pos + 1 - (size - sinks) ..= pos        (size in all)
//! ```
//!
//! This is the mask that Mistral 7B and Gemma 3's local layers were trained with
//! (`sinks = 0`). Early on, while `pos < size`, the window still reaches back to the
//! sinks and the query sees every position `0..=pos`. The rule never mentions a pass, so
//! it gives the same answer under any cut: a serving engine and a prefix cache can use it
//! and keep bitwise-identical outputs.
//!
//! The cache still shrinks. A later query looks back no further than an earlier one, so
//! before a pass that starts at position `len`, a position in `sinks..recent_start(len)`
//! (`recent_start` of the pass's *first* query) is seen by no query of this pass nor any
//! later one. In a paged pool (exercise 25) every block wholly inside that run goes back
//! to the pool and leaves a hole in the table; a block that holds a sink never goes.
//!
//! kvlab: `src/mask.rs` (`Window::seen`), `src/cache/paged/retention.rs`
//! (`PagedCache::forget_plan`), book chapter "Eviction and sliding windows", section
//! "A window per query".

use std::ops::Range;

/// The positions the query at `pos` sees under a window of `size` positions, the first
/// `sinks` of them sinks (`sinks < size`), as two runs: the sinks `0..sink_end` and the
/// recent positions `recent_start..=pos`. Returns `(sink_end, recent_start)`, never with
/// `sink_end > recent_start`; when the window still reaches the sinks they are equal and
/// the two runs are one, `0..=pos`.
pub fn seen(pos: usize, size: usize, sinks: usize) -> (usize, usize) {
    // The recent run is the last `size - sinks` positions up to `pos` itself; the sinks
    // stop where it starts, so that no position is counted twice.
    let recent_start = (pos + 1).saturating_sub(size - sinks);
    (sinks.min(recent_start), recent_start)
}

/// Before a pass whose first query is at position `len`, the table indices of the blocks
/// (of `block_size` positions, `n_blocks` in the table) that no query from `len` on will
/// see: wholly inside `sinks..recent_start` of the query at `len`. Never a backwards range.
pub fn blocks_to_forget(
    len: usize,
    size: usize,
    sinks: usize,
    block_size: usize,
    n_blocks: usize,
) -> Range<usize> {
    // The first block with no sink in it, and the block holding the first position the
    // pass's first query sees (later queries see even less far back).
    let first = sinks.div_ceil(block_size);
    let end = (seen(len, size, sinks).1 / block_size).min(n_blocks);
    first..end.max(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, position by position: `j` is one of the first `sinks` positions,
    /// or one of the last `size - sinks` up to `pos`.
    fn sees_brute(pos: usize, j: usize, size: usize, sinks: usize) -> bool {
        j <= pos && (j < sinks || pos - j < size - sinks)
    }

    /// The positions `seen` says the query at `pos` sees, in order.
    fn seen_list(pos: usize, size: usize, sinks: usize) -> Vec<usize> {
        let (sink_end, recent_start) = seen(pos, size, sinks);
        (0..sink_end).chain(recent_start..=pos).collect()
    }

    #[test]
    fn a_query_sees_the_sinks_and_its_recent_positions() {
        // A window of 5 with 2 sinks: the query at 9 sees 0, 1 and the last 3.
        assert_eq!(seen(9, 5, 2), (2, 7));
        assert_eq!(seen_list(9, 5, 2), [0, 1, 7, 8, 9]);
        assert_eq!(seen(10, 5, 2), (2, 8));
        // No sinks: a plain window of 3 (a local layer of Gemma 3, smaller).
        assert_eq!(seen(9, 3, 0), (0, 7));
        assert_eq!(seen_list(9, 3, 0), [7, 8, 9]);
    }

    #[test]
    fn early_queries_see_everything() {
        // While the window still reaches back to the sinks, one run: 0..=pos.
        assert_eq!(seen(0, 5, 2), (0, 0));
        assert_eq!(seen(3, 5, 2), (1, 1));
        assert_eq!(seen_list(3, 5, 2), [0, 1, 2, 3]);
        assert_eq!(seen(4, 5, 2), (2, 2)); // the first query with a full window
        assert_eq!(seen_list(4, 5, 2), [0, 1, 2, 3, 4]);
        assert_eq!(seen(5, 5, 2), (2, 3)); // the first with a gap: position 2 is gone
    }

    #[test]
    fn every_query_sees_its_window_and_nothing_else() {
        for size in 1..9 {
            for sinks in 0..size {
                for pos in 0..40 {
                    let (sink_end, recent_start) = seen(pos, size, sinks);
                    let at = format!("size {size}, sinks {sinks}, pos {pos}");
                    // Two runs, in order, never overlapping.
                    assert!(
                        sink_end <= recent_start,
                        "{at}: ({sink_end}, {recent_start})"
                    );
                    assert!(recent_start <= pos, "{at}: a query always sees itself");
                    let list = seen_list(pos, size, sinks);
                    assert_eq!(list.len(), size.min(pos + 1), "{at}: {list:?}");
                    let brute: Vec<usize> = (0..=pos)
                        .filter(|&j| sees_brute(pos, j, size, sinks))
                        .collect();
                    assert_eq!(list, brute, "{at}");
                }
            }
        }
    }

    #[test]
    fn the_first_block_to_go_holds_no_sink() {
        // Window 5, 2 sinks, blocks of 2. The pass starting at 10: its first query sees
        // 0, 1 and 8, 9, 10. Blocks 1..4 (positions 2..8) are seen by no one again.
        assert_eq!(blocks_to_forget(10, 5, 2, 2, 5), 1..4);
        // 3 sinks: block 1 holds sink 2, so it stays. The recent run of the query at 10
        // is 9, 10: block 4 (8, 9) still holds a seen position.
        assert_eq!(blocks_to_forget(10, 5, 3, 2, 5), 2..4);
        // Exactly a block of sinks, and blocks of 4.
        assert_eq!(blocks_to_forget(20, 6, 4, 4, 5), 1..4);
        // The pass starting at 11 (recent run 9..=11 with 2 sinks) frees nothing more
        // than the one at 10: block 4 holds 9.
        assert_eq!(blocks_to_forget(11, 5, 2, 2, 6), 1..4);
        assert_eq!(blocks_to_forget(12, 5, 2, 2, 6), 1..5);
    }

    #[test]
    fn early_on_nothing_goes() {
        // The window still reaches the sinks: empty, and never backwards.
        assert_eq!(blocks_to_forget(0, 5, 2, 2, 0), 1..1);
        assert_eq!(blocks_to_forget(3, 5, 2, 2, 2), 1..1);
        assert_eq!(blocks_to_forget(5, 5, 3, 2, 3), 2..2);
        // Sinks past the table's end: still not backwards.
        assert_eq!(blocks_to_forget(9, 10, 9, 4, 3), 3..3);
        // Only blocks in the table: a table of 2 blocks gives back block 1 at most.
        assert_eq!(blocks_to_forget(30, 4, 1, 2, 2), 1..2);
    }

    #[test]
    fn blocks_to_forget_match_the_positions() {
        for bs in 1..6usize {
            for size in 1..9usize {
                for sinks in 0..size {
                    for len in 0..40usize {
                        let held = len.div_ceil(bs);
                        for n_blocks in held.saturating_sub(2)..held + 2 {
                            let range = blocks_to_forget(len, size, sinks, bs, n_blocks);
                            let at = format!(
                                "len {len}, size {size}, sinks {sinks}, bs {bs}, n_blocks {n_blocks}"
                            );
                            assert!(range.start <= range.end, "{at}: {range:?} runs backwards");
                            // A block goes iff it holds no sink and no query from `len` on
                            // sees any of its positions (a query past `p + size` sees `p`
                            // only as a sink).
                            let expected: Vec<usize> = (0..n_blocks)
                                .filter(|&b| {
                                    (b * bs..(b + 1) * bs).all(|p| {
                                        p >= sinks
                                            && (len..len.max(p) + size)
                                                .all(|q| !sees_brute(q, p, size, sinks))
                                    })
                                })
                                .collect();
                            assert_eq!(range.collect::<Vec<_>>(), expected, "{at}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_forgotten_block_is_never_needed_again() {
        // A prompt prefilled in passes of uneven lengths, then decoded one token at a
        // time: before each pass the blocks to forget become holes, and every query of
        // the pass must find every position it sees in a block still held.
        for bs in 1..5usize {
            for size in 1..9usize {
                for sinks in 0..size {
                    let cuts = [3usize, 1, 7, 2, 5, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1];
                    let mut holes: Vec<bool> = Vec::new();
                    let mut len = 0;
                    for n in cuts {
                        let gone = blocks_to_forget(len, size, sinks, bs, holes.len());
                        for b in gone {
                            holes[b] = true;
                        }
                        holes.resize((len + n).div_ceil(bs), false);
                        for q in len..len + n {
                            for j in seen_list(q, size, sinks) {
                                assert!(
                                    !holes[j / bs],
                                    "size {size}, sinks {sinks}, bs {bs}: the query at {q} \
                                     sees {j}, in a block given back"
                                );
                            }
                        }
                        len += n;
                    }
                    // And the window did shrink the table once it had slid far enough.
                    if len >= sinks.div_ceil(bs) * bs + size + 2 * bs {
                        assert!(
                            holes.iter().any(|&h| h),
                            "size {size}, sinks {sinks}, bs {bs}"
                        );
                    }
                }
            }
        }
    }
}
