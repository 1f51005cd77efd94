//! # Exercise 18 — a block table: paged KV cache (PagedAttention)
//!
//! The seed article (§3.4): instead of one contiguous reservation of `prompt +
//! max_new_tokens` per request (§3.3), PagedAttention (Kwon et al. 2023) cuts the KV memory
//! into fixed-size *blocks* of `block_size` positions, like an operating system's pages. A
//! sequence takes a block only when it crosses into one, so it never wastes more than the
//! unused tail of its last block, and any free block fits any sequence.
//!
//! Each sequence keeps a *block table*: the list of blocks it holds, in order, like a
//! process's page table. The blocks need not be adjacent in the pool, or in order:
//! attention reads position `pos` through the table instead of at `pos * row` (kvlab:
//! `cache::rows::Paged`, `src/cache/paged/mod.rs`).
//!
//! This is one layer's pool with only keys, `[n_blocks, block_size, row]`; kvlab's has
//! every layer, and values too.

/// The pool has no free block left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfBlocks {
    pub n_blocks: usize,
}

/// Given: `n_blocks` blocks of `block_size` positions of `row` floats, and a free list.
pub struct BlockPool {
    /// `[n_blocks, block_size, row]`
    pub keys: Vec<f32>,
    pub n_blocks: usize,
    pub block_size: usize,
    pub row: usize,
    /// Free blocks; `pop` takes the next one.
    pub free: Vec<usize>,
}

/// Given: one sequence's block table and length.
#[derive(Default)]
pub struct Sequence {
    /// `table[i]` holds positions `i * block_size..(i + 1) * block_size`.
    pub table: Vec<usize>,
    pub len: usize,
}

impl BlockPool {
    /// Given: the whole pool, allocated once; block 0 is handed out first.
    pub fn new(n_blocks: usize, block_size: usize, row: usize) -> Self {
        BlockPool {
            keys: vec![0.0; n_blocks * block_size * row],
            n_blocks,
            block_size,
            row,
            free: (0..n_blocks).rev().collect(),
        }
    }

    /// Where position `pos` of `seq` lives: `(block, row within the block)`.
    pub fn locate(&self, seq: &Sequence, pos: usize) -> (usize, usize) {
        // TODO: which of the *sequence's* blocks holds `pos` (its first, its second, ...),
        // and which row inside that block? Which *pool* block is that, and who knows?
        let _ = (seq, pos);
        (0, 0)
    }

    /// The key of position `pos` of `seq`: `[row]`.
    pub fn key(&self, seq: &Sequence, pos: usize) -> &[f32] {
        let (block, r) = self.locate(seq, pos);
        let start = (block * self.block_size + r) * self.row;
        &self.keys[start..start + self.row]
    }

    /// Appends one key (`[row]`) to `seq`.
    pub fn append(&mut self, seq: &mut Sequence, key: &[f32]) -> Result<(), OutOfBlocks> {
        assert_eq!(key.len(), self.row, "a key is [row]");
        // TODO: Questions:
        // - At which values of `len` does the sequence need a new block? (An empty sequence
        //   has none yet; after `block_size` appends its first block is full.)
        // - If the pool has no free block, what must be unchanged when you return the error?
        // - Once there is room, where does position `len` live, and what is counted?
        let _ = seq;
        Ok(())
    }

    /// Given: a finished sequence gives its blocks back.
    pub fn release(&mut self, seq: &mut Sequence) {
        self.free.extend(seq.table.drain(..).rev());
        seq.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(pos: usize, tag: f32) -> Vec<f32> {
        vec![pos as f32 + tag, -(pos as f32) - tag]
    }

    #[test]
    fn locate_goes_through_the_table() {
        let pool = BlockPool::new(8, 4, 2);
        let seq = Sequence {
            table: vec![5, 2, 7],
            len: 12,
        };
        assert_eq!(pool.locate(&seq, 0), (5, 0));
        assert_eq!(pool.locate(&seq, 3), (5, 3));
        assert_eq!(pool.locate(&seq, 4), (2, 0));
        assert_eq!(pool.locate(&seq, 11), (7, 3));
    }

    #[test]
    fn blocks_are_taken_only_at_block_boundaries() {
        let mut pool = BlockPool::new(8, 4, 2);
        let mut seq = Sequence::default();
        let mut blocks = Vec::new();
        for pos in 0..9 {
            pool.append(&mut seq, &key(pos, 0.5)).unwrap();
            blocks.push(seq.table.len());
        }
        assert_eq!(blocks, [1, 1, 1, 1, 2, 2, 2, 2, 3]);
        assert_eq!(seq.table, [0, 1, 2]);
        assert_eq!(seq.len, 9);
    }

    #[test]
    fn two_sequences_interleave_and_read_back_their_own_keys() {
        let mut pool = BlockPool::new(8, 2, 2);
        let (mut a, mut b) = (Sequence::default(), Sequence::default());
        for pos in 0..5 {
            pool.append(&mut a, &key(pos, 0.25)).unwrap();
            pool.append(&mut b, &key(pos, 0.75)).unwrap();
        }
        // Their blocks alternate in the pool, but each table keeps its own order.
        assert_eq!(a.table, [0, 2, 4]);
        assert_eq!(b.table, [1, 3, 5]);
        for pos in 0..5 {
            assert_eq!(pool.key(&a, pos), &key(pos, 0.25)[..]);
            assert_eq!(pool.key(&b, pos), &key(pos, 0.75)[..]);
        }
    }

    #[test]
    fn a_full_pool_is_an_error_and_changes_nothing() {
        let mut pool = BlockPool::new(2, 2, 2);
        let mut a = Sequence::default();
        for pos in 0..4 {
            pool.append(&mut a, &key(pos, 0.0)).unwrap();
        }
        let err = pool.append(&mut a, &key(4, 0.0)).unwrap_err();
        assert_eq!(err, OutOfBlocks { n_blocks: 2 });
        assert_eq!((a.len, a.table.len()), (4, 2));
        // Freed blocks are reused by the next sequence.
        pool.release(&mut a);
        let mut b = Sequence::default();
        pool.append(&mut b, &key(9, 0.0)).unwrap();
        assert_eq!(pool.key(&b, 0), &key(9, 0.0)[..]);
        assert_eq!(pool.free.len(), 1);
    }
}
