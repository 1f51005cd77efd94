//! The retention axis of a paged pool: what a sequence's block table keeps. Every
//! position, or a sliding window with attention sinks whose slide hands whole blocks
//! back to the pool (book: eviction.md, "A window in blocks").
//!
//! The window keeps what [`crate::cache::WindowCache`] keeps, by the same rule: the
//! first `sinks` positions forever, and before each forward pass the oldest recent
//! positions go until the new tokens fit in `window` rows. The ring overwrites the
//! slots it frees; the pool cannot hand back a slot, only a block, so a block goes
//! back once every position in it has left the window, and its place in the table
//! becomes a [`HOLE`]. Attention reads the rows still held in position order through
//! [`Evicted`], the same rows in the same order as the ring: the two are bitwise twins
//! (`tests/eviction.rs`), and a sequence holds at most
//! [`Retention::max_blocks`] blocks however long it runs.
//!
//! What this window is not: a per-query window (each token sees the `window` before
//! itself, as Mistral and Gemma 3 are trained). Eviction happens once per pass, so
//! what a token sees depends on how its prompt was cut into passes. That is why the
//! engine, whose scheduler cuts prompts as the load allows, and prefix caching, which
//! would reuse rows computed under another cut, do not take it.
//!
//! [`Retention::Sliding`] is the per-query window (`--kv sliding`, [`Window`]): every
//! query sees the sinks and its own recent positions, whatever the cut, so the
//! engine, prefix caching and speculative rollback all take it. Rows stay at their
//! positions (nothing is renumbered); before each pass, a block goes back once the
//! pass's first query, and so every later one, no longer sees any of its positions,
//! and attention's mask never reaches the hole it leaves (book: eviction.md, "A window
//! per query").

use super::block_pool::HOLE;
use super::{PagedCache, SeqId};
use crate::cache::policy::KvPolicy;
use crate::cache::rows::Evicted;
use crate::cache::window::{check_window, check_window_pass, window_pass_limit};
use crate::error::{Error, Result};
use crate::mask::Window;

// ANCHOR: retention
/// What every sequence of a pool keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Retention {
    /// Every position: the block table grows by one block every `block_size` tokens.
    #[default]
    Full,
    /// The first `sinks` positions and the latest, `window` rows in all, evicted once
    /// per pass (StreamingLLM's ring, in blocks).
    Window { window: usize, sinks: usize },
    /// A window per query: the query at `p` sees the sinks and `p + 1 - (window -
    /// sinks) ..= p`; a block goes back once no later query sees it.
    Sliding { window: usize, sinks: usize },
}
// ANCHOR_END: retention

impl Retention {
    /// The retention of `--kv policy`: a window for `--kv window` and `--kv
    /// [ELEMENT+]sliding`, every position for the others (which say what a position
    /// *is*, not which are kept).
    pub fn of(policy: KvPolicy) -> Result<Retention> {
        match policy {
            KvPolicy::Window { window, sinks } => {
                check_window(window, sinks)?;
                Ok(Retention::Window { window, sinks })
            }
            KvPolicy::Sliding { window, sinks, .. } => {
                check_window(window, sinks)?;
                Ok(Retention::Sliding { window, sinks })
            }
            _ => Ok(Retention::Full),
        }
    }

    /// The mask attention reads this pool's sequences through: a per-query window's.
    /// (A per-pass window has already dropped what its queries do not see.)
    pub fn mask(self) -> Option<Window> {
        match self {
            Retention::Sliding { window, sinks } => Some(Window {
                size: window,
                sinks,
            }),
            _ => None,
        }
    }

    /// Sinks of a per-pass window: the rows [`Evicted`] keeps before the dropped run.
    fn sinks(self) -> usize {
        match self {
            Retention::Window { sinks, .. } => sinks,
            _ => 0,
        }
    }

    /// The most new tokens one pass may bring when `held` rows are held.
    pub fn pass_limit(self, held: usize) -> usize {
        match self {
            Retention::Window { window, sinks } => window_pass_limit(window, sinks, held),
            _ => usize::MAX,
        }
    }

    /// Rows to evict so that `n` new tokens join `held` rows within the window.
    fn to_evict(self, held: usize, n: usize) -> usize {
        match self {
            Retention::Window { window, .. } => (held + n).saturating_sub(window),
            _ => 0,
        }
    }

