//! A sequence's stored rows, out of one pool and into another: what a KV transfer carries
//! between a prefill engine and a decode engine (`engine/transfer.rs`; book: serving.md,
//! "Disaggregation"). A row travels as the pool stores it, whatever the element: f32, or
//! int8/int4 codes with their scales (Mooncake and LMCache ship KV blocks as stored, too).
//! So an int8 pool ships a quarter of the f32 bytes, and the receiving pool holds the
//! sender's bits: nothing is quantized twice.

use super::{PagedCache, SeqId, HOLE};
use crate::error::{Error, Result};

impl PagedCache {
    /// Bytes of one position of one layer as this pool stores it, K then V.
    pub fn row_bytes(&self) -> usize {
        self.pool.row_bytes()
    }

    // ANCHOR: export_rows
    /// Positions `0..len` of `id` in layer `layer`, as stored, in position order:
    /// `[len, row_bytes]`, read through the layer group's block table. A position a local
    /// layer's window already gave back (a hole in its table) travels as a row of zero
    /// bytes: the receiver's queries are masked by the same window and never read it,
    /// and its next pass gives the block back.
    pub fn export_rows(&self, id: SeqId, layer: usize, len: usize) -> Result<Vec<u8>> {
        let seq = self.get(id)?;
        if len > seq.len || seq.evicted > 0 {
            return Err(Error::InvalidArgument(format!(
                "export of {len} positions from a sequence holding {} ({} dropped by a window): a transfer carries every position of a prompt",
                seq.len, seq.evicted
            )));
        }
        let (bs, row_bytes) = (self.pool.block_size(), self.pool.row_bytes());
        let mut out =
            crate::limits::try_vec(len.saturating_mul(row_bytes), "a KV transfer's rows")?;
        let (g, slot) = self.groups.place(layer);
        for pos in 0..len {
            match seq.tables[g].blocks[pos / bs] {
                HOLE => out.resize(out.len() + row_bytes, 0),
                block => self.pool.row_image(slot, block, pos % bs, &mut out),
            }
        }
        Ok(out)
    }
    // ANCHOR_END: export_rows

    // ANCHOR: import_rows
    /// Writes `rows` (`[n, row_bytes]`, what [`PagedCache::export_rows`] gave from a pool of
    /// the same element) as layer `layer` of the `n` positions `id` has prepared (after
    /// `prepare`, before `advance`), block by block.
    pub fn import_rows(&mut self, id: SeqId, layer: usize, rows: &[u8]) -> Result<()> {
        let (bs, row_bytes) = (self.pool.block_size(), self.pool.row_bytes());
        if !rows.len().is_multiple_of(row_bytes) {
            return Err(Error::InvalidArgument(format!(
                "{} bytes of rows are not whole rows of {row_bytes} bytes: the sending pool stores another element",
                rows.len()
            )));
        }
        let seq = self.get(id)?;
        let n = rows.len() / row_bytes;
        let (g, slot) = self.groups.place(layer);
        let blocks = &seq.tables[g].blocks;
        if seq.len + n > blocks.len() * bs {
            return Err(Error::Internal(format!(
                "importing {n} positions after {} into {} blocks: call prepare first",
                seq.len,
                blocks.len()
            )));
        }
        let (len, blocks) = (seq.len, blocks.clone());
        for (i, row) in rows.chunks_exact(row_bytes).enumerate() {
            let pos = len + i;
            let block = blocks[pos / bs];
            if self.prefix.as_ref().is_some_and(|p| p.is_named(block)) {
                return Err(Error::Internal(format!(
                    "block {block} is named in the prefix cache and must not be written"
                )));
            }
            self.pool.write_row_image(slot, block, pos % bs, row)?;
        }
        Ok(())
    }
    // ANCHOR_END: import_rows
}
