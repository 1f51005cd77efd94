//! # Exercise 23 — a paged pool of int8 blocks: layout × element
//!
//! A KV cache is three choices: a **layout** (where a position's row lives: one
//! contiguous buffer, or blocks from a pool through a block table, exercise 18), an
//! **element** (what each stored number is: f32, or int8 codes with a scale, exercise 22)
//! and a **retention** (every position, or a window). The first two compose when each
//! position's row carries its own scale: the row can then sit in any slot of any block,
//! and the pool needs only room for a scale beside each slot's codes.
//!
//! ```text
//! slots:   block 0          block 1          block 2        (block_size = 2)
//!          [s0   | s1  ]    [s2   | s3  ]    [s4   | s5  ]
//! codes:   [row] [row]      [row] [row]      [row] [row]     i8, `row` per slot
//! scales:  [  1] [  1]      [  1] [  1]      [  1] [  1]     f32, one per slot
//! seq A:   table [2, 0]  →  position 0 in slot 4, 1 in 5, 2 in slot 0, 3 in 1
//! ```
//!
//! A shared block (a fork) is copied before it is written (copy-on-write, §4.4 of
//! PagedAttention): the copy must carry everything that decodes a row, codes *and* scales.
//!
//! kvlab: `src/cache/element.rs` (`KvElement`), `src/cache/paged/block_pool.rs`
//! (`Memory::PerToken`, `copy_rows`), `src/cache/quant/rows.rs` (`PagedQuantRows`);
//! `kvlab generate --cache paged --kv int8`, book chapter "KV cache quantization".

/// Given: symmetric int8 codes of `x` and their scale (exercise 22's answer).
pub fn quantize(x: &[f32]) -> (Vec<i8>, f32) {
    let scale = x.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
    let codes = x
        .iter()
        .map(|&v| {
            let level = if scale > 0.0 {
                (v / scale).round()
            } else {
                0.0
            };
            level.clamp(-127.0, 127.0) as i8
        })
        .collect();
    (codes, scale)
}

/// Given: a pool of `n_blocks` blocks of `block_size` slots, each slot one row of `row`
/// int8 codes and one f32 scale.
pub struct Int8Pool {
    /// `[n_blocks * block_size, row]`
    pub codes: Vec<i8>,
    /// `[n_blocks * block_size]`: one scale per slot (per position), not per block.
    pub scales: Vec<f32>,
    pub block_size: usize,
    pub row: usize,
}

impl Int8Pool {
    /// Given: the whole pool, zeroed.
    pub fn new(n_blocks: usize, block_size: usize, row: usize) -> Self {
        Int8Pool {
            codes: vec![0; n_blocks * block_size * row],
            scales: vec![0.0; n_blocks * block_size],
            block_size,
            row,
        }
    }

    /// The slot that holds position `pos` of the sequence whose block table is `table`.
    pub fn slot(&self, table: &[usize], pos: usize) -> usize {
        table[pos / self.block_size] * self.block_size + pos % self.block_size
    }

    /// Quantizes `x` (`[row]`) into position `pos` of the sequence with `table`.
    pub fn write(&mut self, table: &[usize], pos: usize, x: &[f32]) {
        let slot = self.slot(table, pos);
        let (codes, scale) = quantize(x);
        self.codes[slot * self.row..(slot + 1) * self.row].copy_from_slice(&codes);
        self.scales[slot] = scale;
    }

    /// Position `pos` of the sequence with `table`, dequantized: `[row]`.
    pub fn read(&self, table: &[usize], pos: usize) -> Vec<f32> {
        let slot = self.slot(table, pos);
        let scale = self.scales[slot];
        self.codes[slot * self.row..(slot + 1) * self.row]
            .iter()
            .map(|&q| q as f32 * scale)
            .collect()
    }

    /// Copy-on-write: the first `rows` positions of block `src` into block `dst`.
    pub fn copy_block(&mut self, src: usize, dst: usize, rows: usize) {
        let (from, to) = (src * self.block_size, dst * self.block_size);
        self.codes
            .copy_within(from * self.row..(from + rows) * self.row, to * self.row);
        self.scales.copy_within(from..from + rows, to);
    }

    /// Bytes of one block: every slot's codes and its f32 scale.
    pub fn block_bytes(&self) -> usize {
        self.block_size * (self.row + 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pos: usize, tag: f32) -> Vec<f32> {
        // Rows of very different sizes: one scale per block would crush the small ones.
        let size = if pos.is_multiple_of(2) { 100.0 } else { 0.01 };
        vec![size * (1.0 + tag), -size * 0.5, size * (0.25 + tag)]
    }

    /// What a contiguous int8 cache reads back for `x`: the same codes, the same scale.
    fn contiguous(x: &[f32]) -> Vec<f32> {
        let (codes, scale) = quantize(x);
        codes.iter().map(|&q| q as f32 * scale).collect()
    }

    #[test]
    fn positions_go_through_the_table_to_their_slot() {
        let pool = Int8Pool::new(4, 2, 3);
        let table = [2, 0, 3];
        let slots: Vec<usize> = (0..6).map(|pos| pool.slot(&table, pos)).collect();
        assert_eq!(slots, [4, 5, 0, 1, 6, 7]);
    }

    #[test]
    fn a_paged_row_reads_back_what_a_contiguous_int8_row_does() {
        let mut pool = Int8Pool::new(4, 2, 3);
        let table = [3, 1, 0];
        for pos in 0..6 {
            pool.write(&table, pos, &row(pos, 0.1));
        }
        for pos in 0..6 {
            let got: Vec<u32> = pool.read(&table, pos).iter().map(|x| x.to_bits()).collect();
            let want: Vec<u32> = contiguous(&row(pos, 0.1))
                .iter()
                .map(|x| x.to_bits())
                .collect();
            assert_eq!(got, want, "position {pos}");
        }
    }

    #[test]
    fn copy_on_write_carries_codes_and_scales() {
        let mut pool = Int8Pool::new(4, 2, 3);
        let parent = [0, 1];
        for pos in 0..3 {
            pool.write(&parent, pos, &row(pos, 0.3));
        }
        // The fork shares block 0 and copies the partial block 1 into block 2.
        pool.copy_block(1, 2, 1);
        let child = [0, 2];
        pool.write(&child, 3, &row(3, 0.7));
        for pos in 0..3 {
            assert_eq!(
                pool.read(&child, pos),
                contiguous(&row(pos, 0.3)),
                "position {pos}"
            );
        }
        assert_eq!(pool.read(&child, 3), contiguous(&row(3, 0.7)));
        // The parent's block 1 is untouched by the child's write.
        assert_eq!(pool.read(&parent, 2), contiguous(&row(2, 0.3)));
        assert_eq!(
            pool.scales[3], 0.0,
            "the parent's second slot of block 1 was never written"
        );
    }

    #[test]
    fn an_int8_block_is_about_a_quarter_of_an_f32_block() {
        // SmolLM2's one-layer, one-side row: 3 KV heads of 64 would be [192] with 3 scales;
        // here one scale per slot: a row of 64 codes and its scale.
        let pool = Int8Pool::new(1, 16, 64);
        assert_eq!(pool.block_bytes(), 16 * 68);
        let f32_block = 16 * 64 * 4;
        assert!(pool.block_bytes() * 3 < f32_block && pool.block_bytes() * 4 > f32_block);
    }
}
