//! A sliding window with attention sinks: bounded memory for unbounded text (book: eviction.md).
//!
//! The cache keeps at most `window` positions per layer: the first `sinks` positions
//! of the text, forever, and the most recent `window - sinks`. StreamingLLM (Xiao et
//! al. 2024) found that a plain window (`sinks = 0`) breaks down as soon as the first
//! tokens leave it — many heads park attention they do not need on the first token
//! (the "attention sink", book: attention.md) — and that keeping 4 of them restores
//! the full cache's perplexity.
//!
//! Storage is a ring: slots `0..sinks` for the sinks, slots `sinks..window` a ring of
//! the recent positions. Evicting the oldest is moving the ring's start by one; a new
//! token overwrites the slot it frees. No row is ever copied, and a step costs the
//! same at position 100 and at position 100 000: attention reads `window` rows.
//!
//! **Positions.** Keys are stored after RoPE, rotated once at their true position;
//! attention reads them as they are, in position order ([`crate::cache::rows::Ring`]).
//! StreamingLLM instead re-numbers positions *within the cache* (sinks 0..4, the
//! window 4..window) and rotates keys at every step, so that a text longer than the
//! model's context never shows it a distance it was not trained on. kvlab keeps true
//! positions: it is the twin of the full cache with the evicted positions masked out
//! (`src/cache/masked.rs`), bit for bit, and a text is limited to the model's
//! context (8192 for SmolLM2), which the forward pass checks as it does for every cache.
//!
//! Eviction happens in `prepare`, *before* the pass writes (as StreamingLLM's
//! `evict_for_space`): the new tokens see at most `window` rows, themselves included.

use crate::cache::buffer::zeroed_buffer;
use crate::cache::rows::Ring;
use crate::cache::view::KvView;
use crate::cache::KvStore;
use crate::config::Config;
use crate::error::{Error, Result};

/// Checks a window's shape: one line naming the problem and the fix.
pub fn check_window(window: usize, sinks: usize) -> Result<()> {
    if window == 0 {
        return Err(Error::InvalidArgument(
            "a window of 0 positions keeps nothing to attend to: give a window of at least 1"
                .into(),
        ));
    }
    if sinks >= window {
        return Err(Error::InvalidArgument(format!(
            "{sinks} sinks leave no room for recent tokens in a window of {window}: \
             give fewer sinks than the window (StreamingLLM uses 4)"
        )));
    }
    Ok(())
}

/// The most new tokens one forward pass may bring when `held` rows are cached: the
/// window must hold the sinks (never evicted) and every new token.
pub fn window_pass_limit(window: usize, sinks: usize, held: usize) -> usize {
    window - held.min(sinks)
}

/// Refuses a pass of `n` new tokens that a window holding `held` rows cannot take
/// beside its sinks (the ring and the paged window, `paged/retention.rs`, alike).
pub fn check_window_pass(window: usize, sinks: usize, held: usize, n: usize) -> Result<()> {
    let limit = window_pass_limit(window, sinks, held);
    if n > limit {
        return Err(Error::InvalidArgument(format!(
            "{n} new tokens do not fit a window of {window} positions with {sinks} sinks: \
             feed at most {limit} tokens per forward pass"
        )));
    }
    Ok(())
}

// ANCHOR: window_cache
/// A KV cache of at most `window` positions: `sinks` first ones, and the most recent.
pub struct WindowCache {
    /// `[n_layers, window, kv_dim]`: per layer, slots `0..sinks` then the ring.
    k_cache: Vec<f32>,
    /// `[n_layers, window, kv_dim]`
    v_cache: Vec<f32>,
    n_layers: usize,
    kv_dim: usize,
    window: usize,
    sinks: usize,
    /// Rows held (at most `window`), in position order: sinks, then the ring's.
    rows: usize,
    /// The ring slot (`0..window - sinks`) of the oldest recent row.
    oldest: usize,
    /// Position of the next token: its RoPE angle.
    next_pos: usize,
    /// Tokens prepared by this pass, written at rows `rows..rows + pending`.
    pending: usize,
}
// ANCHOR_END: window_cache