    /// The most blocks one sequence of `positions` positions holds at once when no pass
    /// brings more than `pass` tokens: every block of a full cache; for a per-query
    /// window, the sinks' blocks and those the recent runs of one pass's queries
    /// straddle (the `window - sinks - 1` positions before the pass, and its own).
    pub fn peak_blocks(self, positions: usize, block_size: usize, pass: usize) -> usize {
        let bs = block_size.max(1);
        let all = positions.div_ceil(bs);
        match self {
            Retention::Full => all,
            Retention::Window { .. } => all.min(self.max_blocks(bs).unwrap_or(all)),
            Retention::Sliding { window, sinks } => {
                let recent = (window - sinks).saturating_add(pass).div_ceil(bs) + 1;
                all.min(sinks.div_ceil(bs).saturating_add(recent))
            }
        }
    }

    /// The most blocks one sequence ever holds: the blocks of the sinks, and those a
    /// run of `window - sinks` recent positions can straddle. `None`: no bound.
    pub fn max_blocks(self, block_size: usize) -> Option<usize> {
        let bs = block_size.max(1);
        match self {
            Retention::Full | Retention::Sliding { .. } => None,
            Retention::Window { window, sinks } => {
                Some(sinks.div_ceil(bs) + (window - sinks).div_ceil(bs) + 1)
            }
        }
    }
}

/// What one pass's slide does to a sequence ([`PagedCache::slide_plan`]).
#[derive(Debug, Default)]
pub(super) struct Slide {
    /// Positions dropped after the slide.
    evicted: usize,
    /// `(layer group, table index)` of the blocks the slide lets go.
    gone: Vec<(usize, usize)>,
    /// Of those, the blocks that become available.
    pub(super) freed: usize,
}

/// The window's slide, on the pool's sequences.
impl PagedCache {
    /// The positions sequence `id` dropped, as attention's row map.
    pub(super) fn evicted(&self, id: SeqId) -> Evicted {
        Evicted {
            sinks: self.retention.sinks(),
            count: self.seqs.get(&id).map_or(0, |s| s.evicted),
        }
    }

    /// Rows held by `id`: its positions less those the window dropped.
    pub fn rows_held(&self, id: SeqId) -> usize {
        self.seqs.get(&id).map_or(0, |s| s.len - s.evicted)
    }

    /// The positions `id` holds, in the order attention reads them.
    pub fn positions_held(&self, id: SeqId) -> Vec<usize> {
        let evicted = self.evicted(id);
        (0..self.rows_held(id))
            .map(|r| evicted.position(r))
            .collect()
    }

    /// The most new tokens the next pass of `id` may bring.
    pub fn pass_limit(&self, id: SeqId) -> usize {
        self.retention.pass_limit(self.rows_held(id))
    }

    // ANCHOR: slide_plan
    /// What making room for `n` new tokens of `id` drops: the new count of dropped
    /// positions, the table indices of the blocks wholly inside them, and how many of
    /// those become available (a block another table holds stays where it is). An
    /// unknown `id` drops nothing. A per-query window plans each layer group's table on
    /// its own ([`PagedCache::forget_plan`]).
    pub(super) fn slide_plan(&self, id: SeqId, n: usize) -> Slide {
        let Some(seq) = self.seqs.get(&id) else {
            return Slide::default();
        };
        let mut plan = Slide {
            evicted: seq.evicted,
            ..Slide::default()
        };
        if !matches!(self.retention, Retention::Window { .. }) {
            for g in 0..self.groups.len() {
                if let Some(window) = self.groups.retention(g).mask() {
                    self.forget_plan(id, g, window, &mut plan);
                }
            }
            return plan;
        }
        // A per-pass window: a model without local layers, so one table.
        let blocks = &seq.tables[0].blocks;
        let evict = self.retention.to_evict(seq.len - seq.evicted, n);
        let (bs, sinks) = (self.pool.block_size(), self.retention.sinks());
        plan.evicted = seq.evicted + evict;
        // Dropped positions: sinks..sinks + evicted. A block goes when all of it is in there.
        let first = sinks.div_ceil(bs);
        let end = ((sinks + plan.evicted) / bs).min(blocks.len());
        if evict > 0 {
            plan.gone = (first..end)
                .filter(|&i| blocks[i] != HOLE)
                .map(|i| (0, i))
                .collect();
        }
        plan.freed = plan
            .gone
            .iter()
            .filter(|&&(_, i)| self.pool.ref_count(blocks[i]) == 1)
            .count();
        plan
    }
    // ANCHOR_END: slide_plan

