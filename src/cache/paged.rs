//! The paged KV cache: many sequences, one block pool, a block table per sequence
//! (PagedAttention, Kwon et al. 2023, §4.2-4.4).
//!
//! A sequence's positions live in fixed-size blocks that need not be adjacent: its
//! *block table* lists them in order, and position `j` is row `j % block_size` of block
//! `block_table[j / block_size]`. A sequence takes a new block only when it crosses into
//! one, so it never holds more than one partly filled block: the waste is under one
//! block per sequence, whatever `max_new_tokens` says.
//!
//! ```text
//! pool:        [ b0 | b1 | b2 | b3 | b4 | b5 | b6 | b7 ]      blocks of 16 positions
//! seq A (40):  table [b0, b3, b5]   b5 holds 8 positions, 8 rows still unused
//! seq B (20):  table [b1, b2]       b2 holds 4
//! fork of A:   table [b0, b3, b5]   shared: ref counts 2; the first write into b5
//!                                   copies it to a free block (copy-on-write, §4.4)
//! ```
//!
//! With prefix caching on ([`super::prefix`]), full blocks are also named by their
//! tokens, and a new sequence starts with the blocks of its longest cached prefix.
//!
//! One sequence seen through the [`super::KvStore`] verbs, so the model runs on it
//! unchanged, is in [`super::paged_seq`]; attention reads through the block table
//! ([`crate::attention::Paged`]).

use super::block_pool::{BlockId, BlockPool};
use super::paged_seq::PagedSeq;
use super::prefix::PrefixIndex;
use crate::config::Config;
use crate::error::{Error, Result};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};

/// A sequence in a [`PagedCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct SeqId(pub u64);

// ANCHOR: block_table
/// One sequence's share of the pool.
#[derive(Debug, Clone, Default)]
pub(super) struct Sequence {
    /// The block table: `blocks[i]` holds positions `i * block_size..(i + 1) * block_size`.
    pub(super) blocks: Vec<BlockId>,
    /// Positions stored.
    pub(super) len: usize,
    /// Token ids of positions `0..len`: a prefix cache names full blocks by them.
    pub(super) tokens: Vec<u32>,
    /// Ids prepared for the forward pass in flight, stored at `advance`.
    pub(super) pending: Vec<u32>,
    /// Names of full blocks `0..hashes.len()` (prefix caching only).
    pub(super) hashes: Vec<u64>,
}
// ANCHOR_END: block_table

/// A block pool shared by many sequences, each with its block table.
pub struct PagedCache {
    pub(super) pool: BlockPool,
    /// `Some` when prefix caching is on.
    pub(super) prefix: Option<PrefixIndex>,
    pub(super) seqs: BTreeMap<SeqId, Sequence>,
    next_id: u64,
    pub(super) kv_dim: usize,
    pub(super) block_bytes: usize,
    pub(super) token_bytes: usize,
    /// Copy-on-write copies of shared partial blocks, and their bytes.
    pub cow_copies: usize,
    pub bytes_copied: usize,
}

/// Where the pool's blocks are, for reports and invariant checks.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PoolStats {
    pub n_blocks: usize,
    pub block_size: usize,
    pub block_bytes: usize,
    /// On the free list.
    pub free: usize,
    /// In at least one block table.
    pub used: usize,
    /// Named and held by nobody: parked for reuse by the prefix cache.
    pub cached: usize,
    pub sequences: usize,
    pub prefix_hits: usize,
    pub prefix_misses: usize,
    pub evictions: usize,
}

impl PagedCache {
    /// A pool of `n_blocks` blocks of `block_size` positions.
    pub fn new(
        config: &Config,
        block_size: usize,
        n_blocks: usize,
        prefix_caching: bool,
    ) -> Result<PagedCache> {
        let pool = BlockPool::new(config, block_size, n_blocks)?;
        Ok(PagedCache::with_pool(config, pool, prefix_caching))
    }

