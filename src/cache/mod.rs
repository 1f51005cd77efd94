//! Where the KV cache lives: one interface, four layouts (book: cache-layouts.md, paged-attention.md, prefix-caching.md).
//!
//! The model's cached path only needs a handful of verbs from a cache ([`KvStore`]):
//! how many positions it holds, make room for the next tokens, write one layer's K
//! and V, hand attention a view of one layer, mark the positions filled. Each layout
//! is one struct in one file, with the same verbs (as candle's `kv_cache.rs`):
//!
//! | layout | file | reserves | a new token costs |
//! |---|---|---|---|
//! | preallocated | [`preallocated`] | prompt + max_new_tokens, up front | a copy of one row |
//! | growable | [`growable`] | what is stored, doubled when full | a row, and now and then a copy of *everything* |
//! | paged | [`paged`] (+ `seq`, `block_pool`, `invariants`) | whole blocks of `block_size` positions, on demand | a row, and a block every `block_size` tokens |
//! | prefix | [`paged`] + `paged/prefix.rs` | blocks, shared between sequences with the same prefix | the same, minus what another request computed |
//!
//! All four give bitwise-identical logits (`tests/caches.rs`): attention does the same
//! arithmetic whatever the layout; only the address of row `j` differs
//! ([`rows::KvRows`]).
//!
//! What is kept of each position (f32, int8, int4; all of it, or a window) is a second,
//! independent choice: the `--kv` policy ([`policy`], [`quant`]; part "Shrinking the cache").
//! The evicting policies keep at most a fixed number of positions: [`window`] (the latest,
//! and the first few as attention sinks, in a ring) and [`h2o`] (the most attended),
//! each the bitwise twin of the full cache with the evicted positions masked out
//! ([`masked`], `tests/eviction.rs`; book: eviction.md). They hold fewer rows than
//! positions seen, hence [`KvStore::rows_held`] beside [`KvStore::len`].
//!
//! A model trained with a window (Gemma 3's local layers) needs less than every
//! position: [`hybrid`] keeps a ring of each local layer's window beside the global
//! layers' full rows, the twin of the full cache (book: sliding-window-model.md).
//!
//! Every layout reports the bytes it **reserves** and the bytes that hold **live**
//! positions; the difference is the waste the chapters "Cache layouts" and
//! "Capacity" measure.

pub mod buffer;
pub mod build;
pub mod element;
pub mod growable;
pub mod h2o;
pub mod hybrid;
pub mod masked;
pub mod paged;
pub mod policy;
pub mod preallocated;
pub mod quant;
pub mod rows;
pub mod source;
pub mod view;
pub mod window;

use crate::cache::view::KvView;
use crate::config::Config;
use crate::error::Result;
use crate::mask::Window;
use serde::Serialize;

pub use build::{contiguous_full, new_policy_store, new_store};
pub use element::KvElement;
pub use growable::GrowableCache;
pub use h2o::H2oCache;
pub use hybrid::HybridCache;
pub use masked::{MaskRule, MaskedCache};
pub use paged::{PagedCache, PagedSeq, SeqId};
pub use policy::{KvPolicy, PolicyParams, RowCodes};
pub use preallocated::PreallocatedCache;
pub use window::WindowCache;

/// Positions per block when none is given: vLLM's default on GPUs (Kwon et al. 2023
/// found 16-32 a good trade between waste in the last block and gather overhead).
pub const DEFAULT_BLOCK_SIZE: usize = 16;

// ANCHOR: kv_store
/// The verbs the model's cached path uses, in the order one forward pass calls them:
/// `len` → `prepare` → for each layer (`write` → `read`) → `advance`.
pub trait KvStore {
    /// Positions seen: the position of the next token (its RoPE angle).
    fn len(&self) -> usize;

    /// Rows held, which attention reads: `len()`, unless the cache evicts (then at
    /// most its window or budget; `window.rs`, `h2o.rs`). Read after `prepare`, which
    /// is where an evicting cache makes room.
    fn rows_held(&self) -> usize {
        self.len()
    }

    /// True when the cache wants [`KvStore::observe`] called after each layer's
    /// attention (H2O ranks rows by the attention they receive); false costs nothing.
    fn observes_attention(&self) -> bool {
        false
    }

    /// The attention each held row received in layer `layer` during this pass, summed
    /// over the pass's query rows and every query head: `[rows_held() + n]`.
    fn observe(&mut self, _layer: usize, _received: &[f32]) {}

    /// The most new tokens the next forward pass may bring: an evicting cache must hold
    /// them all beside what it never evicts (a prompt longer than that is fed in chunks).
    fn max_pass_tokens(&self) -> usize {
        usize::MAX
    }

