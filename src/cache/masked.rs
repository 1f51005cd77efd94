//! The plain twin of the evicting caches: a full cache, and a mask (book: eviction.md).
//!
//! An evicting cache (`window.rs`, `h2o.rs`) claims that dropping a position's K and V
//! is the same as keeping them and masking that position out of attention. This cache
//! does the second literally: it stores *every* position in a [`PreallocatedCache`]
//! and keeps, per layer, the list of positions attention may still read. Each rule is
//! written the plainest way, from the definition, with none of the evicting caches'
//! machinery (no ring, no slot reuse, no sort):
//! - window: a position stays if it is one of the first `sinks`, or if it is among the
//!   latest that fit in the window with the new tokens;
//! - H2O: a score per *position*; while over budget, mask the lowest-scoring position
//!   outside the recent window, one at a time.
//!
//! Same kept positions in the same order ⇒ attention does the same arithmetic ⇒ the
//! same logits, bit for bit (`tests/eviction.rs`). It holds everything, so it saves
//! no memory: it exists to be compared with.

use crate::cache::h2o::check_budget;
use crate::cache::rows::{Contiguous, Indexed};
use crate::cache::view::KvView;
use crate::cache::window::{check_window, window_pass_limit};
use crate::cache::{KvStore, PreallocatedCache};
use crate::config::Config;
use crate::error::{Error, Result};

/// Which positions the mask keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskRule {
    /// The first `sinks` positions and the latest, `window` in all.
    Window { window: usize, sinks: usize },
    /// The `recent` latest and the highest accumulated attention, `budget` in all.
    H2o { budget: usize, recent: usize },
}

// ANCHOR: masked_cache
/// Every position's K and V, and per layer the positions attention may read.
pub struct MaskedCache {
    full: PreallocatedCache,
    rule: MaskRule,
    kv_dim: usize,
    /// Per layer: positions not masked out, increasing.
    kept: Vec<Vec<usize>>,
    /// Per layer, per position: attention received so far (H2O only).
    scores: Vec<Vec<f32>>,
    pending: usize,
}
// ANCHOR_END: masked_cache

impl MaskedCache {
    /// Room for `capacity` positions, all kept in memory; `rule` decides which attention reads.
    pub fn new(config: &Config, capacity: usize, rule: MaskRule) -> Result<MaskedCache> {
        match rule {
            MaskRule::Window { window, sinks } => check_window(window, sinks)?,
            MaskRule::H2o { budget, recent } => check_budget(budget, recent)?,
        }
        let n_layers = config.num_hidden_layers;
        Ok(MaskedCache {
            full: PreallocatedCache::new(config, capacity)?,
            rule,
            kv_dim: config.n_kv_heads() * config.head_dim(),
            kept: vec![Vec::new(); n_layers],
            scores: vec![vec![0.0; capacity]; n_layers],
            pending: 0,
        })
    }

    /// The positions layer `layer` attends to (before a pass: all it holds).
    pub fn positions(&self, layer: usize) -> &[usize] {
        &self.kept[layer]
    }

    /// Masks, in every layer, the lowest-scoring kept position below `protected` (any
    /// kept position when none is below it; the earliest on a tie), one at a time,
    /// until `keep` are left.
    fn mask_lowest(&mut self, keep: usize, protected: usize) {
        for (kept, scores) in self.kept.iter_mut().zip(&self.scores) {
            while kept.len() > keep {
                let below = kept.iter().filter(|&&p| p < protected).count();
                let pool = &kept[..below.max(1)];
                let mut lowest = 0;
                for (i, &p) in pool.iter().enumerate() {
                    if scores[p] < scores[pool[lowest]] {
                        lowest = i;
                    }
                }
                kept.remove(lowest);
            }
        }
    }
}

impl KvStore for MaskedCache {
    fn len(&self) -> usize {
        self.full.len()
    }

    fn rows_held(&self) -> usize {
        self.kept[0].len() - self.pending
    }

    fn observes_attention(&self) -> bool {
        matches!(self.rule, MaskRule::H2o { .. })
    }

    fn max_pass_tokens(&self) -> usize {
        match self.rule {
            MaskRule::Window { window, sinks } => {
                window_pass_limit(window, sinks, self.kept[0].len())
            }
            MaskRule::H2o { budget, .. } => budget,
        }
    }

    fn observe(&mut self, layer: usize, received: &[f32]) {
        for (&p, &a) in self.kept[layer].iter().zip(received) {
            self.scores[layer][p] += a;
        }
    }

    // ANCHOR: masked_prepare
    fn prepare(&mut self, tokens: &[u32]) -> Result<()> {
        let (next, n) = (self.full.len(), tokens.len());
        self.full.reserve(n)?;
        match self.rule {
            MaskRule::Window { window, sinks } => {
                if n > window_pass_limit(window, sinks, self.kept[0].len()) {
                    return Err(Error::InvalidArgument(format!(
                        "{n} new tokens do not fit a window of {window} with {sinks} sinks"
                    )));
                }
                // The latest positions that fit beside the sinks and the new tokens.
                let first_recent = (next + n + next.min(sinks)).saturating_sub(window);
                for kept in &mut self.kept {
                    kept.retain(|&p| p < sinks || p >= first_recent);
                }
            }
            MaskRule::H2o { budget, recent } => {
                if n > budget {
                    return Err(Error::InvalidArgument(format!(
                        "{n} new tokens do not fit an H2O budget of {budget}"
                    )));
                }
                self.mask_lowest(budget - n, (next + n).saturating_sub(recent));
            }
        }
        for kept in &mut self.kept {
            kept.extend(next..next + n);
        }
        self.pending = n;
        Ok(())
    }
    // ANCHOR_END: masked_prepare

    fn write(&mut self, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        self.full.write(layer, k, v)
    }

    fn read(&self, layer: usize, end: usize) -> KvView<'_> {
        let (keys, values) = self.full.read(layer, self.full.len() + self.pending);
        KvView::Indexed(Indexed {
            store: Contiguous::new(keys, values, self.kv_dim),
            slots: &self.kept[layer][..end],
        })
    }

    fn advance(&mut self, n: usize) {
        self.full.advance(n);
        self.pending = 0;
    }

    fn truncate(&mut self, len: usize) {
        if len >= self.full.len() {
            return;
        }
        self.full.truncate(len);
        for (kept, scores) in self.kept.iter_mut().zip(&mut self.scores) {
            kept.retain(|&p| p < len);
            scores[len..].fill(0.0);
        }
        // A window needs nothing more: what is left below the cut is the sinks and,
        // unless the cut fell below it, the start of the recent run.
        if let MaskRule::H2o { recent, .. } = self.rule {
            let fewest = self.kept.iter().map(Vec::len).min().unwrap_or(0);
            self.mask_lowest(fewest, len.saturating_sub(recent));
        }
    }

    fn bytes_reserved(&self) -> usize {
        self.full.bytes_allocated()
    }

    /// Everything it stores: the mask hides positions, it does not free them.
    fn bytes_used(&self) -> usize {
        self.full.bytes_used()
    }
}