    /// The block allocator for a budget, without the memory behind it: for planning
    /// how many requests fit (`kvlab capacity`). Sequences can be prepared and advanced
    /// (the blocks are counted) but not written.
    pub fn counting_only(
        config: &Config,
        block_size: usize,
        budget_bytes: usize,
        prefix_caching: bool,
    ) -> Result<PagedCache> {
        let n_blocks = blocks_in_budget(config, block_size, budget_bytes)?;
        let pool = BlockPool::counting_only(config, block_size, n_blocks)?;
        Ok(PagedCache::with_pool(config, pool, prefix_caching))
    }

    fn with_pool(config: &Config, pool: BlockPool, prefix_caching: bool) -> PagedCache {
        let (n_blocks, block_size) = (pool.n_blocks(), pool.block_size());
        PagedCache {
            prefix: prefix_caching.then(|| PrefixIndex::new(n_blocks)),
            pool,
            seqs: BTreeMap::new(),
            next_id: 0,
            kv_dim: config.n_kv_heads() * config.head_dim(),
            block_bytes: BlockPool::block_bytes(config, block_size),
            token_bytes: super::bytes_per_token(config),
            cow_copies: 0,
            bytes_copied: 0,
        }
    }

    /// As many blocks as `budget_bytes` holds (vLLM sizes its pool this way at start-up).
    pub fn with_budget(
        config: &Config,
        block_size: usize,
        budget_bytes: usize,
        prefix_caching: bool,
    ) -> Result<PagedCache> {
        let n_blocks = blocks_in_budget(config, block_size, budget_bytes)?;
        PagedCache::new(config, block_size, n_blocks, prefix_caching)
    }

