//! Heavy hitters (H2O, Zhang et al. 2023): keep the tokens attention uses most (book: eviction.md).
//!
//! Under a fixed `budget` of positions per layer, the cache keeps the `recent` most
//! recent tokens, and fills the rest with the "heavy hitters": the tokens that have
//! received the most attention so far. H2O observed that accumulated attention is
//! concentrated on few tokens (a power law), and that keeping them with a recent
//! window matches the full cache with 20% of it (10% heavy + 10% recent).
//!
//! **How scores accumulate.** After each layer's attention, the model hands the cache
//! `received[r] = Σ_queries Σ_heads p[query, head, r]` ([`KvStore::observe`]), and row
//! `r`'s score grows by it: a running sum over every query that has seen the row
//! (prefill and decode alike), **per layer**, summed over that layer's query heads.
//! The paper's code (`H2OKVCache_LayerWise`) keeps one score per layer *and head*
//! and lets each head keep different tokens; summing over heads keeps one kept set
//! per layer, so a cached row stays a whole `[kv_dim]` row and attention reads it
//! like any other layout. Bookkeeping per layer: `budget x (score f32 + slot + position)`.
//!
//! **Eviction.** In `prepare`, before the pass writes (as in the window cache): while
//! the rows held plus the new tokens exceed the budget, evict the row with the lowest
//! score among those outside the recent window, the earliest on a tie. A freed slot is
//! reused by a new token; rows are listed in position order ([`Indexed`]), so
//! attention sums over them in the same order as a full cache with the evicted
//! positions masked out (`src/cache/masked.rs`, the twin). Positions are true
//! positions, as in the window cache.

use crate::cache::buffer::zeroed_buffer;
use crate::cache::rows::{Contiguous, Indexed};
use crate::cache::view::KvView;
use crate::cache::KvStore;
use crate::config::Config;
use crate::error::{Error, Result};

/// Checks an H2O budget: one line naming the problem and the fix.
pub fn check_budget(budget: usize, recent: usize) -> Result<()> {
    if budget == 0 {
        return Err(Error::InvalidArgument(
            "an H2O budget of 0 positions keeps nothing to attend to: give a budget of at least 1"
                .into(),
        ));
    }
    if recent > budget {
        return Err(Error::InvalidArgument(format!(
            "a recent window of {recent} does not fit an H2O budget of {budget}: \
             give a recent window of at most the budget (H2O uses half)"
        )));
    }
    Ok(())
}

/// One layer's rows, in position order.
#[derive(Default)]
struct Rows {
    /// Row `r` lives in slot `slots[r]` of the layer's storage.
    slots: Vec<usize>,
    /// Row `r`'s position.
    positions: Vec<usize>,
    /// Row `r`'s accumulated attention: the heavy-hitter score.
    scores: Vec<f32>,
    /// Slots no row uses.
    free: Vec<usize>,
}

// ANCHOR: h2o_cache
/// A KV cache of at most `budget` positions per layer: the `recent` latest, and the
/// rest chosen by accumulated attention.
pub struct H2oCache {
    /// `[n_layers, budget, kv_dim]`
    k_cache: Vec<f32>,
    /// `[n_layers, budget, kv_dim]`
    v_cache: Vec<f32>,
    n_layers: usize,
    kv_dim: usize,
    budget: usize,
    recent: usize,
    /// Per layer: each layer keeps its own heavy hitters.
    layers: Vec<Rows>,
    /// Rows held before this pass (the same in every layer).
    rows: usize,
    next_pos: usize,
    pending: usize,
}
// ANCHOR_END: h2o_cache

/// The rows to evict from `rows` so that `need` slots free up: the `need` lowest
/// scores among rows `0..candidates` (those outside the recent window), the earliest
/// first on a tie. Returned in increasing row order.
// ANCHOR: h2o_choose
pub fn choose_evictions(scores: &[f32], candidates: usize, need: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..candidates).collect();
    // Rows are in position order, so the row index breaks ties by position.
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(a.cmp(&b)));
    let mut evict = order[..need].to_vec();
    evict.sort_unstable();
    evict
}
// ANCHOR_END: h2o_choose

impl H2oCache {
    /// Reserves `budget` positions of every layer, the most it will ever hold.
    pub fn new(config: &Config, budget: usize, recent: usize) -> Result<H2oCache> {
        check_budget(budget, recent)?;
        let kv_dim = config.n_kv_heads() * config.head_dim();
        let n_layers = config.num_hidden_layers;
        let dims = [n_layers, budget, kv_dim];
        let layers = (0..n_layers)
            .map(|_| Rows {
                free: (0..budget).rev().collect(),
                ..Rows::default()
            })
            .collect();
        Ok(H2oCache {
            k_cache: zeroed_buffer("the H2O KV cache", &dims)?,
            v_cache: zeroed_buffer("the H2O KV cache", &dims)?,
            n_layers,
            kv_dim,
            budget,
            recent,
            layers,
            rows: 0,
            next_pos: 0,
            pending: 0,
        })
    }

