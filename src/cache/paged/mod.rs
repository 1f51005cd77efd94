//! The paged KV cache: many sequences, one block pool, a block table per sequence and
//! layer group (PagedAttention, Kwon et al. 2023, §4.2-4.4).
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
//! With prefix caching on ([`prefix`]), full blocks are also named by their
//! tokens, and a new sequence starts with the blocks of its longest cached prefix.
//!
//! A Llama's layers are one group, so a sequence has one table, as above. A model with
//! local layers (Gemma 3) has a table per layer group ([`groups`], vLLM's hybrid KV cache
//! manager): a local group's table gives its blocks back as the window slides.
//!
//! This file: the pool's sequences, then the write path (`prepare_seq` → `write_seq` →
//! `advance_seq`, `truncate_seq`), which [`PagedSeq`] (`seq.rs`) exposes as the
//! [`crate::cache::KvStore`] verbs so the model runs on it unchanged; attention reads
//! through the block table ([`crate::cache::rows::Paged`]). The allocator's invariants,
//! checked by the property tests, are in `invariants.rs`; the block memory in
//! [`block_pool`]. Book: paged-attention.md, prefix-caching.md.

pub mod block_pool;
pub mod groups;
mod invariants;
pub mod prefix;
pub mod retention;
mod row_io;
mod seq;

pub use block_pool::{layers_per_block, BlockId, BlockPool, HOLE};
pub use groups::LayerGroups;
pub use retention::Retention;
pub use seq::PagedSeq;

use crate::cache::element::KvElement;
use crate::cache::view::KvView;
use crate::config::Config;
use crate::error::{Error, Result};
use prefix::PrefixIndex;
use serde::Serialize;
use std::collections::BTreeMap;

/// A sequence in a [`PagedCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct SeqId(pub u64);

// ANCHOR: block_table
/// One sequence's share of the pool.
#[derive(Debug, Clone, Default)]
struct Sequence {
    /// One block table per layer group (`groups.rs`); a model without local layers has
    /// one group, so one table.
    tables: Vec<Table>,
    /// Positions stored.
    len: usize,
    /// Token ids of positions `0..len`: a prefix cache names full blocks by them.
    tokens: Vec<u32>,
    /// Ids prepared for the forward pass in flight, stored at `advance`.
    pending: Vec<u32>,
    /// Positions a per-pass window dropped: `sinks..sinks + evicted` (`retention.rs`).
    /// Blocks wholly inside them are [`HOLE`]s in the table.
    evicted: usize,
}

/// One layer group's block table.
#[derive(Debug, Clone, Default)]
struct Table {
    /// `blocks[i]` holds positions `i * block_size..(i + 1) * block_size` of the group's
    /// layers.
    blocks: Vec<BlockId>,
    /// Names of full blocks `0..hashes.len()` (prefix caching only).
    hashes: Vec<u64>,
}
// ANCHOR_END: block_table

/// A block pool shared by many sequences, each with a block table per layer group.
pub struct PagedCache {
    pool: BlockPool,
    /// `Some` when prefix caching is on.
    prefix: Option<PrefixIndex>,
    seqs: BTreeMap<SeqId, Sequence>,
    /// What every sequence keeps: all positions, or a window (`retention.rs`). A model
    /// with local layers keeps them all here, and its windows in `groups`.
    retention: Retention,
    /// Which layers share a block table, and what each table keeps (`groups.rs`).
    groups: LayerGroups,
    next_id: u64,
    kv_dim: usize,
    block_bytes: usize,
    /// Bytes of one position of one layer, K and V, as stored.
    row_bytes: usize,
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
    /// A pool of `n_blocks` f32 blocks of `block_size` positions.
    pub fn new(
        config: &Config,
        block_size: usize,
        n_blocks: usize,
        prefix_caching: bool,
    ) -> Result<PagedCache> {
        PagedCache::with_element(config, KvElement::F32, block_size, n_blocks, prefix_caching)
    }

