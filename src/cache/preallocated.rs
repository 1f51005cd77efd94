//! The KV cache: every layer's keys and values for every position seen so far.
//!
//! During prefill (预填充) the model computes K and V for the whole prompt and
//! writes them here; each decode step (解码) appends one position per layer and
//! attends over everything stored. The cache only grows.
//!
//! Layout (llama2.c's `key_cache`): `[n_layers, capacity, n_kv_heads, head_dim]`,
//! contiguous, allocated once for `prompt + max_new_tokens` positions. It stores
//! `n_kv_heads` heads — under GQA fewer than the query heads, which is the
//! whole point of GQA (Ainslie et al. 2023): the cache shrinks by `n_heads / n_kv_heads`.
//!
//! This is the *preallocated* layout, the first of four behind [`KvStore`]; the
//! others (growable, paged, prefix-shared) are its siblings in `src/cache/`.
//! Book: kv-cache.md.

use crate::cache::buffer::zeroed_buffer;
use crate::cache::rows::Contiguous;
use crate::cache::view::KvView;
use crate::cache::KvStore;
use crate::config::Config;
use crate::error::{Error, Result};

// ANCHOR: kv_cache
/// A preallocated, contiguous KV cache for one sequence, in f32.
#[derive(Clone)]
pub struct PreallocatedCache {
    /// `[n_layers, capacity, n_kv_heads, head_dim]`
    k_cache: Vec<f32>,
    /// `[n_layers, capacity, n_kv_heads, head_dim]`
    v_cache: Vec<f32>,
    n_layers: usize,
    /// Positions reserved per layer (prompt + max_new_tokens).
    capacity: usize,
    /// `n_kv_heads * head_dim`: the width of one position's K (or V) in one layer.
    kv_dim: usize,
    /// Positions filled so far (the same in every layer between forward passes).
    len: usize,
}
// ANCHOR_END: kv_cache

impl PreallocatedCache {
    /// Reserves room for `capacity` positions of every layer, up front (engines
    /// preallocate for `max_new_tokens` before decoding starts; book: cache-layouts.md).
    /// Fails with [`Error::OutOfMemory`] instead of aborting when the memory is not there.
    pub fn new(config: &Config, capacity: usize) -> Result<PreallocatedCache> {
        let kv_dim = config.n_kv_heads() * config.head_dim();
        let n_layers = config.num_hidden_layers;
        let dims = [n_layers, capacity, kv_dim];
        Ok(PreallocatedCache {
            k_cache: zeroed_buffer("the preallocated KV cache", &dims)?,
            v_cache: zeroed_buffer("the preallocated KV cache", &dims)?,
            n_layers,
            capacity,
            kv_dim,
            len: 0,
        })
    }

    /// Positions stored.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Checks that `n` more positions fit, before any layer writes anything,
    /// so a failed forward pass leaves the cache as it was.
    pub fn reserve(&self, n: usize) -> Result<()> {
        if self.len + n > self.capacity {
            return Err(Error::CacheFull {
                capacity: self.capacity,
                used: self.len,
                requested: n,
            });
        }
        Ok(())
    }

    // ANCHOR: append
    /// Writes layer `layer`'s K and V for the `n` new positions `len..len + n`.
    /// `k` and `v` are `[n, n_kv_heads * head_dim]`.
    pub fn write(&mut self, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        let n = k.len() / self.kv_dim;
        self.reserve(n)?;
        let start = (layer * self.capacity + self.len) * self.kv_dim;
        self.k_cache[start..start + k.len()].copy_from_slice(k);
        self.v_cache[start..start + v.len()].copy_from_slice(v);
        Ok(())
    }

    /// Layer `layer`'s keys and values for positions `0..end`, each `[end, n_kv_heads * head_dim]`.
    pub fn read(&self, layer: usize, end: usize) -> (&[f32], &[f32]) {
        let start = layer * self.capacity * self.kv_dim;
        let stop = start + end * self.kv_dim;
        (&self.k_cache[start..stop], &self.v_cache[start..stop])
    }

    /// Marks `n` new positions as filled, once every layer has written them.
    pub fn advance(&mut self, n: usize) {
        self.len += n;
    }
    // ANCHOR_END: append

    /// Forgets every position (the memory stays reserved), e.g. to serve a new request.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Forgets positions `len..`: the rows stay allocated and are overwritten by
    /// the next write (benches measure one decode step at a fixed context this way).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Bytes reserved: what `kvlab kv-size` predicts for this shape in f32.
    pub fn bytes_allocated(&self) -> usize {
        (self.k_cache.len() + self.v_cache.len()) * std::mem::size_of::<f32>()
    }

    /// Bytes holding live positions.
    pub fn bytes_used(&self) -> usize {
        2 * self.n_layers * self.len * self.kv_dim * std::mem::size_of::<f32>()
    }
}

/// The preallocated layout behind the common interface: each verb is the one above.
impl KvStore for PreallocatedCache {
    fn len(&self) -> usize {
        self.len
    }
    fn prepare(&mut self, tokens: &[u32]) -> Result<()> {
        self.reserve(tokens.len())
    }
    fn write(&mut self, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        PreallocatedCache::write(self, layer, k, v)
    }
    fn read(&self, layer: usize, end: usize) -> KvView<'_> {
        let (keys, values) = PreallocatedCache::read(self, layer, end);
        KvView::Contiguous(Contiguous::new(keys, values, self.kv_dim))
    }
    fn advance(&mut self, n: usize) {
        PreallocatedCache::advance(self, n)
    }
    fn truncate(&mut self, len: usize) {
        PreallocatedCache::truncate(self, len)
    }
    fn bytes_reserved(&self) -> usize {
        self.bytes_allocated()
    }
    fn bytes_used(&self) -> usize {
        PreallocatedCache::bytes_used(self)
    }
}
