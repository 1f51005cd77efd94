//! # Exercise 41 — connection slots: a cap that gives back what it lent, whatever happens
//!
//! `kvlab serve` serves at most `--max-connections` clients at once
//! (src/server/listen.rs). Before it accepts a connection it takes a *slot*; the task that
//! serves the connection holds the slot and gives it back when it ends. If a slot is ever
//! lost (a task that panics, a return that forgets it), the server serves one client fewer
//! for the rest of its life, and after `--max-connections` such losses it serves no one,
//! while looking healthy. So the slot gives itself back in `Drop`, which Rust runs on every
//! way out of a scope: a return, a `?`, a panic unwinding through it.
//!
//! The count is shared by every connection task, on every thread of the runtime: one
//! atomic counter of free slots. Taking one must never make it go below zero, even when
//! two threads take the last slot at the same instant: a `load` then a `store` lets both
//! see 1 and both take it. `compare_exchange` does the check and the change as one step
//! (the server uses tokio's `Semaphore`, which does this and can also wait).
//!
//! kvlab: `src/server/listen.rs` (`serve`: a slot before `accept`), `src/server/limits.rs`
//! (`ConnectionCounts`: the open and peak gauges of `/metrics`); book chapter "Appendix: the
//! HTTP server's plumbing", section "Running kvlab serve safely".

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The free slots, shared by every task that serves a connection.
pub struct Slots {
    cap: usize,
    free: Arc<AtomicUsize>,
    /// The most slots ever taken at once (the `kvlab_connections_peak` gauge).
    peak: Arc<AtomicUsize>,
}

/// One taken slot; dropping it gives it back.
pub struct Slot {
    cap: usize,
    free: Arc<AtomicUsize>,
}

impl Slots {
    /// (a) `cap` free slots; a cap of 0 would serve no one and is refused.
    pub fn new(cap: usize) -> Result<Slots, String> {
        if cap == 0 {
            return Err("--max-connections 0 would serve no one: give at least 1".into());
        }
        Ok(Slots {
            cap,
            free: Arc::new(AtomicUsize::new(cap)),
            peak: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// (b) A slot, or None when all `cap` are taken. Never lets the count go below zero,
    /// even when threads race for the last slot.
    pub fn try_take(&self) -> Option<Slot> {
        let mut free = self.free.load(Ordering::Acquire);
        loop {
            if free == 0 {
                return None;
            }
            match self.free.compare_exchange_weak(
                free,
                free - 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                // Another thread changed the count first: look again.
                Err(now) => free = now,
            }
        }
        let taken = self.cap - (free - 1);
        self.peak.fetch_max(taken, Ordering::Relaxed);
        Some(Slot {
            cap: self.cap,
            free: self.free.clone(),
        })
    }

    /// Slots free now.
    pub fn free(&self) -> usize {
        self.free.load(Ordering::Acquire)
    }

    /// (c) The most slots taken at once so far.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for Slot {
    /// (d) Gives the slot back, on every way out: a return, or a panic unwinding.
    fn drop(&mut self) {
        let before = self.free.fetch_add(1, Ordering::AcqRel);
        debug_assert!(before < self.cap, "a slot given back twice");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_of_zero_is_refused_by_name() {
        let err = Slots::new(0).err().expect("a cap of 0 is refused");
        assert!(err.contains("--max-connections"), "{err}");
        assert!(Slots::new(1).is_ok());
    }

    #[test]
    fn the_cap_th_plus_one_slot_is_refused() {
        let slots = Slots::new(3).unwrap();
        let held: Vec<Slot> = (0..3)
            .map(|_| slots.try_take().expect("a free slot"))
            .collect();
        assert_eq!(slots.free(), 0);
        assert!(slots.try_take().is_none(), "a 4th slot of 3");
        assert!(slots.try_take().is_none(), "asking again does not make one");
        drop(held);
        assert_eq!(slots.free(), 3);
    }

    #[test]
    fn a_dropped_slot_is_given_back_once() {
        let slots = Slots::new(2).unwrap();
        let a = slots.try_take().unwrap();
        assert_eq!(slots.free(), 1);
        drop(a);
        assert_eq!(slots.free(), 2, "one back, not zero or two");
        let _b = slots.try_take().unwrap();
        let _c = slots.try_take().unwrap();
        assert!(slots.try_take().is_none());
    }

    #[test]
    fn a_task_that_panics_still_gives_its_slot_back() {
        let slots = Arc::new(Slots::new(1).unwrap());
        let for_task = slots.clone();
        let task = std::thread::spawn(move || {
            let _slot = for_task.try_take().expect("the one slot");
            panic!("a bug while serving the connection");
        });
        assert!(task.join().is_err(), "the task panicked");
        assert_eq!(slots.free(), 1, "the panic gave the slot back");
        assert!(slots.try_take().is_some());
    }

    #[test]
    fn the_peak_is_the_most_taken_at_once_and_stays() {
        let slots = Slots::new(4).unwrap();
        assert_eq!(slots.peak(), 0);
        let a = slots.try_take().unwrap();
        let b = slots.try_take().unwrap();
        let c = slots.try_take().unwrap();
        assert_eq!(slots.peak(), 3);
        drop((a, b, c));
        let _d = slots.try_take().unwrap();
        assert_eq!(slots.peak(), 3, "the peak stays when slots come back");
        assert_eq!(slots.free(), 3);
    }

    #[test]
    fn racing_threads_never_hold_more_than_the_cap() {
        let slots = Arc::new(Slots::new(3).unwrap());
        let held = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (slots, held) = (slots.clone(), held.clone());
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        if let Some(slot) = slots.try_take() {
                            let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                            assert!(now <= 3, "{now} slots held at once, cap 3");
                            held.fetch_sub(1, Ordering::SeqCst);
                            drop(slot);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no thread saw more than the cap");
        }
        assert_eq!(slots.free(), 3, "every slot came back");
        assert!(slots.peak() <= 3);
    }
}