    /// A pool of `n_blocks` blocks of `block_size` positions, each value stored as
    /// `element` (f32, or int8/int4 codes: `cache/element.rs`).
    pub fn with_element(
        config: &Config,
        element: KvElement,
        block_size: usize,
        n_blocks: usize,
        prefix_caching: bool,
    ) -> Result<PagedCache> {
        let pool = BlockPool::with_element(config, element, block_size, n_blocks)?;
        Ok(PagedCache::with_pool(
            config,
            pool,
            LayerGroups::of(config),
            prefix_caching,
        ))
    }

    /// The block allocator for a budget, without the memory behind it: for planning
    /// how many requests fit (`kvlab capacity`). Sequences can be prepared and advanced
    /// (the blocks are counted) but not written.
    pub fn counting_only(
        config: &Config,
        element: KvElement,
        block_size: usize,
        budget_bytes: usize,
        prefix_caching: bool,
    ) -> Result<PagedCache> {
        let n_blocks = blocks_in_budget(config, element, block_size, budget_bytes)?;
        let pool = BlockPool::counting_only(config, element, block_size, n_blocks)?;
        Ok(PagedCache::with_pool(
            config,
            pool,
            LayerGroups::of(config),
            prefix_caching,
        ))
    }

    /// A pool of `n_blocks` blocks whose sequences keep one block table per group of
    /// `groups` (the plain twin of a model with local layers: [`LayerGroups::one`], one
    /// table of every layer, the model's masks doing the windows). `storage: false`
    /// counts blocks only, as [`PagedCache::counting_only`].
    pub fn with_layer_groups(
        config: &Config,
        element: KvElement,
        groups: LayerGroups,
        block_size: usize,
        n_blocks: usize,
        storage: bool,
    ) -> Result<PagedCache> {
        if groups.n_layers() != config.num_hidden_layers {
            return Err(Error::Internal(format!(
                "layer groups of {} layers for a model of {}",
                groups.n_layers(),
                config.num_hidden_layers
            )));
        }
        let layers = groups.group_size;
        let pool = BlockPool::of_layers(config, element, layers, block_size, n_blocks, storage)?;
        Ok(PagedCache::with_pool(config, pool, groups, false))
    }

    /// The plain twin of a model with local layers, sized by a budget: one block table
    /// for every layer ([`LayerGroups::one`]), as many blocks of every layer as
    /// `budget_bytes` holds, counted only (`kvlab capacity` sets it beside the groups).
    pub fn one_table_in_budget(
        config: &Config,
        element: KvElement,
        block_size: usize,
        budget_bytes: usize,
    ) -> Result<PagedCache> {
        let layers = config.num_hidden_layers;
        let n_blocks =
            blocks_of_layers_in_budget(config, element, layers, block_size, budget_bytes)?;
        let one = LayerGroups::one(layers, Retention::Full);
        PagedCache::with_layer_groups(config, element, one, block_size, n_blocks, false)
    }

    fn with_pool(
        config: &Config,
        pool: BlockPool,
        groups: LayerGroups,
        prefix_caching: bool,
    ) -> PagedCache {
        let (n_blocks, block_size, element) = (pool.n_blocks(), pool.block_size(), pool.element());
        let kv_dim = config.n_kv_heads() * config.head_dim();
        let row_bytes = element.bytes_per_token_of(1, kv_dim);
        let pool_layers = pool.n_layers();
        PagedCache {
            prefix: prefix_caching.then(|| PrefixIndex::new(n_blocks)),
            pool,
            seqs: BTreeMap::new(),
            retention: Retention::Full,
            groups,
            next_id: 0,
            kv_dim,
            block_bytes: block_size * row_bytes * pool_layers,
            row_bytes,
            cow_copies: 0,
            bytes_copied: 0,
        }
    }