    // ANCHOR: forget_plan
    /// A per-query window's plan for layer group `g`'s table before a pass that starts
    /// at position `len`: the blocks wholly inside `sinks..window.forgotten_below(len)`,
    /// which neither this pass's first query nor any later one sees. Nothing is
    /// renumbered: the count of dropped positions stays 0, and attention's mask steps
    /// over the holes.
    fn forget_plan(&self, id: SeqId, g: usize, window: Window, plan: &mut Slide) {
        let seq = &self.seqs[&id];
        let blocks = &seq.tables[g].blocks;
        let bs = self.pool.block_size();
        let first = window.sinks.div_ceil(bs);
        let end = (window.forgotten_below(seq.len) / bs).min(blocks.len());
        for i in (first..end).filter(|&i| blocks[i] != HOLE) {
            plan.gone.push((g, i));
            plan.freed += (self.pool.ref_count(blocks[i]) == 1) as usize;
        }
    }
    // ANCHOR_END: forget_plan

    /// The window of the first layer group whose queries, in a pass that starts at
    /// `len`, would reach a hole: only after a truncate below where a per-query window
    /// already gave blocks back.
    fn window_with_a_hole(&self, id: SeqId, len: usize) -> Option<Window> {
        let seq = self.seqs.get(&id)?;
        let bs = self.pool.block_size();
        (0..self.groups.len()).find_map(|g| {
            let window = self.groups.retention(g).mask()?;
            let sink_blocks = 0..window.sinks.div_ceil(bs);
            let recent_blocks = window.forgotten_below(len) / bs..len.div_ceil(bs);
            let blocks = &seq.tables[g].blocks;
            sink_blocks
                .chain(recent_blocks)
                .any(|i| blocks.get(i) == Some(&HOLE))
                .then_some(window)
        })
    }

    /// Whether the queries of a pass that starts at `len` would reach a hole.
    pub(super) fn reaches_a_hole(&self, id: SeqId, len: usize) -> bool {
        self.window_with_a_hole(id, len).is_some()
    }

    /// Gives back now the blocks that no query of `id` at or after its length reads (a
    /// window per query: [`PagedCache::forget_plan`], in every layer group). `prepare`
    /// would give them back anyway; the engine calls this for every running sequence
    /// before it plans a step, so that no block is counted twice: once as freed by a
    /// sequence's slide, and once more as parked and free for a prefix hit of the same
    /// step to take.
    pub fn forget_unread(&mut self, id: SeqId) {
        if matches!(self.retention, Retention::Window { .. }) {
            return; // a per-pass window slides by what the pass brings
        }
        let plan = self.slide_plan(id, 0);
        if !plan.gone.is_empty() {
            self.slide(id, &plan);
        }
    }

    /// Drops what the plan drops: the count grows, and each block wholly inside goes
    /// back to the pool, leaving a hole in its table.
    pub(super) fn slide(&mut self, id: SeqId, plan: &Slide) {
        let seq = self.seqs.get_mut(&id).expect("planned on it");
        seq.evicted = plan.evicted;
        let blocks: Vec<_> = plan
            .gone
            .iter()
            .map(|&(g, i)| std::mem::replace(&mut seq.tables[g].blocks[i], HOLE))
            .collect();
        for b in blocks {
            self.release_block(b);
        }
    }

    /// Refuses a pass of `n` tokens that the window cannot hold beside its sinks.
    pub(super) fn check_pass(&self, id: SeqId, n: usize) -> Result<()> {
        if let Retention::Window { window, sinks } = self.retention {
            return check_window_pass(window, sinks, self.rows_held(id), n);
        }
        let len = self.seqs.get(&id).map_or(0, |s| s.len);
        if let Some(window) = self.window_with_a_hole(id, len) {
            return Err(Error::InvalidArgument(format!(
                "the sliding window ({} positions) gave back blocks that a query at position {len} would read: a rollback cannot go below the pass that slid past them; start the sequence again",
                window.size
            )));
        }
        Ok(())
    }

    /// After `truncate` to `len`: positions a window dropped cannot come back, so a cut
    /// below them keeps only the sinks before `len` (as [`crate::cache::WindowCache`]).
    pub(super) fn evicted_after_truncate(&self, evicted: usize, len: usize) -> usize {
        let sinks = self.retention.sinks();
        if len >= sinks + evicted {
            evicted
        } else {
            len.saturating_sub(sinks)
        }
    }
}
