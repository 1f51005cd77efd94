//! The sliding-window mask, added to the causal one (book: eviction.md, "A window per
//! query"; sliding-window-model.md).
//!
//! Causal attention lets the query at position `p` see every position `0..=p`. A
//! sliding window lets it see only the last `size` of them (Longformer, Beltagy et al.
//! 2020; Mistral 7B and Gemma 3's local layers are trained that way); with attention
//! sinks (StreamingLLM, Xiao et al. 2024) the first `sinks` positions stay visible to
//! every query, and the window keeps `size - sinks` recent ones beside them:
//!
//! ```text
//! position p sees   0..sinks   and   p + 1 - (size - sinks) ..= p     (size in all)
//! ```
//!
//! The rule names positions, never passes: what a token sees does not depend on how
//! its prompt was cut into forward passes, nor on the batch it ran in. That is what
//! lets a serving engine, whose scheduler cuts prompts as the load allows, keep the
//! bits of a solo run (`tests/sliding.rs`), and what a cache may rely on to give back
//! a block once no later query can see any of its positions
//! (`src/cache/paged/retention.rs`).
//!
//! No dependencies: attention, the caches and the config all name it.

// ANCHOR: window
/// A sliding window of `size` positions per query, the first `sinks` of the text
/// always among them (`sinks = 0`: a plain window, as Gemma 3's local layers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub size: usize,
    pub sinks: usize,
}

impl Window {
    /// A plain window of `size` positions, no sinks (a local layer of Gemma 3).
    pub fn plain(size: usize) -> Window {
        Window { size, sinks: 0 }
    }

    /// The positions the query at `pos` sees, as two runs: the sinks `0..sink_end`
    /// and the recent `recent_start..=pos`. When the window still reaches back to the
    /// sinks, `sink_end == recent_start` and the two runs are one: `0..=pos`.
    #[inline(always)]
    pub fn seen(self, pos: usize) -> (usize, usize) {
        let recent_start = (pos + 1).saturating_sub(self.size - self.sinks);
        (self.sinks.min(recent_start), recent_start)
    }

    /// Whether the query at `pos` sees position `j` (`j <= pos`).
    pub fn sees(self, pos: usize, j: usize) -> bool {
        let (sink_end, recent_start) = self.seen(pos);
        j <= pos && (j < sink_end || j >= recent_start)
    }

    /// The first position no query from `pos` on will see again, sinks aside: the
    /// recent run of `pos` starts there, and later queries' runs start later. A cache
    /// may give back every position in `sinks..forgotten_below(pos)`.
    pub fn forgotten_below(self, pos: usize) -> usize {
        self.seen(pos).1
    }
}
// ANCHOR_END: window

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_sees_the_sinks_and_its_recent_positions() {
        let w = Window { size: 5, sinks: 2 };
        let seen: Vec<usize> = (0..=9).filter(|&j| w.sees(9, j)).collect();
        assert_eq!(seen, [0, 1, 7, 8, 9]);
        // Early on the window reaches the sinks: one run.
        assert_eq!(w.seen(3), (1, 1));
        assert!((0..=3).all(|j| w.sees(3, j)));
        assert_eq!(Window::plain(3).seen(9), (0, 7));
    }

    #[test]
    fn every_query_sees_at_most_size_positions() {
        for size in 1..8 {
            for sinks in 0..size {
                let w = Window { size, sinks };
                for pos in 0..30 {
                    let n = (0..=pos).filter(|&j| w.sees(pos, j)).count();
                    assert_eq!(n, size.min(pos + 1), "{w:?} at {pos}");
                    // Nothing below `forgotten_below(pos)` but the sinks is seen from `pos` on.
                    for later in pos..pos + 5 {
                        let below = w.forgotten_below(pos);
                        assert!((sinks..below).all(|j| !w.sees(later, j)));
                    }
                }
            }
        }
    }
}