    /// As many blocks as `budget_bytes` holds (vLLM sizes its pool this way at start-up).
    /// Blocks of `element`: an int8 block holds the same positions in about a quarter
    /// of the bytes, so the same budget holds about four times the positions.
    pub fn with_budget(
        config: &Config,
        element: KvElement,
        block_size: usize,
        budget_bytes: usize,
        prefix_caching: bool,
    ) -> Result<PagedCache> {
        let n_blocks = blocks_in_budget(config, element, block_size, budget_bytes)?;
        PagedCache::with_element(config, element, block_size, n_blocks, prefix_caching)
    }

    /// This pool, its sequences keeping what `retention` says. A per-pass window is for
    /// one sequence's own pool (`kvlab generate --cache paged --kv window`): it turns
    /// prefix reuse off, since its rows depend on how the text was cut into passes. A
    /// per-query window (`--kv sliding`) does not: a position's rows are the same
    /// under any cut, so a block of them may be shared. A model with local layers
    /// refuses any retention but [`Retention::Full`]: its tables keep its own windows.
    pub fn with_retention(mut self, retention: Retention) -> Result<PagedCache> {
        self.groups = self.groups.with_retention(retention)?;
        self.retention = retention;
        Ok(self)
    }

    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// Which layers share a block table, and what each keeps.
    pub fn layer_groups(&self) -> &LayerGroups {
        &self.groups
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
        let seq = Sequence {
            tables: vec![Table::default(); self.groups.len()],
            ..Sequence::default()
        };
        self.seqs.insert(id, seq);
        id
    }

    // ANCHOR: prefix_lookup
    /// A new sequence for `prompt` that starts with every cached full block of its
    /// prefix. Returns the sequence and how many positions it already holds; the caller
    /// runs the model on `prompt[reused..]` only. At least the last prompt token is left
    /// to compute: its logits are the first output. Without prefix caching, reuses nothing.
    ///
    /// A table under a window per query needs only the blocks its first query will read
    /// (vLLM's sliding-window manager does the same): the others stand as holes, whether
    /// or not they are still cached. With several layer groups, each group's table has
    /// its own chain of names, and the prefix is reused as far as every group has the
    /// blocks it needs.
    pub fn add_sequence_with_prefix(&mut self, prompt: &[u32]) -> (SeqId, usize) {
        let id = self.add_sequence();
        let bs = self.pool.block_size();
        let Some(prefix) = self.prefix.as_mut() else {
            return (id, 0);
        };
        if matches!(self.retention, Retention::Window { .. }) {
            return (id, 0); // see `with_retention`
        }
        let lookable = prompt.len().saturating_sub(1) / bs;
        // Each group's chain: every block's name (computed from the tokens), and the
        // cached block under it, if any.
        let chains: Vec<Vec<(u64, Option<BlockId>)>> = (0..self.groups.len())
            .map(|g| {
                let mut parent = prefix::chain_root(g);
                let mut chain = Vec::with_capacity(lookable);
                for chunk in prompt.chunks_exact(bs).take(lookable) {
                    let hash = prefix::block_hash(parent, chunk);
                    let block = prefix.lookup(parent, chunk).map(|(_, b)| b);
                    chain.push((hash, block));
                    parent = Some(hash);
                }
                chain
            })
            .collect();
        // Whether block `i` of group `g` is held by a sequence of `n` full blocks: all
        // of them, or under a window the sinks' and those its next query reads.
        let groups = &self.groups;
        let needed = |g: usize, i: usize, n: usize| match groups.retention(g).mask() {
            Some(w) => i < w.sinks.div_ceil(bs) || i >= w.forgotten_below(n * bs) / bs,
            None => true,
        };
        // misses[g][i]: blocks of `0..i` not cached, so a run `a..b` is whole when
        // misses[b] == misses[a].
        let misses: Vec<Vec<usize>> = (chains.iter())
            .map(|chain| {
                let mut counts = vec![0];
                for (_, block) in chain {
                    counts.push(counts.last().expect("one") + block.is_none() as usize);
                }
                counts
            })
            .collect();
        let holds = |g: usize, n: usize| {
            let m = &misses[g];
            match groups.retention(g).mask() {
                Some(w) => {
                    let sinks = w.sinks.div_ceil(bs).min(n);
                    let recent = (w.forgotten_below(n * bs) / bs).max(sinks);
                    m[sinks] == 0 && m[n] == m[recent]
                }
                None => m[n] == 0,
            }
        };
        let reused = (0..=lookable)
            .rev()
            .find(|&n| (0..chains.len()).all(|g| holds(g, n)))
            .unwrap_or(0);
        prefix.hits += reused * chains.len();
        prefix.misses += (lookable - reused) * chains.len();
        let seq = self.seqs.get_mut(&id).expect("just added");
        for (g, (table, chain)) in seq.tables.iter_mut().zip(chains).enumerate() {
            for (i, (hash, block)) in chain.into_iter().take(reused).enumerate() {
                let block = match block {
                    Some(b) if needed(g, i, reused) => {
                        prefix.unpark(b); // if nobody held it, it leaves the LRU list
                        self.pool.retain(b);
                        b
                    }
                    _ => HOLE,
                };
                table.blocks.push(block);
                table.hashes.push(hash);
            }
        }
        seq.len = reused * bs;
        seq.tokens = prompt[..seq.len].to_vec();
        (id, seq.len)
    }
    // ANCHOR_END: prefix_lookup

