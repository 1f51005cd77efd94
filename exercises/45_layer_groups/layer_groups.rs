//! # Exercise 45 — a block table per layer group
//!
//! Gemma 3's local layers read only the last `window` positions; its global layers read
//! them all (book: "A model trained with a sliding window", section "A block table per
//! layer group"). In one block table per sequence, a block holds `block_size` positions
//! of *every* layer, so it can go back to the pool only when no layer needs it: never,
//! since the global layers need everything. vLLM's hybrid KV cache manager gives each
//! *layer group* its own table instead:
//!
//! - the layers of one kind (global, or local with one window) are cut into groups of
//!   `group_size` layers, the greatest common divisor of the kinds' layer counts, so that
//!   every group is full and every block holds the same bytes (one pool serves them all);
//! - global groups come first, then each kind of local layer, each in layer order;
//! - a global group's table keeps a block for every `block_size` positions; a local
//!   group's keeps only the blocks holding a position the newest query sees (itself and
//!   the `window - 1` before it): the others went back to the pool.
//!
//! ```text
//! Gemma 3 270M (pattern of 6: layers 5, 11, 17 global; window 512)
//! group size gcd(3, 15) = 3: [5, 11, 17] [0, 1, 2] [3, 4, 6] [7, 8, 9] [10, 12, 13] [14, 15, 16]
//! ```
//!
//! kvlab: `src/cache/paged/groups.rs` (`LayerGroups::of`), `src/cache/paged/retention.rs`
//! (`Retention::peak_blocks`, the window's blocks), `src/lab/capacity.rs` (`paged_fit`).

/// The layer groups of a model whose layer `l` has window `windows[l]` (`None`: a global
/// layer): global groups first, then the local layers by window size (smallest first),
/// each group `group_size` layers in layer order.
pub fn layer_groups(windows: &[Option<usize>]) -> Vec<Vec<usize>> {
    // TODO: Questions:
    // - What are the kinds of layer (global, and one kind per window size), and in what
    //   order do their groups come?
    // - How many layers does each kind have, and what is the largest group size that
    //   divides every one of those counts?
    // - Which layers go in each group, and in what order?
    let _ = windows;
    Vec::new()
}

fn gcd(a: usize, b: usize) -> usize {
    // TODO: Euclid: the divisor of `a` and `b` is the divisor of `b` and `a % b`.
    let _ = (a, b);
    1
}

/// Blocks one table holds while the token at position `pos` is decoded (its own row
/// written): every block of `0..=pos` for a global group (`window` `None`), the blocks
/// holding `pos + 1 - window ..= pos` for a local one.
pub fn table_blocks(pos: usize, window: Option<usize>, block_size: usize) -> usize {
    // TODO: Questions:
    // - Which positions does the query at `pos` read in a global layer? In a local layer
    //   with window `w` (itself included)?
    // - Which block holds the first of them, which the last, and how many blocks lie
    //   between, both ends included?
    let _ = (pos, window, block_size);
    0
}

/// Blocks a sequence holds in all its tables while the token at `pos` is decoded, for a
/// model whose layer `l` has window `windows[l]`.
pub fn sequence_blocks(pos: usize, windows: &[Option<usize>], block_size: usize) -> usize {
    // TODO: one table per layer group (not per layer): what does each group's table hold?
    let _ = (pos, windows, block_size);
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gemma 3's pattern: every sixth layer global, the others local with `window`.
    fn pattern(n_layers: usize, window: usize) -> Vec<Option<usize>> {
        (0..n_layers)
            .map(|l| ((l + 1) % 6 != 0).then_some(window))
            .collect()
    }

    #[test]
    fn gemma_3_270m_has_one_global_group_and_five_local_ones() {
        let groups = layer_groups(&pattern(18, 512));
        assert_eq!(
            groups,
            vec![
                vec![5, 11, 17],
                vec![0, 1, 2],
                vec![3, 4, 6],
                vec![7, 8, 9],
                vec![10, 12, 13],
                vec![14, 15, 16]
            ]
        );
        // A model without local layers: one group of every layer, one table.
        assert_eq!(layer_groups(&[None; 4]), vec![vec![0, 1, 2, 3]]);
    }

    #[test]
    fn the_group_size_divides_every_kind() {
        // 4 global and 6 local layers: groups of 2, not of 4 (6 is not a multiple of 4).
        let windows: Vec<Option<usize>> = (0..10).map(|l| (l >= 4).then_some(8)).collect();
        let groups = layer_groups(&windows);
        assert!(groups.iter().all(|g| g.len() == 2), "{groups:?}");
        assert_eq!(groups[0], vec![0, 1]);
        assert_eq!(groups.len(), 5);
        // Two window sizes are two kinds: the smaller window's groups come first.
        let windows = [Some(16), None, Some(4), Some(16), None, Some(4)];
        assert_eq!(
            layer_groups(&windows),
            vec![vec![1, 4], vec![2, 5], vec![0, 3]]
        );
    }

    #[test]
    fn a_local_table_holds_the_blocks_its_newest_query_sees() {
        // Window 8, blocks of 4: the query at 92 sees 85..=92, blocks 21, 22, 23.
        assert_eq!(table_blocks(92, Some(8), 4), 3);
        // At 95 it sees 88..=95: two whole blocks.
        assert_eq!(table_blocks(95, Some(8), 4), 2);
        // A global table holds every block so far.
        assert_eq!(table_blocks(95, None, 4), 24);
        // Early on, a local table holds everything, as a global one does.
        assert_eq!(table_blocks(5, Some(8), 4), 2);
        for bs in 1..7 {
            for w in 1..12 {
                for pos in 0..60 {
                    let mut blocks: Vec<usize> =
                        (0..=pos).filter(|&j| pos - j < w).map(|j| j / bs).collect();
                    blocks.dedup();
                    assert_eq!(
                        table_blocks(pos, Some(w), bs),
                        blocks.len(),
                        "{pos} {w} {bs}"
                    );
                }
            }
        }
    }

    #[test]
    fn what_tests_gemma_paths_counts() {
        // `local_tables_hold_the_window_and_the_global_table_everything`: five local
        // layers (window 8) and one global, 96 positions in blocks of 4, one layer a block.
        let windows = [Some(8), Some(8), Some(8), Some(8), Some(8), None];
        let peak = (0..96).map(|p| sequence_blocks(p, &windows, 4)).max();
        assert_eq!(peak, Some(24 + 5 * 3));
        assert_eq!(sequence_blocks(95, &windows, 4), 24 + 5 * 2);
    }

    #[test]
    fn gemma_3_at_32k_holds_the_formulas_share() {
        // 32,768 positions in blocks of 16: the global group's 2,048 blocks, and 32 for
        // each of the five local groups. A block holds 3 layers; one table of every layer
        // would hold 2,048 blocks of 18.
        let windows = pattern(18, 512);
        let blocks = sequence_blocks(32_767, &windows, 16);
        assert_eq!(blocks, 2_048 + 5 * 32);
        let share = (blocks * 3) as f64 / (2_048 * 18) as f64;
        let formula = (3.0 * 32_768.0 + 15.0 * 512.0) / (18.0 * 32_768.0);
        assert!((share - formula).abs() < 1e-12, "{share} vs {formula}");
    }
}
