//! # Exercise 42 — the pool as a picture: who holds each block
//!
//! The live view (book: live-view.md) draws the engine's KV pool block by block: each
//! block coloured by the requests whose block tables hold it, shared prefix blocks
//! marked with their reference count, free blocks pale, and blocks *parked* in the
//! prefix cache (held by nobody, still named by their tokens, reused by the next prompt
//! that starts the same way, evicted least-recently-used first) hatched. The engine
//! never stores that picture: it keeps a block table per request (a list of pool block
//! numbers, §3.4 of the seed article, PagedAttention) and a reference count per block.
//! The picture is *derived* from the tables after every iteration (kvlab:
//! `Engine::snapshot`, `src/engine/snapshot.rs`).
//!
//! A block whose positions all left a sliding window is a **hole** in its table
//! ([`HOLE`]): the table keeps its place so that position `i` still lives in
//! `table[i / block_size]`, but the pool got the block back. A hole is not a block.
//!
//! Derive the picture, and the totals the page prints beside it. The test checks the
//! totals' promise too: every block is exactly one of used, free or parked.

/// A table entry that holds no block (its positions left the window).
pub const HOLE: usize = usize::MAX;

/// One block of the picture.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Block {
    /// Requests whose tables hold it, in the order the tables were given.
    pub owners: Vec<u64>,
    /// Parked in the prefix cache (held by nobody).
    pub parked: bool,
}

/// The totals beside the picture.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Held by at least one table.
    pub used: usize,
    /// Held by none, not parked.
    pub free: usize,
    pub parked: usize,
    /// Held by more than one table (a shared prefix).
    pub shared: usize,
}

/// The picture of a pool of `n_blocks` blocks from the requests' block `tables`
/// (`(request id, table)`) and the `parked` blocks.
pub fn picture(n_blocks: usize, tables: &[(u64, Vec<usize>)], parked: &[usize]) -> Vec<Block> {
    // TODO: Questions:
    // - Start from a picture of n_blocks empty blocks. Which entries of a table are
    //   blocks, and which are not?
    // - Walking the tables in the order given, what does each block entry add to its
    //   block?
    // - What do the parked blocks change?
    let _ = (tables, parked);
    vec![Block::default(); n_blocks]
}

/// The totals of a picture.
pub fn totals(picture: &[Block]) -> Totals {
    // TODO: Questions:
    // - A block's reference count is the number of tables holding it: where is that
    //   number in a `Block`?
    // - Which count is which: used, shared, parked, and what is left for free?
    let _ = picture;
    Totals::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_prefix_has_several_owners() {
        // Requests 3 and 7 share a two-block prompt prefix (blocks 0 and 1).
        let tables = vec![(3, vec![0, 1, 4]), (7, vec![0, 1, 2])];
        let p = picture(6, &tables, &[]);
        assert_eq!(p[0].owners, [3, 7]);
        assert_eq!(p[1].owners, [3, 7]);
        assert_eq!(p[2].owners, [7]);
        assert_eq!(p[4].owners, [3]);
        assert!(p[3].owners.is_empty() && p[5].owners.is_empty());
        let t = totals(&p);
        assert_eq!(
            t,
            Totals {
                used: 4,
                free: 2,
                parked: 0,
                shared: 2
            }
        );
    }

    #[test]
    fn holes_are_not_blocks() {
        // Request 1's window dropped its second and third blocks: the pool has them back.
        let tables = vec![(1, vec![5, HOLE, HOLE, 2, 3])];
        let p = picture(6, &tables, &[]);
        let owned: Vec<usize> = (0..6).filter(|&b| !p[b].owners.is_empty()).collect();
        assert_eq!(owned, [2, 3, 5]);
        assert_eq!(
            totals(&p),
            Totals {
                used: 3,
                free: 3,
                parked: 0,
                shared: 0
            }
        );
    }

    #[test]
    fn parked_blocks_are_neither_used_nor_free() {
        // A finished request's named prompt blocks wait in the prefix cache.
        let tables = vec![(9, vec![1, 2])];
        let p = picture(8, &tables, &[4, 5, 6]);
        assert!(p[4].parked && p[5].parked && p[6].parked);
        assert!(!p[1].parked && !p[0].parked);
        let t = totals(&p);
        assert_eq!(
            t,
            Totals {
                used: 2,
                free: 3,
                parked: 3,
                shared: 0
            }
        );
    }

    #[test]
    fn every_block_is_exactly_one_of_used_free_parked() {
        let tables = vec![
            (0, vec![0, 1, 2, 3]),
            (1, vec![0, 1, 6]),
            (2, vec![0, HOLE, 7]),
            (3, vec![]),
        ];
        let p = picture(12, &tables, &[8, 9]);
        let t = totals(&p);
        assert_eq!(t.used + t.free + t.parked, 12);
        assert_eq!(p[0].owners, [0, 1, 2]);
        assert_eq!(
            t,
            Totals {
                used: 6,
                free: 4,
                parked: 2,
                shared: 2
            }
        );
    }
}
