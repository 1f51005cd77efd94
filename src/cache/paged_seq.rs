//! One sequence of a [`PagedCache`], as the model sees it: the [`KvStore`] verbs on a
//! block table (PagedAttention, Kwon et al. 2023, §4.3).
//!
//! - `prepare` takes a block at each block boundary the new tokens cross, and copies the
//!   block about to be written if another table shares it or the prefix cache names it
//!   (copy-on-write, §4.4): all or nothing, so a full pool changes nothing;
//! - `write` puts each new row in row `pos % block_size` of block `table[pos / block_size]`;
//! - `read` hands attention the table's blocks ([`crate::attention::Paged`]);
//! - `advance` names the blocks that just became full (prefix caching);
//! - `truncate` gives back the blocks past the new end.

use super::block_pool::BlockId;
use super::paged::{unknown, PagedCache, SeqId, Sequence};
use super::KvStore;
use crate::attention::{KvView, Paged};
use crate::config::Config;
use crate::error::{Error, Result};
use std::borrow::BorrowMut;

// ANCHOR: paged_seq
/// One sequence of a [`PagedCache`] behind the [`KvStore`] verbs. `C` is
/// `&mut PagedCache` when many sequences share the pool (`cache.seq(id)`), or an owned
/// `PagedCache` holding one sequence ([`PagedSeq::single`], what `--cache paged` uses).
pub struct PagedSeq<C> {
    pub(super) cache: C,
    pub(super) id: SeqId,
}
// ANCHOR_END: paged_seq

impl PagedSeq<PagedCache> {
    /// A pool of `n_blocks` blocks with one sequence in it.
    pub fn single(
        config: &Config,
        block_size: usize,
        n_blocks: usize,
        prefix_caching: bool,
    ) -> Result<PagedSeq<PagedCache>> {
        let mut cache = PagedCache::new(config, block_size, n_blocks, prefix_caching)?;
        let id = cache.add_sequence();
        Ok(PagedSeq { cache, id })
    }
}

impl<C: BorrowMut<PagedCache>> PagedSeq<C> {
    pub fn id(&self) -> SeqId {
        self.id
    }
    pub fn cache(&self) -> &PagedCache {
        self.cache.borrow()
    }
    fn seq(&self) -> &Sequence {
        &self.cache.borrow().seqs[&self.id]
    }
}

impl<C: BorrowMut<PagedCache>> KvStore for PagedSeq<C> {
    fn len(&self) -> usize {
        self.seq().len
    }
    fn prepare(&mut self, tokens: &[u32]) -> Result<()> {
        self.cache.borrow_mut().prepare_seq(self.id, tokens)
    }
    fn write(&mut self, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        self.cache.borrow_mut().write_seq(self.id, layer, k, v)
    }
    fn read(&self, layer: usize, end: usize) -> KvView<'_> {
        self.cache.borrow().read_seq(self.id, layer, end)
    }
    fn advance(&mut self, n: usize) {
        self.cache.borrow_mut().advance_seq(self.id, n)
    }
    fn truncate(&mut self, len: usize) {
        self.cache.borrow_mut().truncate_seq(self.id, len)
    }
    /// The blocks in this sequence's table (a block shared with others counts fully).
    fn bytes_reserved(&self) -> usize {
        self.seq().blocks.len() * self.cache().block_bytes
    }
    fn bytes_used(&self) -> usize {
        self.seq().len * self.cache().token_bytes
    }
    /// Copy-on-write copies in the whole pool.
    fn bytes_copied(&self) -> usize {
        self.cache().bytes_copied
    }
}

