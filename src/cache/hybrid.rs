//! A cache shaped like the model: every position of a global layer, only the window of
//! a local one (book: sliding-window-model.md, "The cache it needs").
//!
//! Gemma 3 was trained with a window: in a local layer the query at position `p` sees
//! positions `p + 1 - window ..= p` and nothing older, ever. So once position `p` is
//! written, a local layer will never again read a position below `p + 1 - window`:
//! keeping it is waste. vLLM's hybrid KV cache manager frees those blocks per layer
//! group; here each local layer keeps its rows in a ring, and each global layer in a
//! contiguous run as [`super::PreallocatedCache`] does.
//!
//! **How big a ring.** Before a pass of `n` new tokens, the oldest of them (at `len`)
//! sees back to `len + 1 - window`: the ring must hold those `window - 1` positions and
//! the pass's own `n` rows, `window - 1 + n` slots. The cache takes passes of at most
//! `pass` tokens ([`KvStore::max_pass_tokens`]: a longer prompt is prefilled in passes,
//! `generate::prefill_in_passes`), so a local layer reserves `window - 1 + pass` slots
//! and a global layer `capacity`. At 32k positions Gemma 3 270M keeps
//! (3 × 32,768 + 15 × 512) / (18 × 32,768) ≈ 18 % of full attention's rows live
//! (`kvlab kv-size --measure` fills one and counts).
//!
//! **Why bitwise equal.** Position `p` sits in slot `p % slots` (for a global layer,
//! slot `p`), and attention is handed a view whose row `j` *is* position `j`
//! ([`Ring`] with no sinks): it reads the same keys, in the same order, as from the
//! full cache, and its window mask never asks for a row the ring has overwritten. The
//! twin is the full preallocated cache (`tests/gemma_paths.rs`), bit for bit.
//!
//! Unlike `--kv window` (`window.rs`), which imposes a window per *pass* on a model
//! never trained with one, nothing here changes what the model computes: it only stops
//! storing what the model's own mask would never read.
//!
//! **`--kv sliding`** lays the same per-query mask on every layer of a model trained
//! without one, with attention sinks ([`Window`]): [`HybridCache::sliding`] gives every
//! layer a ring of `window - 1 + pass` slots, the first `sinks` of them the sinks'
//! forever. Its plain twin keeps every position and reads them through the same mask.

use crate::cache::buffer::zeroed_buffer;
use crate::cache::rows::{Contiguous, Ring};
use crate::cache::view::KvView;
use crate::cache::KvStore;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::mask::Window;

/// The most new tokens one pass brings to a hybrid cache unless told otherwise: a
/// local layer's ring holds `window - 1 + pass` rows, so the pass size is what a ring
/// reserves beyond the window (and a prefill of 915 tokens runs in 8 passes).
pub const DEFAULT_PASS: usize = 128;

// ANCHOR: hybrid_cache
/// Per-layer retention: a global layer keeps `capacity` positions, a local layer the
/// last `window - 1` before the pass and the pass's own rows, in a ring.
pub struct HybridCache {
    /// One store per layer, in layer order.
    layers: Vec<LayerRows>,
    kv_dim: usize,
    /// Positions seen: the same in every layer between passes.
    len: usize,
    /// The most positions a sequence may reach (prompt + max_new_tokens).
    capacity: usize,
    /// The most new tokens one pass may bring.
    pass: usize,
    /// Tokens prepared by this pass.
    pending: usize,
    /// One past the highest position ever written since the cache was last emptied: a
    /// ring holds intact only positions `high_water - slots..` (a truncate leaves the
    /// rows above `len` stale, but what they overwrote is gone).
    high_water: usize,
    /// The window every layer's queries are masked with (`--kv sliding`); `None` when
    /// the windows are the model's own (the config's local layers).
    mask: Option<Window>,
}

/// One layer's keys and values: a sink `p < sinks` in slot `p`, a later position in
/// slot `sinks + (p - sinks) % (slots - sinks)` (no sinks: slot `p % slots`).
struct LayerRows {
    /// `[slots, kv_dim]`
    k: Vec<f32>,
    /// `[slots, kv_dim]`
    v: Vec<f32>,
    slots: usize,
    /// `Some(w)`: a local layer, whose queries see what the window `w` lets them.
    window: Option<Window>,
}