    /// The sliding window attention reads this cache through (`--kv sliding`): every
    /// query sees its sinks and its recent positions only ([`Window`]), so the cache may
    /// give back what no later query will see. `None`: the whole prefix (or the model's
    /// own windows, Gemma 3's local layers, which the config gives).
    fn window(&self) -> Option<Window> {
        None
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes room for `tokens`, the ids of positions `len..len + tokens.len()` that this
    /// forward pass will write, *before* any layer writes: an error (cache full, budget
    /// exhausted) leaves the cache as it was. A prefix cache keeps the ids to name blocks.
    fn prepare(&mut self, tokens: &[u32]) -> Result<()>;

    /// Writes layer `layer`'s K and V of the prepared positions. `k`, `v`: `[n, kv_dim]`.
    fn write(&mut self, layer: usize, k: &[f32], v: &[f32]) -> Result<()>;

    /// Layer `layer`'s keys and values for rows `0..end` (positions `0..end` unless the
    /// cache evicts), in position order, laid out as this cache keeps them.
    fn read(&self, layer: usize, end: usize) -> KvView<'_>;

    /// Marks the `n` prepared positions filled, once every layer has written them.
    fn advance(&mut self, n: usize);

    /// Forgets positions `len..` (a chat turn that diverges from what is cached). A
    /// cache that cannot serve so deep a cut (a local layer's ring, `hybrid.rs`) forgets
    /// everything instead: read [`KvStore::len`] after, and feed from there.
    fn truncate(&mut self, len: usize);

    /// Bytes this cache holds for itself: what another request cannot use.
    fn bytes_reserved(&self) -> usize;

    /// Bytes holding live positions: `len x 2 x n_layers x kv_dim x 4`.
    fn bytes_used(&self) -> usize;

    /// Bytes copied so far to reorganise the cache (a growth, a copy-on-write): work
    /// that a preallocated cache never does.
    fn bytes_copied(&self) -> usize {
        0
    }
}
// ANCHOR_END: kv_store

impl<S: KvStore + ?Sized> KvStore for Box<S> {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn rows_held(&self) -> usize {
        (**self).rows_held()
    }
    fn observes_attention(&self) -> bool {
        (**self).observes_attention()
    }
    fn observe(&mut self, layer: usize, received: &[f32]) {
        (**self).observe(layer, received)
    }
    fn max_pass_tokens(&self) -> usize {
        (**self).max_pass_tokens()
    }
    fn window(&self) -> Option<Window> {
        (**self).window()
    }
    fn prepare(&mut self, tokens: &[u32]) -> Result<()> {
        (**self).prepare(tokens)
    }
    fn write(&mut self, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        (**self).write(layer, k, v)
    }
    fn read(&self, layer: usize, end: usize) -> KvView<'_> {
        (**self).read(layer, end)
    }
    fn advance(&mut self, n: usize) {
        (**self).advance(n)
    }
    fn truncate(&mut self, len: usize) {
        (**self).truncate(len)
    }
    fn bytes_reserved(&self) -> usize {
        (**self).bytes_reserved()
    }
    fn bytes_used(&self) -> usize {
        (**self).bytes_used()
    }
    fn bytes_copied(&self) -> usize {
        (**self).bytes_copied()
    }
}

/// Which layout the cached path keeps its K and V in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheKind {
    /// Contiguous, reserved for prompt + max_new_tokens before the first token (a
    /// local layer's window only, for a model trained with one: [`hybrid`]).
    #[default]
    Preallocated,
    /// Contiguous, doubled (with a copy) whenever it is full.
    Growable,
    /// Fixed-size blocks from a pool, taken as the sequence crosses into each one.
    Paged,
    /// Paged, with full blocks shared by every sequence that has the same prefix.
    Prefix,
}

impl CacheKind {
    pub const ALL: [CacheKind; 4] = [
        CacheKind::Preallocated,
        CacheKind::Growable,
        CacheKind::Paged,
        CacheKind::Prefix,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CacheKind::Preallocated => "preallocated",
            CacheKind::Growable => "growable",
            CacheKind::Paged => "paged",
            CacheKind::Prefix => "prefix",
        }
    }
}

/// A cache's bytes: what it holds for itself, and what of that holds live positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct KvBytes {
    /// Bytes this cache keeps for itself: what another request cannot use.
    pub reserved: usize,
    /// Bytes holding live positions.
    pub used: usize,
}

impl KvBytes {
    /// The bytes of `store` now.
    pub fn of(store: &(impl KvStore + ?Sized)) -> KvBytes {
        KvBytes {
            reserved: store.bytes_reserved(),
            used: store.bytes_used(),
        }
    }
}

/// Bytes of one position (K and V, every layer) in kvlab's f32 caches.
pub fn bytes_per_token(config: &Config) -> usize {
    crate::kv_size::KvShape::of(config, crate::kv_size::KvDtype::F32).bytes_per_token()
}