impl PagedCache {
    // ANCHOR: paged_prepare
    /// Makes room in `id` for `tokens`: a new block for each block boundary crossed, and
    /// a private copy of the block being written into if it is shared or named. All or
    /// nothing: when the pool cannot give every block, nothing changes.
    fn prepare_seq(&mut self, id: SeqId, tokens: &[u32]) -> Result<()> {
        let bs = self.pool.block_size();
        let seq = self.get(id)?;
        let (len, n) = (seq.len, tokens.len());
        let new_blocks = (len + n).div_ceil(bs).saturating_sub(seq.blocks.len());
        // The block position `len` falls in, if the table already has it.
        let tail = (n > 0 && len / bs < seq.blocks.len()).then_some(len / bs);
        let copy_tail = tail.filter(|&i| {
            let b = seq.blocks[i];
            self.pool.ref_count(b) > 1 || self.prefix.as_ref().is_some_and(|p| p.is_named(b))
        });
        let needed = new_blocks + copy_tail.is_some() as usize;
        if needed > self.available() {
            return Err(self.budget_error(needed));
        }
        if let Some(i) = copy_tail {
            let old = self.seqs[&id].blocks[i];
            let new = self.take_block().expect("counted as available");
            self.bytes_copied += self.pool.copy_rows(old, new, len - i * bs);
            self.cow_copies += 1;
            self.release_block(old);
            self.seqs.get_mut(&id).expect("checked").blocks[i] = new;
        }
        for _ in 0..new_blocks {
            let b = self.take_block().expect("counted as available");
            self.seqs.get_mut(&id).expect("checked").blocks.push(b);
        }
        self.seqs.get_mut(&id).expect("checked").pending = tokens.to_vec();
        Ok(())
    }
    // ANCHOR_END: paged_prepare

    fn write_seq(&mut self, id: SeqId, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        let (bs, kv_dim) = (self.pool.block_size(), self.kv_dim);
        let seq = self.seqs.get(&id).ok_or_else(|| unknown(id))?;
        let n = k.len() / kv_dim;
        if seq.len + n > seq.blocks.len() * bs {
            return Err(Error::InvalidArgument(format!(
                "internal: writing {n} positions after {} into {} blocks: call prepare first",
                seq.len,
                seq.blocks.len()
            )));
        }
        // The new rows may span several blocks: write each block's run.
        let mut done = 0;
        while done < n {
            let pos = seq.len + done;
            let (block, row) = (seq.blocks[pos / bs], pos % bs);
            if self.prefix.as_ref().is_some_and(|p| p.is_named(block)) {
                return Err(Error::InvalidArgument(format!(
                    "internal: block {block} is named in the prefix cache and must not be written"
                )));
            }
            let run = (bs - row).min(n - done);
            let range = done * kv_dim..(done + run) * kv_dim;
            self.pool
                .write(layer, block, row, &k[range.clone()], &v[range])?;
            done += run;
        }
        Ok(())
    }

    fn read_seq(&self, id: SeqId, layer: usize, end: usize) -> KvView<'_> {
        let bs = self.pool.block_size();
        let table = &self.seqs[&id].blocks[..end.div_ceil(bs)];
        KvView::Paged(Paged {
            k_blocks: table.iter().map(|&b| self.pool.k_block(layer, b)).collect(),
            v_blocks: table.iter().map(|&b| self.pool.v_block(layer, b)).collect(),
            block_size: bs,
            kv_dim: self.kv_dim,
        })
    }

    // ANCHOR: paged_advance
    /// The prepared positions are written. With prefix caching, every block that just
    /// became full gets its name, so later requests can find it.
    fn advance_seq(&mut self, id: SeqId, n: usize) {
        let bs = self.pool.block_size();
        let Some(seq) = self.seqs.get_mut(&id) else {
            return;
        };
        seq.len += n;
        let taken = n.min(seq.pending.len());
        seq.tokens.extend(seq.pending.drain(..taken));
        seq.pending.clear();
        if let Some(prefix) = self.prefix.as_mut() {
            while (seq.hashes.len() + 1) * bs <= seq.len {
                let i = seq.hashes.len();
                let parent = seq.hashes.last().copied();
                let hash = prefix.register(seq.blocks[i], parent, &seq.tokens[i * bs..][..bs]);
                seq.hashes.push(hash);
            }
        }
    }
    // ANCHOR_END: paged_advance

    /// Forgets positions `len..` of `id`, giving back the blocks past the new end.
    fn truncate_seq(&mut self, id: SeqId, len: usize) {
        let bs = self.pool.block_size();
        let Some(seq) = self.seqs.get_mut(&id) else {
            return;
        };
        if len >= seq.len {
            return;
        }
        seq.len = len;
        seq.tokens.truncate(len);
        seq.pending.clear();
        seq.hashes.truncate(len / bs);
        let dropped: Vec<BlockId> = seq.blocks.drain(len.div_ceil(bs)..).collect();
        for b in dropped.into_iter().rev() {
            self.release_block(b);
        }
    }
}