impl LayerRows {
    /// Slots of the ring after the sinks (at least 1, so that `%` is defined).
    fn ring_len(&self) -> usize {
        let sinks = self.window.map_or(0, |w| w.sinks);
        self.slots.saturating_sub(sinks).max(1)
    }

    /// The slot position `p` is kept in.
    fn slot(&self, p: usize) -> usize {
        match self.window {
            Some(w) if p >= w.sinks => w.sinks + (p - w.sinks) % self.ring_len(),
            Some(_) => p,
            None => p,
        }
    }
}
// ANCHOR_END: hybrid_cache

impl HybridCache {
    /// Reserves, per layer, what that layer will ever read: `capacity` positions of a
    /// global layer, `window - 1 + pass` of a local one (never more than `capacity`).
    pub fn new(config: &Config, capacity: usize, pass: usize) -> Result<HybridCache> {
        let windows =
            (0..config.num_hidden_layers).map(|l| config.layer_window(l).map(Window::plain));
        HybridCache::with_windows(config, capacity, pass, windows.collect(), None)
    }

    /// Every layer masked by `window` (`--cache preallocated --kv sliding`): a ring of
    /// `window - 1 + pass` slots per layer, its first `sinks` kept for the sinks.
    pub fn sliding(
        config: &Config,
        capacity: usize,
        pass: usize,
        window: Window,
    ) -> Result<HybridCache> {
        crate::cache::window::check_window(window.size, window.sinks)?;
        if config.has_local_layers() {
            return Err(Error::InvalidArgument(format!(
                "this model's local layers were trained with their own window of {} positions, and --kv sliding would lay a window of {} on its global layers too: use --kv full (its cache already keeps only each local layer's window)",
                config.gemma.sliding_window.unwrap_or(0),
                window.size
            )));
        }
        let windows = vec![Some(window); config.num_hidden_layers];
        HybridCache::with_windows(config, capacity, pass, windows, Some(window))
    }

    fn with_windows(
        config: &Config,
        capacity: usize,
        pass: usize,
        windows: Vec<Option<Window>>,
        mask: Option<Window>,
    ) -> Result<HybridCache> {
        if pass == 0 {
            return Err(Error::InvalidArgument(
                "a hybrid cache taking 0 tokens per pass can never be filled: give a pass of at least 1 token".into(),
            ));
        }
        let kv_dim = config.n_kv_heads() * config.head_dim();
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for window in windows {
            // The sinks, the `size - sinks - 1` recent positions the pass's first query
            // looks back to, and the pass's own rows.
            let slots = match window {
                Some(w) => w.size.saturating_sub(1).saturating_add(pass).min(capacity),
                None => capacity,
            };
            layers.push(LayerRows {
                k: zeroed_buffer("the hybrid KV cache", &[slots, kv_dim])?,
                v: zeroed_buffer("the hybrid KV cache", &[slots, kv_dim])?,
                slots,
                window,
            });
        }
        Ok(HybridCache {
            layers,
            kv_dim,
            len: 0,
            capacity,
            pass,
            pending: 0,
            high_water: 0,
            mask,
        })
    }

    /// Slots reserved by each layer, in layer order.
    pub fn slots_per_layer(&self) -> Vec<usize> {
        self.layers.iter().map(|l| l.slots).collect()
    }

    /// Rows of `layer` the latest of `len` positions attended to: all of them in a
    /// global layer; in a local one its own and the `window - 1` before it.
    fn live_rows(layer: &LayerRows, len: usize) -> usize {
        match layer.window {
            Some(w) => len.min(w.size),
            None => len,
        }
    }
}

impl KvStore for HybridCache {
    fn len(&self) -> usize {
        self.len
    }

    /// Row `j` of every view is position `j` (a ring's overwritten rows are older than
    /// any local query reads), so attention sees `len` rows, as from the full cache.
    fn rows_held(&self) -> usize {
        self.len
    }