impl WindowCache {
    /// Reserves `window` positions of every layer, the most it will ever hold.
    pub fn new(config: &Config, window: usize, sinks: usize) -> Result<WindowCache> {
        check_window(window, sinks)?;
        let kv_dim = config.n_kv_heads() * config.head_dim();
        let n_layers = config.num_hidden_layers;
        let dims = [n_layers, window, kv_dim];
        Ok(WindowCache {
            k_cache: zeroed_buffer("the sliding-window KV cache", &dims)?,
            v_cache: zeroed_buffer("the sliding-window KV cache", &dims)?,
            n_layers,
            kv_dim,
            window,
            sinks,
            rows: 0,
            oldest: 0,
            next_pos: 0,
            pending: 0,
        })
    }

    fn ring_len(&self) -> usize {
        self.window - self.sinks
    }

    /// The slot of row `r`: as [`Ring`] computes it for attention.
    fn slot(&self, r: usize) -> usize {
        if r < self.sinks {
            r
        } else {
            self.sinks + (self.oldest + r - self.sinks) % self.ring_len()
        }
    }

    /// The positions held, in order: the first `sinks`, then a run of recent ones.
    pub fn positions(&self) -> Vec<usize> {
        let sinks = self.rows.min(self.sinks);
        let first_recent = self.next_pos - (self.rows - sinks);
        (0..sinks).chain(first_recent..self.next_pos).collect()
    }
}

impl KvStore for WindowCache {
    fn len(&self) -> usize {
        self.next_pos
    }

    fn rows_held(&self) -> usize {
        self.rows
    }

    fn max_pass_tokens(&self) -> usize {
        window_pass_limit(self.window, self.sinks, self.rows)
    }

    // ANCHOR: window_evict
    /// Evicts the oldest recent rows until the new tokens fit: the ring's start moves,
    /// nothing is copied. The sinks stay.
    fn prepare(&mut self, tokens: &[u32]) -> Result<()> {
        let n = tokens.len();
        check_window_pass(self.window, self.sinks, self.rows, n)?;
        let evict = (self.rows + n).saturating_sub(self.window);
        if evict > 0 {
            self.oldest = (self.oldest + evict) % self.ring_len();
            self.rows -= evict;
        }
        self.pending = n;
        Ok(())
    }
    // ANCHOR_END: window_evict

    fn write(&mut self, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        let n = k.len() / self.kv_dim;
        if layer >= self.n_layers || n != self.pending {
            return Err(Error::Internal(format!(
                "window cache: layer {layer} wrote {n} rows, {} prepared",
                self.pending
            )));
        }
        let layer_start = layer * self.window * self.kv_dim;
        for i in 0..n {
            let at = layer_start + self.slot(self.rows + i) * self.kv_dim;
            let row = i * self.kv_dim..(i + 1) * self.kv_dim;
            self.k_cache[at..at + self.kv_dim].copy_from_slice(&k[row.clone()]);
            self.v_cache[at..at + self.kv_dim].copy_from_slice(&v[row]);
        }
        Ok(())
    }

    fn read(&self, layer: usize, end: usize) -> KvView<'_> {
        debug_assert!(end <= self.rows + self.pending);
        let layer_slots =
            layer * self.window * self.kv_dim..(layer + 1) * self.window * self.kv_dim;
        KvView::Ring(Ring {
            keys: &self.k_cache[layer_slots.clone()],
            values: &self.v_cache[layer_slots],
            kv_dim: self.kv_dim,
            sinks: self.sinks,
            ring_len: self.ring_len(),
            oldest: self.oldest,
        })
    }

    fn advance(&mut self, n: usize) {
        self.rows += n;
        self.next_pos += n;
        self.pending = 0;
    }

    /// Forgets positions `len..`. A cut inside the ring drops its newest rows; a cut
    /// below it (into positions already evicted) leaves only the sinks before `len`.
    fn truncate(&mut self, len: usize) {
        if len >= self.next_pos {
            return;
        }
        let dropped = self.next_pos - len;
        let recent = self.rows.saturating_sub(self.sinks);
        self.rows = if dropped <= recent {
            self.rows - dropped
        } else {
            len.min(self.rows.min(self.sinks))
        };
        if self.rows <= self.sinks {
            self.oldest = 0;
        }
        self.next_pos = len;
    }

    fn bytes_reserved(&self) -> usize {
        (self.k_cache.len() + self.v_cache.len()) * size_of::<f32>()
    }

    /// `rows x 2 x n_layers x kv_dim x 4`: never more than `window` positions' worth.
    fn bytes_used(&self) -> usize {
        2 * self.n_layers * self.rows * self.kv_dim * size_of::<f32>()
    }
}
