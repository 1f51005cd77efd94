//! Prefix caching: full blocks named by what they hold, shared by every sequence that
//! starts the same way (book: prefix-caching.md; vLLM's automatic prefix caching, SGLang's
//! RadixAttention, Zheng et al. 2024).
//!
//! The K and V of position `i` depend on tokens `0..=i` and nothing else. So a block of
//! positions `b * block_size..(b + 1) * block_size` is fully determined by the tokens of
//! the whole prefix up to its end. kvlab names a *full* block by a chained hash:
//!
//! ```text
//! hash(block 0) = H(None,              tokens[0..16])
//! hash(block 1) = H(Some(hash(block 0)), tokens[16..32])   ... and so on
//! ```
//!
//! so equal hashes mean equal prefixes, and a one-token difference anywhere changes the
//! hash of its block and of every block after it. A new request walks its prompt block
//! by block, takes every block already cached, and stops at the first miss.
//!
//! Cached blocks are reference-counted like any other. When the last sequence holding
//! one ends, the block is not freed but *parked* in an LRU list, still findable: the next
//! request with the same prefix takes it back. Only when the free list is empty does
//! the pool reuse (evict) the least recently parked block.
//!
//! Partial blocks are never named: their content is still changing. And a named block is
//! never written in place; a sequence that needs to write into one copies it first.
//!
//! The hash is 64-bit FNV-1a, simple enough to compute by hand (exercise 20). A lookup
//! also compares the stored tokens and parent hash, so an accidental collision is a miss,
//! never wrong K and V. Against *crafted* collisions (one user poisoning another's cache)
//! a cryptographic hash is needed: vLLM moved to SHA-256 for this (CVE-2025-25183).

use super::block_pool::BlockId;
use std::collections::{BTreeMap, HashMap};

// ANCHOR: block_hash
/// The name of a full block: FNV-1a over the parent block's hash (if any) and the block's
/// token ids, little-endian. Equal names mean equal prefixes (up to a 2⁻⁶⁴ accident,
/// which [`PrefixIndex::lookup`] rules out by comparing tokens).
pub fn block_hash(parent: Option<u64>, tokens: &[u32]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(PRIME);
        }
    };
    match parent {
        None => eat(&[0]),
        Some(p) => {
            eat(&[1]);
            eat(&p.to_le_bytes());
        }
    }
    for t in tokens {
        eat(&t.to_le_bytes());
    }
    h
}
// ANCHOR_END: block_hash

/// The parent of block 0's name in layer group `group`'s table (`groups.rs`): none for
/// the first group, so a model without local layers names its blocks as above; a
/// distinct seed for each other group, since the same tokens in another group's table
/// are other layers' rows, in another block.
pub fn chain_root(group: usize) -> Option<u64> {
    (group > 0).then(|| block_hash(None, &[u32::MAX, group as u32]))
}

/// What a named block holds: enough to check a hit exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockKey {
    pub hash: u64,
    pub parent: Option<u64>,
    pub tokens: Vec<u32>,
}

// ANCHOR: prefix_index
/// The prefix cache's bookkeeping, next to the pool: which block holds which named
/// prefix, and which unreferenced named blocks can be reused, oldest first.
pub struct PrefixIndex {
    /// hash → the block that holds it.
    by_hash: HashMap<u64, BlockId>,
    /// block → its name, if it has one.
    keys: Vec<Option<BlockKey>>,
    /// Parked blocks (named, held by nobody), by the tick they were parked at: the
    /// first entry is the least recently used, the one to evict.
    lru: BTreeMap<u64, BlockId>,
    parked_at: Vec<Option<u64>>,
    tick: u64,
    /// Full-block lookups that found a block, and that did not.
    pub hits: usize,
    pub misses: usize,
    /// Parked blocks reused for something else.
    pub evictions: usize,
}
// ANCHOR_END: prefix_index

impl PrefixIndex {
    pub fn new(n_blocks: usize) -> PrefixIndex {
        PrefixIndex {
            by_hash: HashMap::new(),
            keys: vec![None; n_blocks],
            lru: BTreeMap::new(),
            parked_at: vec![None; n_blocks],
            tick: 0,
            hits: 0,
            misses: 0,
            evictions: 0,
        }
    }

    /// The block holding `tokens` after the prefix named `parent`, with its hash.
    pub fn lookup(&self, parent: Option<u64>, tokens: &[u32]) -> Option<(u64, BlockId)> {
        let hash = block_hash(parent, tokens);
        let &block = self.by_hash.get(&hash)?;
        let key = self.keys[block].as_ref()?;
        (key.parent == parent && key.tokens == tokens).then_some((hash, block))
    }

    /// Names `block` (now full) as holding `tokens` after `parent`, unless another block
    /// already has that name (two sequences computed the same prefix side by side: the
    /// second copy stays private). Returns the name, for the next block's parent.
    pub fn register(&mut self, block: BlockId, parent: Option<u64>, tokens: &[u32]) -> u64 {
        let hash = block_hash(parent, tokens);
        if self.keys[block].is_none() && !self.by_hash.contains_key(&hash) {
            self.by_hash.insert(hash, block);
            self.keys[block] = Some(BlockKey {
                hash,
                parent,
                tokens: tokens.to_vec(),
            });
        }
        hash
    }

    pub fn is_named(&self, block: BlockId) -> bool {
        self.keys[block].is_some()
    }

    pub fn key(&self, block: BlockId) -> Option<&BlockKey> {
        self.keys[block].as_ref()
    }

    /// Drops `block`'s name (it is about to hold something else).
    pub fn forget(&mut self, block: BlockId) {
        if let Some(key) = self.keys[block].take() {
            self.by_hash.remove(&key.hash);
        }
        self.unpark(block);
    }

    /// Nobody holds the named `block` any more: keep it findable, most recent last.
    pub fn park(&mut self, block: BlockId) {
        self.tick += 1;
        self.lru.insert(self.tick, block);
        self.parked_at[block] = Some(self.tick);
    }

    /// A parked block is wanted again (a prefix hit): it leaves the LRU list.
    pub fn unpark(&mut self, block: BlockId) -> bool {
        match self.parked_at[block].take() {
            Some(tick) => self.lru.remove(&tick).is_some(),
            None => false,
        }
    }

    // ANCHOR: evict
    /// Reuses the least recently parked block: its name is forgotten, its K and V will
    /// be overwritten. `None` when nothing is parked.
    pub fn evict_lru(&mut self) -> Option<BlockId> {
        let (_, block) = self.lru.pop_first()?;
        self.parked_at[block] = None;
        self.forget(block);
        self.evictions += 1;
        Some(block)
    }
    // ANCHOR_END: evict

    pub fn n_parked(&self) -> usize {
        self.lru.len()
    }

    pub fn is_parked(&self, block: BlockId) -> bool {
        self.parked_at[block].is_some()
    }

    /// Parked blocks, least recently used first.
    pub fn parked(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.lru.values().copied()
    }

    /// Named blocks, and the block each name points to (for invariant checks).
    pub fn names(&self) -> impl Iterator<Item = (u64, BlockId)> + '_ {
        self.by_hash.iter().map(|(&h, &b)| (h, b))
    }
}