    fn max_pass_tokens(&self) -> usize {
        self.pass
    }

    fn window(&self) -> Option<Window> {
        self.mask
    }

    fn prepare(&mut self, tokens: &[u32]) -> Result<()> {
        let n = tokens.len();
        if self.len + n > self.capacity {
            return Err(Error::CacheFull {
                capacity: self.capacity,
                used: self.len,
                requested: n,
            });
        }
        if n > self.pass {
            return Err(Error::InvalidArgument(format!(
                "{n} new tokens overrun the local layers' rings, sized for passes of {}: feed at most {} tokens per forward pass (generate::prefill_in_passes)",
                self.pass, self.pass
            )));
        }
        self.pending = n;
        Ok(())
    }

    // ANCHOR: hybrid_write
    /// Position `len + i` goes to its slot (`(len + i) % slots` without sinks): in a
    /// local layer it overwrites a position a ring older, which no query from `len` on
    /// can see.
    fn write(&mut self, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        let kv_dim = self.kv_dim;
        let n = k.len() / kv_dim;
        let Some(rows) = self.layers.get_mut(layer).filter(|_| n == self.pending) else {
            return Err(Error::Internal(format!(
                "hybrid cache: layer {layer} wrote {n} rows, {} prepared",
                self.pending
            )));
        };
        for i in 0..n {
            let at = rows.slot(self.len + i) * kv_dim;
            let row = i * kv_dim..(i + 1) * kv_dim;
            rows.k[at..at + kv_dim].copy_from_slice(&k[row.clone()]);
            rows.v[at..at + kv_dim].copy_from_slice(&v[row]);
        }
        Ok(())
    }
    // ANCHOR_END: hybrid_write

    fn read(&self, layer: usize, end: usize) -> KvView<'_> {
        let rows = &self.layers[layer];
        debug_assert!(end <= self.len + self.pending);
        match rows.window {
            None => KvView::Contiguous(Contiguous::new(
                &rows.k[..end * self.kv_dim],
                &rows.v[..end * self.kv_dim],
                self.kv_dim,
            )),
            // The oldest at the ring's first slot: row `j` is position `j`'s slot.
            Some(w) => KvView::Ring(Ring {
                keys: &rows.k,
                values: &rows.v,
                kv_dim: self.kv_dim,
                sinks: w.sinks,
                ring_len: rows.ring_len(),
                oldest: 0,
            }),
        }
    }

    fn advance(&mut self, n: usize) {
        self.len += n;
        self.pending = 0;
        self.high_water = self.high_water.max(self.len);
    }

    /// Forgets positions `len..`. A ring keeps its last `slots` positions; a cut so deep
    /// that a local layer no longer holds the `window - 1` before it (a chat turn that
    /// diverges far back) cannot be served, and forgets everything: callers read
    /// [`KvStore::len`] after a truncate and feed from there. A speculative rollback
    /// (at most one pass) always fits.
    fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        // A local layer must still hold the recent positions before `len` that the
        // query at `len` sees (none for a window of 1; the sinks are never overwritten);
        // intact are the last `ring_len` positions written after the sinks.
        let served = self.layers.iter().all(|rows| match rows.window {
            None => true,
            Some(w) => {
                let oldest_seen = w.forgotten_below(len).max(w.sinks);
                oldest_seen >= len || oldest_seen >= self.high_water.saturating_sub(rows.ring_len())
            }
        });
        if served {
            self.len = len;
        } else {
            self.len = 0;
            self.high_water = 0;
        }
    }

    fn bytes_reserved(&self) -> usize {
        let slots: usize = self.layers.iter().map(|l| l.slots).sum();
        2 * slots * self.kv_dim * size_of::<f32>()
    }

    /// Rows the latest token's attention read, summed over layers: `len` in a global
    /// layer, at most `window` in a local one.
    fn bytes_used(&self) -> usize {
        let rows: usize = self
            .layers
            .iter()
            .map(|l| HybridCache::live_rows(l, self.len))
            .sum();
        2 * rows * self.kv_dim * size_of::<f32>()
    }
}
