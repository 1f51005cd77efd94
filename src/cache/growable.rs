//! The growable contiguous cache: reserve only what is stored, double when full.
//!
//! This is what `Vec::push` does, and what Hugging Face's `DynamicCache` does with
//! `torch.cat` at every step (there, without the doubling: each step copies the whole
//! cache). It needs no guess of `max_new_tokens`, and its reservation follows the
//! tokens in steps (book: cache-layouts.md). The price is paid at every growth:
//!
//! - **a copy of everything stored**: the new buffer is allocated, each layer's `len`
//!   rows of K and V are copied over, the old buffer is dropped. With doubling, the
//!   copies add up to less than twice the final size (1 + 2 + 4 + ... < 2N): amortised
//!   O(1) per token, but the token that triggers a growth waits for the whole copy;
//! - **a peak of old + new**: during the copy both buffers exist, up to 3x what is
//!   stored, which is exactly when a memory-tight server runs out;
//! - **the cache moves**: any pointer into it (a CUDA graph, a kernel argument) is
//!   stale after a growth. Engines preallocate or page instead (book: cache-layouts.md, paged-attention.md).
//!
//! Layout: as the preallocated cache, `[n_layers, capacity, n_kv_heads, head_dim]`,
//! so each layer's rows stay contiguous for attention; `capacity` changes on growth.

use crate::cache::buffer::zeroed_buffer;
use crate::cache::rows::Contiguous;
use crate::cache::view::KvView;
use crate::cache::KvStore;
use crate::config::Config;
use crate::error::{Error, Result};

/// Positions reserved before the first token: one doubling step from nothing.
pub const INITIAL_CAPACITY: usize = 16;

// ANCHOR: growable
/// A contiguous KV cache that doubles its buffers (with a copy) whenever it is full.
pub struct GrowableCache {
    /// `[n_layers, capacity, n_kv_heads, head_dim]`
    k_cache: Vec<f32>,
    /// `[n_layers, capacity, n_kv_heads, head_dim]`
    v_cache: Vec<f32>,
    n_layers: usize,
    kv_dim: usize,
    /// Positions the buffers hold now; grows.
    capacity: usize,
    len: usize,
    /// Growths so far, and the bytes they copied: the cost of not preallocating.
    pub growths: usize,
    pub bytes_copied: usize,
    /// Most bytes held at once: old and new buffers during the last copy.
    pub peak_bytes: usize,
}
// ANCHOR_END: growable

impl GrowableCache {
    pub fn new(config: &Config, initial_capacity: usize) -> Result<GrowableCache> {
        let kv_dim = config.n_kv_heads() * config.head_dim();
        let n_layers = config.num_hidden_layers;
        let k_cache = zeroed(n_layers, initial_capacity, kv_dim)?;
        let size = k_cache.len();
        let cache = GrowableCache {
            v_cache: zeroed(n_layers, initial_capacity, kv_dim)?,
            k_cache,
            n_layers,
            kv_dim,
            capacity: initial_capacity,
            len: 0,
            growths: 0,
            bytes_copied: 0,
            peak_bytes: 2 * size * size_of::<f32>(),
        };
        Ok(cache)
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    // ANCHOR: grow
    /// Moves the cache into buffers of `new_capacity` positions: allocate, copy every
    /// layer's `len` rows, drop the old buffers. Costs `2 x n_layers x len x kv_dim`
    /// floats of copying, and old + new bytes at the peak.
    fn grow(&mut self, new_capacity: usize) -> Result<()> {
        let row = self.kv_dim;
        let mut k_new = zeroed(self.n_layers, new_capacity, row)?;
        let mut v_new = zeroed(self.n_layers, new_capacity, row)?;
        for layer in 0..self.n_layers {
            let from = layer * self.capacity * row..(layer * self.capacity + self.len) * row;
            let to = layer * new_capacity * row;
            k_new[to..to + from.len()].copy_from_slice(&self.k_cache[from.clone()]);
            v_new[to..to + from.len()].copy_from_slice(&self.v_cache[from]);
        }
        let old_bytes = self.bytes_reserved();
        self.k_cache = k_new;
        self.v_cache = v_new;
        self.capacity = new_capacity;
        self.growths += 1;
        self.bytes_copied += 2 * self.n_layers * self.len * row * size_of::<f32>();
        self.peak_bytes = self.peak_bytes.max(old_bytes + self.bytes_reserved());
        Ok(())
    }
    // ANCHOR_END: grow
}

/// A zeroed `[n_layers, capacity, kv_dim]` buffer, or a clear error (instead of an abort).
fn zeroed(n_layers: usize, capacity: usize, kv_dim: usize) -> Result<Vec<f32>> {
    zeroed_buffer("the growable KV cache", &[n_layers, capacity, kv_dim])
}

impl KvStore for GrowableCache {
    fn len(&self) -> usize {
        self.len
    }

    /// Doubles (at least to what is needed) when the new tokens do not fit.
    fn prepare(&mut self, tokens: &[u32]) -> Result<()> {
        let needed = self.len + tokens.len();
        if needed > self.capacity {
            self.grow(needed.max(2 * self.capacity))?;
        }
        Ok(())
    }

    fn write(&mut self, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        let n = k.len() / self.kv_dim;
        if layer >= self.n_layers {
            return Err(Error::Internal(format!(
                "layer {layer} written in a cache of {} layers",
                self.n_layers
            )));
        }
        if self.len + n > self.capacity {
            return Err(Error::CacheFull {
                capacity: self.capacity,
                used: self.len,
                requested: n,
            });
        }
        let start = (layer * self.capacity + self.len) * self.kv_dim;
        self.k_cache[start..start + k.len()].copy_from_slice(k);
        self.v_cache[start..start + v.len()].copy_from_slice(v);
        Ok(())
    }

    fn read(&self, layer: usize, end: usize) -> KvView<'_> {
        let start = layer * self.capacity * self.kv_dim;
        let stop = start + end * self.kv_dim;
        KvView::Contiguous(Contiguous::new(
            &self.k_cache[start..stop],
            &self.v_cache[start..stop],
            self.kv_dim,
        ))
    }

    fn advance(&mut self, n: usize) {
        self.len += n;
    }

    /// Keeps the buffers: a growable cache never shrinks (neither does `Vec`).
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    fn bytes_reserved(&self) -> usize {
        (self.k_cache.len() + self.v_cache.len()) * size_of::<f32>()
    }

    fn bytes_used(&self) -> usize {
        2 * self.n_layers * self.len * self.kv_dim * size_of::<f32>()
    }

    fn bytes_copied(&self) -> usize {
        self.bytes_copied
    }
}