    /// A copy of `id` that shares all its blocks (parallel sampling, beam search). Both
    /// sequences read the shared blocks; the first to write into the shared partial
    /// block copies it (copy-on-write), full blocks are never written again.
    pub fn fork(&mut self, id: SeqId) -> Result<SeqId> {
        let seq = self.get(id)?.clone();
        for table in &seq.tables {
            for &b in table.blocks.iter().filter(|&&b| b != HOLE) {
                self.pool.retain(b);
            }
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
        for table in &seq.tables {
            for &b in table.blocks.iter().rev().filter(|&&b| b != HOLE) {
                self.release_block(b);
            }
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

    /// The block table of `id`'s first layer group: every layer's, for a model without
    /// local layers.
    pub fn block_table(&self, id: SeqId) -> Option<&[BlockId]> {
        self.seqs.get(&id).map(|s| &s.tables[0].blocks[..])
    }

    /// Every block table of `id`, one per layer group (`groups.rs`).
    pub fn block_tables(&self, id: SeqId) -> Option<Vec<&[BlockId]>> {
        let seq = self.seqs.get(&id)?;
        Some(seq.tables.iter().map(|t| &t.blocks[..]).collect())
    }

    pub fn sequences(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.seqs.keys().copied()
    }

    fn get(&self, id: SeqId) -> Result<&Sequence> {
        self.seqs.get(&id).ok_or_else(|| unknown(id))
    }

    /// A block for a sequence: from the free list, else the least recently used parked one.
    fn take_block(&mut self) -> Option<BlockId> {
        if let Some(b) = self.pool.pop_free() {
            return Some(b);
        }
        let b = self.prefix.as_mut()?.evict_lru()?;
        self.pool.retain(b);
        Some(b)
    }

    fn release_block(&mut self, b: BlockId) {
        if self.pool.release(b) > 0 {
            return;
        }
        match self.prefix.as_mut() {
            Some(p) if p.is_named(b) => p.park(b),
            _ => self.pool.push_free(b),
        }
    }

    fn budget_error(&self, needed: usize) -> Error {
        Error::BlockBudgetExhausted {
            budget_bytes: self.pool.n_blocks() * self.block_bytes,
            n_blocks: self.pool.n_blocks(),
            block_size: self.pool.block_size(),
            free: self.available(),
            needed,
        }
    }
}

// ANCHOR: block_accounting
/// Block accounting, in one place: the scheduler, admission, preemption and import ask
/// here how many blocks a step takes, and `prepare_seq` takes exactly that many.
impl PagedCache {
    /// Blocks sequence `id` must take to store `rows` more positions: one per block
    /// boundary crossed, plus a private copy of the block it writes into when that one is
    /// shared (a fork, a prefix hit) or named in the prefix index, less the blocks a
    /// sliding window gives back first. An unknown `id` counts as a new, empty sequence.
    /// With several layer groups, the sum over their tables.
    pub fn blocks_to_append(&self, id: SeqId, rows: usize) -> usize {
        let taken: usize = (0..self.groups.len())
            .map(|g| {
                let (new_blocks, tail) = self.append_plan(id, g, rows);
                new_blocks + tail.is_some() as usize
            })
            .sum();
        taken.saturating_sub(self.slide_plan(id, rows).freed)
    }

    /// Whether `rows` more positions of `id` fit in the blocks available now beside
    /// `reserved` blocks already promised to other sequences of the same pass. (Not a
    /// saturating subtraction: a prefix hit between the promise and this question may
    /// have taken parked blocks the promise counted on, and then nothing more fits.)
    pub fn can_append(&self, id: SeqId, rows: usize, reserved: usize) -> bool {
        self.blocks_to_append(id, rows).saturating_add(reserved) <= self.available()
    }

    /// Whether `rows` more positions of `id`, fed in passes of at most `pass` tokens, fit
    /// in the blocks available now, less `reserved`: every block they fill, or under a
    /// window per query the most the sequence will hold at once, in all its tables
    /// ([`LayerGroups::peak_blocks`]).
    pub fn can_hold(&self, id: SeqId, rows: usize, pass: usize, reserved: usize) -> bool {
        let len = self.seqs.get(&id).map_or(0, |s| s.len);
        let peak = self
            .groups
            .peak_blocks(len + rows, self.pool.block_size(), pass);
        let needed = self.blocks_to_append(id, rows).min(peak);
        needed.saturating_add(reserved) <= self.available()
    }

    /// Whether a new sequence of `positions` positions fits in the blocks available now
    /// (one run of blocks per layer group).
    pub fn can_allocate(&self, positions: usize) -> bool {
        let per_table = blocks_for_positions(positions, self.pool.block_size());
        per_table.saturating_mul(self.groups.len()) <= self.available()
    }

    /// `(new blocks, index of the tail block to replace)` for `rows` more positions of
    /// `id` in layer group `g`'s table. The tail is replaced by a copy when it is shared
    /// or named, and by a fresh block when it is a hole (a rollback below a window's
    /// slide left it empty).
    fn append_plan(&self, id: SeqId, g: usize, rows: usize) -> (usize, Option<usize>) {
        let bs = self.pool.block_size();
        let (len, blocks): (usize, &[BlockId]) = match self.seqs.get(&id) {
            Some(seq) => (seq.len, &seq.tables[g].blocks),
            None => (0, &[]),
        };
        let new_blocks = (len + rows).div_ceil(bs).saturating_sub(blocks.len());
        // The block position `len` falls in, if the table already has it.
        let tail = (rows > 0 && len / bs < blocks.len()).then_some(len / bs);
        let copy_tail = tail.filter(|&i| {
            let b = blocks[i];
            b == HOLE
                || self.pool.ref_count(b) > 1
                || self.prefix.as_ref().is_some_and(|p| p.is_named(b))
        });
        (new_blocks, copy_tail)
    }
}

/// Blocks of `block_size` positions that `positions` positions fill.
pub fn blocks_for_positions(positions: usize, block_size: usize) -> usize {
    positions.div_ceil(block_size.max(1))
}

/// Blocks one sequence of `positions` positions of `config`'s model fills when it keeps
/// every position: a run of blocks in each layer group's table (`groups.rs`).
pub fn blocks_for_sequence(config: &Config, positions: usize, block_size: usize) -> usize {
    blocks_for_positions(positions, block_size).saturating_mul(LayerGroups::of(config).len())
}
// ANCHOR_END: block_accounting

/// The write path: what one forward pass does to a sequence, verb by verb
/// (called through [`PagedSeq`]'s [`crate::cache::KvStore`] impl).
impl PagedCache {
    // ANCHOR: paged_prepare
    /// Makes room in `id` for `tokens`: a new block for each block boundary crossed, and
    /// a private copy of the block being written into if it is shared or named. All or
    /// nothing: when the pool cannot give every block, nothing changes.
    fn prepare_seq(&mut self, id: SeqId, tokens: &[u32]) -> Result<()> {
        let bs = self.pool.block_size();
        let len = self.get(id)?.len;
        self.check_pass(id, tokens.len())?;
        let slide = self.slide_plan(id, tokens.len());
        let plans: Vec<_> = (0..self.groups.len())
            .map(|g| self.append_plan(id, g, tokens.len()))
            .collect();
        let needed: usize = plans
            .iter()
            .map(|(new, tail)| new + tail.is_some() as usize)
            .sum();
        if needed > self.available() + slide.freed {
            return Err(self.budget_error(needed));
        }
        // A window slides first: the blocks it leaves are the first ones taken again.
        self.slide(id, &slide);
        for (g, (new_blocks, tail)) in plans.into_iter().enumerate() {
            if let Some(i) = tail {
                let old = self.seqs[&id].tables[g].blocks[i];
                let new = self.take_block().expect("counted as available");
                if old != HOLE {
                    self.bytes_copied += self.pool.copy_rows(old, new, len - i * bs);
                    self.cow_copies += 1;
                    self.release_block(old);
                }
                self.seqs.get_mut(&id).expect("checked").tables[g].blocks[i] = new;
            }
            for _ in 0..new_blocks {
                let b = self.take_block().expect("counted as available");
                self.seqs.get_mut(&id).expect("checked").tables[g]
                    .blocks
                    .push(b);
            }
        }
        self.seqs.get_mut(&id).expect("checked").pending = tokens.to_vec();
        Ok(())
    }
    // ANCHOR_END: paged_prepare

    fn write_seq(&mut self, id: SeqId, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        let (bs, kv_dim) = (self.pool.block_size(), self.kv_dim);
        let seq = self.seqs.get(&id).ok_or_else(|| unknown(id))?;
        // The layer's group says which table; its slot, which of a block's layers.
        let (g, slot) = self.groups.place(layer);
        let blocks = &seq.tables[g].blocks;
        let n = k.len() / kv_dim;
        if seq.len + n > blocks.len() * bs {
            return Err(Error::Internal(format!(
                "writing {n} positions after {} into {} blocks: call prepare first",
                seq.len,
                blocks.len()
            )));
        }
        // The new rows may span several blocks: write each block's run.
        let mut done = 0;
        while done < n {
            let pos = seq.len + done;
            let (block, row) = (blocks[pos / bs], pos % bs);
            if self.prefix.as_ref().is_some_and(|p| p.is_named(block)) {
                return Err(Error::Internal(format!(
                    "block {block} is named in the prefix cache and must not be written"
                )));
            }
            let run = (bs - row).min(n - done);
            let range = done * kv_dim..(done + run) * kv_dim;
            self.pool
                .write(slot, block, row, &k[range.clone()], &v[range])?;
            done += run;
        }
        Ok(())
    }

    /// Layer `layer`'s keys and values of `id` for positions `0..end`, through its block
    /// table (what a batched pass reads for each sequence, `src/batch.rs`).
    /// `end` counts rows held; with a window, row `end - 1` is a later position.
    pub fn read_seq(&self, id: SeqId, layer: usize, end: usize) -> KvView<'_> {
        let bs = self.pool.block_size();
        let evicted = self.evicted(id);
        let positions = if end == 0 {
            0
        } else {
            evicted.position(end - 1) + 1
        };
        let (g, slot) = self.groups.place(layer);
        let table = &self.seqs[&id].tables[g].blocks[..positions.div_ceil(bs)];
        self.pool.layer_view(slot, table, evicted)
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
            for (g, table) in seq.tables.iter_mut().enumerate() {
                while (table.hashes.len() + 1) * bs <= seq.len {
                    let i = table.hashes.len();
                    let parent = table.hashes.last().copied().or(prefix::chain_root(g));
                    let tokens = &seq.tokens[i * bs..][..bs];
                    table
                        .hashes
                        .push(prefix.register(table.blocks[i], parent, tokens));
                }
            }
        }
    }
    // ANCHOR_END: paged_advance

    // ANCHOR: paged_truncate
    /// Forgets positions `len..` of `id` (speculative decoding's rollback), giving back
    /// the blocks past the new end.
    ///
    /// When `len` falls inside a block, that block is partial again. If it was named
    /// (it filled up, rejected drafts included) and nobody else holds it, its name goes:
    /// partial blocks are never named, and the next write goes into it in place, as in
    /// plain decoding. Keeping the name would force a copy-on-write of a block this
    /// sequence alone holds, one block more than `ceil(len / block_size)`, which a pool
    /// sized for the request does not have. A block another sequence holds keeps its
    /// name and its rows: the next write copies it.
    fn truncate_seq(&mut self, id: SeqId, len: usize) {
        let bs = self.pool.block_size();
        let Some(seq) = self.seqs.get_mut(&id) else {
            return;
        };
        if len >= seq.len {
            return;
        }
        // A per-query window that already gave back blocks a query at `len` would read
        // cannot serve the cut: the sequence forgets everything (`KvStore::truncate`).
        let len = if self.reaches_a_hole(id, len) { 0 } else { len };
        let seq = self.seqs.get_mut(&id).expect("checked");
        let evicted = seq.evicted;
        let evicted = self.evicted_after_truncate(evicted, len);
        let seq = self.seqs.get_mut(&id).expect("checked");
        seq.evicted = evicted;
        seq.len = len;
        seq.tokens.truncate(len);
        seq.pending.clear();
        let mut dropped = Vec::new();
        let mut partial_tails = Vec::new();
        for table in &mut seq.tables {
            table.hashes.truncate(len / bs);
            dropped.extend(table.blocks.drain(len.div_ceil(bs)..).rev());
            if !len.is_multiple_of(bs) {
                partial_tails.push(table.blocks[len / bs]);
            }
        }
        for b in dropped.into_iter().filter(|&b| b != HOLE) {
            self.release_block(b);
        }
        for b in partial_tails {
            if let Some(prefix) = self.prefix.as_mut() {
                if b != HOLE && self.pool.ref_count(b) == 1 {
                    prefix.forget(b);
                }
            }
        }
    }
    // ANCHOR_END: paged_truncate
}

/// How many whole blocks of `element` `budget_bytes` holds; at least one, or an error
/// that says so.
pub fn blocks_in_budget(
    config: &Config,
    element: KvElement,
    block_size: usize,
    budget_bytes: usize,
) -> Result<usize> {
    let layers = layers_per_block(config);
    blocks_of_layers_in_budget(config, element, layers, block_size, budget_bytes)
}

/// [`blocks_in_budget`] for blocks that hold `layers` layers each.
fn blocks_of_layers_in_budget(
    config: &Config,
    element: KvElement,
    layers: usize,
    block_size: usize,
    budget_bytes: usize,
) -> Result<usize> {
    let block_bytes = BlockPool::block_bytes_of(config, element, layers, block_size.max(1));
    if budget_bytes < block_bytes {
        return Err(Error::InvalidArgument(format!(
            "a budget of {budget_bytes} bytes is less than one block ({block_size} positions = {block_bytes} bytes): raise --budget or lower --block-size"
        )));
    }
    Ok(budget_bytes / block_bytes)
}

fn unknown(id: SeqId) -> Error {
    Error::InvalidArgument(format!(
        "sequence {} is not in this paged cache (freed already?)",
        id.0
    ))
}
