//! # Exercise 38 — a ring for a local layer (局部层的环形缓存)
//!
//! Exercise 37 counted what a local layer must *keep*: its window. This one builds where it
//! keeps it. In a local layer of window `W`, the query at position `p` sees positions
//! `p + 1 - W ..= p`. So once a pass has written position `p`, no later query reads a
//! position below `p + 1 - W`: a ring of slots can overwrite it.
//!
//! How many slots? Before a pass of `n` new tokens at positions `len..len + n`, the first
//! of them still sees the `W - 1` positions before `len`, and the pass writes its own `n`
//! rows before attention reads them. A cache that takes passes of at most `pass` tokens
//! needs `W - 1 + pass` slots per local layer (never more than the sequence's capacity),
//! and position `p` lives in slot `p % slots`.
//!
//! Rolling back (a speculative round rejecting drafts, a chat turn that diverges) cuts the
//! sequence to `len`. The ring still serves the next query (at `len`) only if it holds the
//! `W - 1` positions before `len`. What the ring holds intact is the last `slots` positions
//! ever written, below `high_water` (one past the highest position written), even if a
//! rollback has since cut below it.
//!
//! kvlab: `HybridCache` (src/cache/hybrid.rs: `new`, `write`, `truncate`);
//! `kvlab kv-size --model models/gemma-3-270m --seq-len 32768 --dtype f32 --measure`.

/// Slots a local layer of window `window` reserves, for passes of at most `pass` tokens
/// and a sequence of at most `capacity` positions.
pub fn ring_slots(window: u64, pass: u64, capacity: u64) -> u64 {
    // TODO: the window before the pass, and the pass itself. Can a ring be longer than
    // the sequence it holds?
    0
}

/// The slot of position `pos` in a ring of `slots`.
pub fn slot(pos: u64, slots: u64) -> u64 {
    // TODO
    0
}

/// Whether a ring of `slots`, into which positions up to `high_water - 1` were written,
/// still holds every position a query at `len` (after a rollback to `len`) can see.
pub fn rollback_served(len: u64, high_water: u64, window: u64, slots: u64) -> bool {
    // TODO: the oldest position the query at `len` sees, against the oldest one the
    // ring still holds intact.
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemma3_s_ring_is_the_window_and_one_pass() {
        // Window 512, passes of 128: kvlab's HybridCache for Gemma 3 270M.
        assert_eq!(ring_slots(512, 128, 32_768), 639);
        // Decode only (passes of one token): the window itself.
        assert_eq!(ring_slots(512, 1, 32_768), 512);
        // A sequence shorter than the ring never needs more than its capacity.
        assert_eq!(ring_slots(512, 128, 300), 300);
    }

    #[test]
    fn positions_go_round_the_ring() {
        assert_eq!(slot(0, 639), 0);
        assert_eq!(slot(638, 639), 638);
        assert_eq!(slot(639, 639), 0);
        assert_eq!(slot(1000, 639), 361);
    }

    #[test]
    fn a_pass_never_overwrites_what_its_own_queries_read() {
        // Every query of a pass of `pass` tokens at `len` sees positions its ring still
        // holds, after the whole pass was written: the slot of each position it reads is
        // not the slot of any position the pass wrote.
        for (window, pass) in [(4, 1), (4, 3), (512, 128), (1, 5)] {
            let slots = ring_slots(window, pass, u64::MAX);
            for len in [0, 7, 1000] {
                let written: Vec<u64> = (len..len + pass).map(|p| slot(p, slots)).collect();
                for q in len..len + pass {
                    for seen in q.saturating_sub(window - 1)..len {
                        assert!(
                            !written.contains(&slot(seen, slots)),
                            "window {window}, pass {pass}: query {q} reads {seen}, overwritten"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_rollback_of_one_pass_is_served_and_a_deeper_one_is_not() {
        // Window 4, passes of 2: 5 slots. 20 positions written.
        let slots = ring_slots(4, 2, 64);
        assert_eq!(slots, 5);
        assert!(rollback_served(20, 20, 4, slots), "no rollback at all");
        assert!(rollback_served(18, 20, 4, slots), "one pass back");
        assert!(
            !rollback_served(17, 20, 4, slots),
            "position 14 was overwritten by 19"
        );
        // Early on, nothing was overwritten yet.
        assert!(rollback_served(1, 4, 4, slots));
    }

    #[test]
    fn a_rollback_does_not_bring_back_what_was_overwritten() {
        // Cut from 20 to 18, then to 15: the ring is judged by what was written (20), not
        // by where the sequence now ends (18).
        let slots = ring_slots(4, 2, 64);
        assert!(!rollback_served(15, 20, 4, slots));
        assert!(rollback_served(18, 20, 4, slots));
    }

    #[test]
    fn a_window_of_one_sees_only_itself() {
        // Window 1 keeps nothing of the past: any rollback is served.
        let slots = ring_slots(1, 1, 64);
        assert_eq!(slots, 1);
        assert!(rollback_served(3, 50, 1, slots));
    }
}
