//! # Exercise 29 — rolling a paged cache back past rejected drafts
//!
//! A speculative round writes K and V for every drafted token, then keeps only the
//! accepted ones (exercise 27). On a contiguous cache, rolling back is `len = kept`. On
//! a paged cache (exercise 18) the sequence also holds *blocks* for the rejected
//! positions, and those must go back to the pool, or every round leaks up to `k`
//! positions' worth of blocks and a pool sized for the request runs dry.
//!
//! Blocks can be *shared*: a forked sequence (parallel sampling, beam search) or a
//! prefix-cache hit (exercise 20) holds the same block as another sequence, and each
//! block has a *reference count*, the number of block tables holding it. Giving a block
//! back means dropping this sequence's reference; the block is free only when nobody
//! holds it. And a sequence that writes into a block someone else also holds must first
//! copy it (*copy-on-write*), or it would overwrite the other sequence's K and V.
//!
//! kvlab: `PagedCache::truncate_seq` and `prepare_seq` in `src/cache/paged/mod.rs`, book
//! chapters "Paged attention" and "Speculative decoding".

/// Given: a pool of blocks with reference counts and a free list.
pub struct Pool {
    pub block_size: usize,
    /// `ref_counts[b]`: how many block tables hold block `b`.
    pub ref_counts: Vec<u32>,
    /// Blocks nobody holds; `pop` takes the next one.
    pub free: Vec<usize>,
}

/// Given: one sequence's block table and length.
#[derive(Debug, Clone, Default)]
pub struct Seq {
    /// `blocks[i]` holds positions `i * block_size..(i + 1) * block_size`.
    pub blocks: Vec<usize>,
    pub len: usize,
}

impl Pool {
    /// Given.
    pub fn new(n_blocks: usize, block_size: usize) -> Pool {
        Pool {
            block_size,
            ref_counts: vec![0; n_blocks],
            free: (0..n_blocks).rev().collect(),
        }
    }

    /// Given: `n` more positions for `seq`, a block taken at each boundary crossed.
    pub fn append(&mut self, seq: &mut Seq, n: usize) {
        let new_len = seq.len + n;
        while seq.blocks.len() * self.block_size < new_len {
            let b = self.free.pop().expect("pool exhausted");
            self.ref_counts[b] = 1;
            seq.blocks.push(b);
        }
        seq.len = new_len;
    }

    /// Given: a second sequence sharing every block of `seq`.
    pub fn fork(&mut self, seq: &Seq) -> Seq {
        for &b in &seq.blocks {
            self.ref_counts[b] += 1;
        }
        seq.clone()
    }

    /// Given: this sequence lets go of block `b`.
    pub fn release(&mut self, b: usize) {
        self.ref_counts[b] -= 1;
        if self.ref_counts[b] == 0 {
            self.free.push(b);
        }
    }

    /// Forgets positions `new_len..` of `seq` and gives back the blocks only they used.
    pub fn truncate(&mut self, seq: &mut Seq, new_len: usize) {
        // TODO: Questions:
        // - After the rollback the sequence holds `new_len` positions: how many blocks does
        //   that take? A block that still holds position `new_len - 1` and rejected rows
        //   after it: keep it or give it back?
        // - `new_len` beyond the current length: what is there to do?
        // - The block you give back is also in another sequence's table: may it go on the
        //   free list now? Which given function knows?
        let _ = (seq, new_len);
    }

    /// Before `seq` writes its next position: must it copy its last block first?
    pub fn needs_copy_on_write(&self, seq: &Seq) -> bool {
        // TODO: Questions:
        // - The sequence's length is a multiple of the block size: which block does the
        //   next position go into?
        // - Otherwise it goes into the last block. When is writing there safe, judging by
        //   the block's reference count?
        let _ = seq;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejected_drafts_give_their_blocks_back() {
        let mut pool = Pool::new(8, 4);
        let mut seq = Seq::default();
        pool.append(&mut seq, 10); // 3 blocks: 4 + 4 + 2
        pool.append(&mut seq, 5); // drafts: 15 positions, 4 blocks
        assert_eq!(seq.blocks.len(), 4);
        pool.truncate(&mut seq, 11); // 1 draft accepted
        assert_eq!(seq.len, 11);
        assert_eq!(seq.blocks.len(), 3, "positions 8..11 still need block 2");
        assert_eq!(pool.free.len(), 5);
        pool.truncate(&mut seq, 8); // to a block boundary: block 2 goes
        assert_eq!(seq.blocks.len(), 2);
        assert_eq!(pool.free.len(), 6);
    }

    #[test]
    fn a_partly_kept_block_stays() {
        let mut pool = Pool::new(8, 4);
        let mut seq = Seq::default();
        pool.append(&mut seq, 8);
        pool.truncate(&mut seq, 5);
        assert_eq!(seq.blocks.len(), 2, "position 4 lives in block 1");
        pool.truncate(&mut seq, 1);
        assert_eq!(seq.blocks.len(), 1);
        pool.truncate(&mut seq, 0);
        assert!(seq.blocks.is_empty());
        assert_eq!(pool.free.len(), 8);
        assert!(pool.ref_counts.iter().all(|&r| r == 0));
    }

    #[test]
    fn truncating_past_the_end_changes_nothing() {
        let mut pool = Pool::new(4, 4);
        let mut seq = Seq::default();
        pool.append(&mut seq, 6);
        pool.truncate(&mut seq, 6);
        pool.truncate(&mut seq, 9);
        assert_eq!((seq.len, seq.blocks.len(), pool.free.len()), (6, 2, 2));
    }

    #[test]
    fn a_shared_block_is_released_never_freed_from_under_its_other_holder() {
        let mut pool = Pool::new(8, 4);
        let mut parent = Seq::default();
        pool.append(&mut parent, 8); // blocks 0 and 1, full
        let mut child = pool.fork(&parent);
        pool.append(&mut child, 3); // child's own block 2
        pool.truncate(&mut child, 2); // the child rolls back into shared block 0
        assert_eq!(child.blocks, vec![parent.blocks[0]]);
        assert_eq!(pool.ref_counts[parent.blocks[0]], 2);
        assert_eq!(
            pool.ref_counts[parent.blocks[1]], 1,
            "the parent still holds it"
        );
        assert!(!pool.free.contains(&parent.blocks[1]));
        assert_eq!(pool.free.len(), 6, "only the child's own block came back");
        // The child's next write goes into block 0, which the parent reads: copy first.
        assert!(pool.needs_copy_on_write(&child));
        assert!(
            !pool.needs_copy_on_write(&parent),
            "the parent is at a boundary"
        );
    }

    #[test]
    fn a_private_partial_block_is_written_in_place() {
        let mut pool = Pool::new(8, 4);
        let mut seq = Seq::default();
        pool.append(&mut seq, 7);
        pool.truncate(&mut seq, 6);
        assert!(!pool.needs_copy_on_write(&seq));
        let other = pool.fork(&seq);
        assert!(pool.needs_copy_on_write(&seq));
        assert!(pool.needs_copy_on_write(&other));
    }
}