    /// Evicts, in every layer, its lowest-scoring rows at positions below `protected`
    /// until it holds `keep` rows; `keep` becomes the rows held.
    fn evict_to(&mut self, keep: usize, protected: usize) {
        for rows in &mut self.layers {
            let need = rows.slots.len() - keep;
            // `prepare` always finds enough rows outside the recent window (a pass
            // brings at most `budget` tokens); a deep `truncate` may not, and then
            // takes the lowest scores of the recent window too.
            let candidates = rows.positions.partition_point(|&p| p < protected).max(need);
            for r in choose_evictions(&rows.scores, candidates, need)
                .into_iter()
                .rev()
            {
                rows.free.push(rows.slots.remove(r));
                rows.positions.remove(r);
                rows.scores.remove(r);
            }
        }
        self.rows = keep;
    }

    /// The positions layer `layer` holds, in order.
    pub fn positions(&self, layer: usize) -> &[usize] {
        &self.layers[layer].positions
    }

    /// Layer `layer`'s accumulated attention per row held.
    pub fn scores(&self, layer: usize) -> &[f32] {
        &self.layers[layer].scores
    }
}

impl KvStore for H2oCache {
    fn len(&self) -> usize {
        self.next_pos
    }

    fn rows_held(&self) -> usize {
        self.rows
    }

    fn observes_attention(&self) -> bool {
        true
    }

    fn max_pass_tokens(&self) -> usize {
        self.budget
    }

    // ANCHOR: h2o_observe
    /// Adds this pass's attention to each row's score (held rows, then the new ones).
    fn observe(&mut self, layer: usize, received: &[f32]) {
        for (score, &p) in self.layers[layer].scores.iter_mut().zip(received) {
            *score += p;
        }
    }
    // ANCHOR_END: h2o_observe

    // ANCHOR: h2o_evict
    /// Evicts, in every layer, the lowest-scoring rows outside the recent window until
    /// the new tokens fit the budget.
    fn prepare(&mut self, tokens: &[u32]) -> Result<()> {
        let n = tokens.len();
        if n > self.budget {
            return Err(Error::InvalidArgument(format!(
                "{n} new tokens do not fit an H2O budget of {} positions: \
                 feed at most {} tokens per forward pass",
                self.budget, self.budget
            )));
        }
        // After this pass, positions from `protected` on are the `recent` latest.
        let protected = (self.next_pos + n).saturating_sub(self.recent);
        self.evict_to(self.budget.min(self.rows + n) - n, protected);
        self.pending = n;
        Ok(())
    }
    // ANCHOR_END: h2o_evict

    fn write(&mut self, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        let n = k.len() / self.kv_dim;
        if layer >= self.n_layers || n != self.pending {
            return Err(Error::Internal(format!(
                "H2O cache: layer {layer} wrote {n} rows, {} prepared",
                self.pending
            )));
        }
        let layer_start = layer * self.budget * self.kv_dim;
        let rows = &mut self.layers[layer];
        for i in 0..n {
            let slot = rows
                .free
                .pop()
                .ok_or_else(|| Error::Internal("H2O cache: no free slot after eviction".into()))?;
            rows.slots.push(slot);
            rows.positions.push(self.next_pos + i);
            rows.scores.push(0.0);
            let at = layer_start + slot * self.kv_dim;
            let row = i * self.kv_dim..(i + 1) * self.kv_dim;
            self.k_cache[at..at + self.kv_dim].copy_from_slice(&k[row.clone()]);
            self.v_cache[at..at + self.kv_dim].copy_from_slice(&v[row]);
        }
        Ok(())
    }

    fn read(&self, layer: usize, end: usize) -> KvView<'_> {
        let layer_slots =
            layer * self.budget * self.kv_dim..(layer + 1) * self.budget * self.kv_dim;
        KvView::Indexed(Indexed {
            store: Contiguous::new(
                &self.k_cache[layer_slots.clone()],
                &self.v_cache[layer_slots],
                self.kv_dim,
            ),
            slots: &self.layers[layer].slots[..end],
        })
    }

    fn advance(&mut self, n: usize) {
        self.rows += n;
        self.next_pos += n;
        self.pending = 0;
    }

    /// Forgets positions `len..` in every layer (their slots become free). Layers keep
    /// different positions, so a cut below the recent window can leave them with
    /// different counts: each then evicts its lowest scores down to the smallest count.
    fn truncate(&mut self, len: usize) {
        if len >= self.next_pos {
            return;
        }
        for rows in &mut self.layers {
            let keep = rows.positions.partition_point(|&p| p < len);
            rows.free.extend(rows.slots.drain(keep..));
            rows.positions.truncate(keep);
            rows.scores.truncate(keep);
        }
        self.next_pos = len;
        let fewest = self.layers.iter().map(|r| r.slots.len()).min().unwrap_or(0);
        self.evict_to(fewest, len.saturating_sub(self.recent));
    }

    fn bytes_reserved(&self) -> usize {
        (self.k_cache.len() + self.v_cache.len()) * size_of::<f32>()
    }

    /// `rows x 2 x n_layers x kv_dim x 4`: never more than `budget` positions' worth.
    fn bytes_used(&self) -> usize {
        2 * self.n_layers * self.rows * self.kv_dim * size_of::<f32>()
    }
}