    pub fn block_size(&self) -> usize {
        self.pool.block_size()
    }
    pub fn block_bytes(&self) -> usize {
        self.block_bytes
    }
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }
    pub fn prefix(&self) -> Option<&PrefixIndex> {
        self.prefix.as_ref()
    }

    /// Blocks a sequence can still get: free ones, then parked ones (evicted LRU first).
    pub fn available(&self) -> usize {
        self.pool.n_free() + self.prefix.as_ref().map_or(0, |p| p.n_parked())
    }

    pub fn stats(&self) -> PoolStats {
        let p = self.prefix.as_ref();
        PoolStats {
            n_blocks: self.pool.n_blocks(),
            block_size: self.pool.block_size(),
            block_bytes: self.block_bytes,
            free: self.pool.n_free(),
            used: self.pool.n_used(),
            cached: p.map_or(0, |p| p.n_parked()),
            sequences: self.seqs.len(),
            prefix_hits: p.map_or(0, |p| p.hits),
            prefix_misses: p.map_or(0, |p| p.misses),
            evictions: p.map_or(0, |p| p.evictions),
        }
    }

    /// Bytes of blocks in at least one block table (a shared block counts once).
    pub fn bytes_in_use(&self) -> usize {
        self.pool.n_used() * self.block_bytes
    }

    /// Bytes of the whole pool, reserved at creation.
    pub fn bytes_pool(&self) -> usize {
        self.pool.bytes()
    }

    /// A new, empty sequence (no blocks until its first token).
    pub fn add_sequence(&mut self) -> SeqId {
        let id = SeqId(self.next_id);
        self.next_id += 1;
        self.seqs.insert(id, Sequence::default());
        id
    }

    // ANCHOR: prefix_lookup
    /// A new sequence for `prompt` that starts with every cached full block of its
    /// prefix. Returns the sequence and how many positions it already holds; the caller
    /// runs the model on `prompt[reused..]` only. At least the last prompt token is left
    /// to compute: its logits are the first output. Without prefix caching, reuses nothing.
    pub fn add_sequence_with_prefix(&mut self, prompt: &[u32]) -> (SeqId, usize) {
        let id = self.add_sequence();
        let bs = self.pool.block_size();
        let Some(prefix) = self.prefix.as_mut() else {
            return (id, 0);
        };
        let seq = self.seqs.get_mut(&id).expect("just added");
        let lookable = prompt.len().saturating_sub(1) / bs;
        let mut parent = None;
        for (i, chunk) in prompt.chunks_exact(bs).take(lookable).enumerate() {
            let Some((hash, block)) = prefix.lookup(parent, chunk) else {
                // The chain is broken: every later block's name depends on this one.
                prefix.misses += lookable - i;
                break;
            };
            prefix.hits += 1;
            prefix.unpark(block); // if nobody held it, it leaves the LRU list
            self.pool.retain(block);
            seq.blocks.push(block);
            seq.hashes.push(hash);
            parent = Some(hash);
        }
        seq.len = seq.blocks.len() * bs;
        seq.tokens = prompt[..seq.len].to_vec();
        (id, seq.len)
    }
    // ANCHOR_END: prefix_lookup

    /// A copy of `id` that shares all its blocks (parallel sampling, beam search). Both
    /// sequences read the shared blocks; the first to write into the shared partial
    /// block copies it (copy-on-write), full blocks are never written again.
    pub fn fork(&mut self, id: SeqId) -> Result<SeqId> {
        let seq = self.get(id)?.clone();
        for &b in &seq.blocks {
            self.pool.retain(b);
        }
        let child = SeqId(self.next_id);
        self.next_id += 1;
        self.seqs.insert(
            child,
            Sequence {
                pending: Vec::new(),
                ..seq
            },
        );
        Ok(child)
    }

    /// Ends a sequence: its blocks go back to the free list, or (named blocks, prefix
    /// caching) to the LRU list, still findable by the next request with the same prefix.
    pub fn free(&mut self, id: SeqId) -> Result<()> {
        let seq = self.seqs.remove(&id).ok_or_else(|| unknown(id))?;
        // Tail first: parked in this order, the tail of a prefix is evicted before its
        // head, which more requests share (vLLM frees in the same order).
        for &b in seq.blocks.iter().rev() {
            self.release_block(b);
        }
        Ok(())
    }

    /// One sequence, as a [`KvStore`] the model can run on.
    pub fn seq(&mut self, id: SeqId) -> Result<PagedSeq<&mut PagedCache>> {
        self.get(id)?;
        Ok(PagedSeq { cache: self, id })
    }

    pub fn seq_len(&self, id: SeqId) -> Option<usize> {
        self.seqs.get(&id).map(|s| s.len)
    }

    pub fn block_table(&self, id: SeqId) -> Option<&[BlockId]> {
        self.seqs.get(&id).map(|s| &s.blocks[..])
    }

    pub fn sequences(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.seqs.keys().copied()
    }

    pub(super) fn get(&self, id: SeqId) -> Result<&Sequence> {
        self.seqs.get(&id).ok_or_else(|| unknown(id))
    }

    /// A block for a sequence: from the free list, else the least recently used parked one.
    pub(super) fn take_block(&mut self) -> Option<BlockId> {
        if let Some(b) = self.pool.pop_free() {
            return Some(b);
        }
        let b = self.prefix.as_mut()?.evict_lru()?;
        self.pool.retain(b);
        Some(b)
    }

    pub(super) fn release_block(&mut self, b: BlockId) {
        if self.pool.release(b) > 0 {
            return;
        }
        match self.prefix.as_mut() {
            Some(p) if p.is_named(b) => p.park(b),
            _ => self.pool.push_free(b),
        }
    }

    pub(super) fn budget_error(&self, needed: usize) -> Error {
        Error::BlockBudgetExhausted {
            budget_bytes: self.pool.n_blocks() * self.block_bytes,
            n_blocks: self.pool.n_blocks(),
            block_size: self.pool.block_size(),
            free: self.available(),
            needed,
        }
    }

    // ANCHOR: invariants
    /// The allocator's invariants, checked by the property tests after every operation:
    /// 1. a block's reference count is the number of block tables that hold it;
    /// 2. a block nobody holds is on the free list or parked, never both;
    /// 3. free + used + cached = pool size;
    /// 4. every name points at a block that carries it, and parked blocks are named;
    /// 5. between passes, a sequence holds exactly `ceil(len / block_size)` blocks
    ///    (waste < one block) and its named blocks hold its own tokens.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let bs = self.pool.block_size();
        let n = self.pool.n_blocks();
        let mut holders = vec![0u32; n];
        for seq in self.seqs.values() {
            for &b in &seq.blocks {
                holders[b] += 1;
            }
        }
        let free: HashSet<BlockId> = self.pool.free_list().iter().copied().collect();
        if free.len() != self.pool.free_list().len() {
            return Err("a block is on the free list twice".into());
        }
        let named = |b| self.prefix.as_ref().is_some_and(|p| p.is_named(b));
        let parked = |b| self.prefix.as_ref().is_some_and(|p| p.is_parked(b));
        for (b, &held) in holders.iter().enumerate() {
            let rc = self.pool.ref_count(b);
            if held != rc {
                return Err(format!(
                    "block {b}: ref count {rc} but {held} tables hold it"
                ));
            }
            let places = free.contains(&b) as u32 + parked(b) as u32 + (rc > 0) as u32;
            if places != 1 {
                return Err(format!(
                    "block {b}: ref count {rc}, free {}, parked {}",
                    free.contains(&b),
                    parked(b)
                ));
            }
            if (free.contains(&b) && named(b)) || (parked(b) && !named(b)) {
                return Err(format!("block {b}: free and named, or parked and unnamed"));
            }
        }
        let s = self.stats();
        if s.free + s.used + s.cached != n {
            return Err(format!(
                "free {} + used {} + cached {} != {n} blocks",
                s.free, s.used, s.cached
            ));
        }
        if let Some(p) = &self.prefix {
            let mut seen = HashMap::new();
            for (hash, b) in p.names() {
                if p.key(b).map(|k| k.hash) != Some(hash) || seen.insert(b, hash).is_some() {
                    return Err(format!(
                        "name {hash:x} points at block {b}, which is not it"
                    ));
                }
            }
        }
        for (id, seq) in &self.seqs {
            if seq.pending.is_empty() && seq.blocks.len() != seq.len.div_ceil(bs) {
                return Err(format!(
                    "{id:?}: {} positions in {} blocks",
                    seq.len,
                    seq.blocks.len()
                ));
            }
            if seq.tokens.len() != seq.len {
                return Err(format!(
                    "{id:?}: {} token ids for {} positions",
                    seq.tokens.len(),
                    seq.len
                ));
            }
            for (i, &b) in seq.blocks.iter().enumerate() {
                let Some(key) = self.prefix.as_ref().and_then(|p| p.key(b)) else {
                    continue;
                };
                let mine = &seq.tokens[(i * bs).min(seq.len)..((i + 1) * bs).min(seq.len)];
                if key.tokens[..mine.len()] != *mine {
                    return Err(format!("{id:?}: block {b} is named for other tokens"));
                }
            }
        }
        Ok(())
    }
    // ANCHOR_END: invariants
}

/// How many whole blocks `budget_bytes` holds; at least one, or an error that says so.
fn blocks_in_budget(config: &Config, block_size: usize, budget_bytes: usize) -> Result<usize> {
    let block_bytes = BlockPool::block_bytes(config, block_size.max(1));
    if budget_bytes < block_bytes {
        return Err(Error::InvalidArgument(format!(
            "a budget of {budget_bytes} bytes is less than one block ({block_size} positions = {block_bytes} bytes): raise --budget or lower --block-size"
        )));
    }
    Ok(budget_bytes / block_bytes)
}

pub(super) fn unknown(id: SeqId) -> Error {
    Error::InvalidArgument(format!(
        "sequence {} is not in this paged cache (freed already?)",
        id.0
    ))
}
