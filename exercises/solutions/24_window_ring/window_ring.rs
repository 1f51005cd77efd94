//! # Exercise 24 — a sliding window with attention sinks, in a ring
//!
//! Bounded memory for unbounded text: keep only the last positions' K and V. StreamingLLM
//! (Xiao et al. 2024) found that a plain sliding window falls apart as soon as the text's
//! *first* tokens leave it: many heads put the attention they do not need on the first
//! token (the "attention sink"), and without it the softmax has to put that mass
//! somewhere else. Keeping the first `sinks` positions forever (4 is enough) and the
//! latest `window - sinks` brings the full cache's perplexity back.
//!
//! The storage has `window` slots. Slots `0..sinks` hold the sinks; slots
//! `sinks..window` are a *ring* of `ring_len = window - sinks` slots for the recent
//! positions, whose oldest sits in ring slot `oldest`. Rows are numbered in position
//! order (row 0 = the first sink, the last row = the newest token), and attention reads
//! row `r` wherever it lies. Evicting the oldest recent row is moving `oldest` by one:
//! no row is copied, and the next token is written into the slot it freed.
//!
//! Eviction happens *before* a forward pass writes its `n` new tokens (StreamingLLM's
//! `evict_for_space`): afterwards the window holds the kept rows and the `n` new ones,
//! never more than `window`.
//!
//! kvlab: `src/cache/window.rs` (`WindowCache::prepare`), `cache::rows::Ring`, book
//! chapter "Eviction and sliding windows".

/// A window's bookkeeping (the K and V themselves would live in `window` slots).
#[derive(Debug, Clone)]
pub struct WindowRing {
    pub window: usize,
    pub sinks: usize,
    /// Rows held, in position order: the sinks first, then the ring's.
    pub rows: usize,
    /// Ring slot (`0..window - sinks`) of the oldest recent row.
    pub oldest: usize,
    /// Position of the next token.
    pub next_pos: usize,
}

impl WindowRing {
    /// Given: an empty window (`sinks < window`).
    pub fn new(window: usize, sinks: usize) -> WindowRing {
        assert!(
            sinks < window,
            "the sinks must leave room for recent tokens"
        );
        WindowRing {
            window,
            sinks,
            rows: 0,
            oldest: 0,
            next_pos: 0,
        }
    }

    /// Given: slots in the ring.
    pub fn ring_len(&self) -> usize {
        self.window - self.sinks
    }

    /// The storage slot (`0..window`) of row `r`.
    pub fn slot(&self, r: usize) -> usize {
        // A sink never moves; a recent row counts from the ring's oldest, wrapping
        // around the ring only (the sinks' slots are not part of it).
        if r < self.sinks {
            r
        } else {
            self.sinks + (self.oldest + r - self.sinks) % self.ring_len()
        }
    }

    /// Makes room for `n` new tokens: evicts the oldest recent rows until the rows held
    /// and the new tokens fit the window. Refuses (and changes nothing) when even
    /// evicting every recent row would not make room.
    pub fn make_room(&mut self, n: usize) -> Result<(), String> {
        // The sinks held can never be evicted: they and the new tokens must fit.
        if self.rows.min(self.sinks) + n > self.window {
            return Err(format!("{n} new tokens do not fit the window"));
        }
        let evict = (self.rows + n).saturating_sub(self.window);
        // The oldest `evict` recent rows go; row numbers shift down by `evict`, and
        // moving the ring's start by the same amount keeps every other row in its slot.
        self.oldest = (self.oldest + evict) % self.ring_len();
        self.rows -= evict;
        Ok(())
    }

    /// Given: one forward pass of `n` tokens (rows `rows..rows + n` written), returning
    /// the slots they were written to.
    pub fn feed(&mut self, n: usize) -> Result<Vec<usize>, String> {
        self.make_room(n)?;
        let slots = (self.rows..self.rows + n).map(|r| self.slot(r)).collect();
        self.rows += n;
        self.next_pos += n;
        Ok(slots)
    }

    /// Given: the positions held, in row order.
    pub fn positions(&self) -> Vec<usize> {
        let sinks = self.rows.min(self.sinks);
        let first_recent = self.next_pos - (self.rows - sinks);
        (0..sinks).chain(first_recent..self.next_pos).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `total` tokens, `chunk` at a time, and returns, per position, the slot it was
    /// written to.
    fn run(w: &mut WindowRing, total: usize, chunk: usize) -> Vec<usize> {
        let mut slots = Vec::new();
        while w.next_pos < total {
            let n = chunk.min(total - w.next_pos);
            slots.extend(w.feed(n).unwrap());
        }
        slots
    }

    #[test]
    fn the_sinks_and_the_latest_stay() {
        let mut w = WindowRing::new(6, 2);
        run(&mut w, 20, 1);
        assert_eq!(w.positions(), vec![0, 1, 16, 17, 18, 19]);
        assert_eq!(w.rows, 6);
    }

    #[test]
    fn without_sinks_it_is_a_plain_window() {
        let mut w = WindowRing::new(4, 0);
        run(&mut w, 11, 1);
        assert_eq!(w.positions(), vec![7, 8, 9, 10]);
    }

    #[test]
    fn a_new_token_takes_the_slot_of_the_token_it_evicts() {
        let mut w = WindowRing::new(5, 1);
        let slots = run(&mut w, 30, 1);
        // Position p (p >= 5) was written over position p - 4: the ring has 4 slots.
        for p in 5..30 {
            assert_eq!(slots[p], slots[p - 4], "position {p}");
        }
        // The sink keeps slot 0; nobody else ever writes there.
        assert_eq!(slots[0], 0);
        assert!(slots[1..].iter().all(|&s| (1..5).contains(&s)));
    }

    #[test]
    fn rows_held_are_in_distinct_slots_in_position_order() {
        for (window, sinks, chunk) in [(6, 2, 1), (6, 2, 3), (7, 3, 2), (5, 0, 4), (8, 1, 7)] {
            let mut w = WindowRing::new(window, sinks);
            let slots = run(&mut w, 41, chunk);
            let held: Vec<usize> = (0..w.rows).map(|r| w.slot(r)).collect();
            let mut distinct = held.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), w.rows, "{window} {sinks} {chunk}: {held:?}");
            assert!(held.iter().all(|&s| s < window));
            // Row r holds the position positions()[r]: the slot it was written to.
            for (r, p) in w.positions().into_iter().enumerate() {
                assert_eq!(w.slot(r), slots[p], "{window} {sinks} {chunk}: row {r}");
            }
        }
    }

    #[test]
    fn chunks_evict_as_many_as_they_need() {
        let mut w = WindowRing::new(8, 2);
        w.feed(5).unwrap();
        w.feed(5).unwrap(); // 10 positions into 8 slots: 2 evicted
        assert_eq!(w.positions(), vec![0, 1, 4, 5, 6, 7, 8, 9]);
        w.feed(6).unwrap(); // room for 6 new: only the sinks stay
        assert_eq!(w.positions(), vec![0, 1, 10, 11, 12, 13, 14, 15]);
    }

    #[test]
    fn a_pass_larger_than_the_room_beside_the_sinks_is_refused() {
        let mut w = WindowRing::new(6, 2);
        w.feed(3).unwrap();
        let before = w.clone();
        assert!(w.make_room(5).is_err());
        assert_eq!((w.rows, w.oldest), (before.rows, before.oldest));
        assert!(w.make_room(4).is_ok());
        // An empty window takes a whole window's worth at once.
        let mut fresh = WindowRing::new(6, 2);
        assert!(fresh.make_room(6).is_ok());
    }
}
