//! # Exercise 17 — what a growable cache pays: doubling and its copies
//!
//! A preallocated cache (exercise 10) must guess `prompt + max_new_tokens` up front. A
//! growable one reserves only what it stores and grows when full, like `Vec::push`: it
//! allocates a bigger buffer, copies every stored position into it, and frees the old one
//! (the seed's §4.2; kvlab: `src/cache/growable.rs`, which starts at 16 positions).
//!
//! The growth rule decides the bill. Growing to *twice* the capacity makes the copies a
//! geometric series, so holding `n` tokens copies fewer than `2n` positions in total:
//! amortised O(1) per token. Growing by a fixed step (Hugging Face's `DynamicCache` grows
//! by one token per step, with `torch.cat`) copies `O(n²)` positions. And while a copy
//! runs, the old and the new buffer both exist: the peak is old + new, not the final size.
//!
//! Conventions here: the cache starts with room for `c0` positions; when it holds
//! `capacity` positions and one more arrives, it grows, copying all `capacity` positions
//! it holds. Sizes are in positions; multiply by `kv_bytes_per_token` (46 080 for
//! SmolLM2-135M in f32) for bytes.

/// The capacity once `n` tokens are held, starting at `c0` and doubling when full.
pub fn capacity_after(c0: u64, n: u64) -> u64 {
    assert!(c0 > 0, "a capacity of 0 never grows by doubling");
    let mut capacity = c0;
    // Grow only when a token arrives that does not fit: n == capacity still fits.
    while capacity < n {
        capacity *= 2;
    }
    capacity
}

/// Positions copied by all the doublings needed to hold `n` tokens.
pub fn positions_copied(c0: u64, n: u64) -> u64 {
    assert!(c0 > 0, "a capacity of 0 never grows by doubling");
    let (mut capacity, mut copied) = (c0, 0);
    while capacity < n {
        // The cache is full when it grows: every one of its `capacity` positions moves.
        copied += capacity;
        capacity *= 2;
    }
    copied
}

/// The most positions allocated at once while growing to hold `n` tokens.
pub fn peak_positions(c0: u64, n: u64) -> u64 {
    let last = capacity_after(c0, n);
    if last == c0 {
        c0
    } else {
        // During the last copy the old buffer (last / 2) and the new one (last) both live.
        last / 2 + last
    }
}

/// For contrast: positions copied when the cache starts at `step` and grows by `step`.
pub fn positions_copied_fixed_step(step: u64, n: u64) -> u64 {
    assert!(step > 0, "a step of 0 never grows");
    let (mut capacity, mut copied) = (step, 0);
    while capacity < n {
        copied += capacity;
        capacity += step;
    }
    copied
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M's K and V per token in f32: 2 x 30 layers x 3 KV heads x 64 x 4 bytes.
    const KV_BYTES_PER_TOKEN: u64 = 46_080;

    #[test]
    fn doubling_by_hand() {
        // 16 -> 32 -> ... -> 1024, copying 16 + 32 + ... + 512 = 1008 positions.
        assert_eq!(capacity_after(16, 1000), 1024);
        assert_eq!(positions_copied(16, 1000), 1008);
        // For SmolLM2 in f32 that is 46 MB moved to hold 46 MB.
        assert_eq!(positions_copied(16, 1000) * KV_BYTES_PER_TOKEN, 46_448_640);
    }

    #[test]
    fn a_full_cache_grows_only_when_one_more_token_arrives() {
        assert_eq!((capacity_after(16, 0), positions_copied(16, 0)), (16, 0));
        assert_eq!((capacity_after(16, 16), positions_copied(16, 16)), (16, 0));
        assert_eq!((capacity_after(16, 17), positions_copied(16, 17)), (32, 16));
        assert_eq!(
            (capacity_after(16, 1024), positions_copied(16, 1024)),
            (1024, 1008)
        );
        assert_eq!(
            (capacity_after(16, 1025), positions_copied(16, 1025)),
            (2048, 2032)
        );
        // Another start, another series: 3 -> 6 -> 12, copying 3 + 6.
        assert_eq!((capacity_after(3, 10), positions_copied(3, 10)), (12, 9));
    }

    #[test]
    fn amortised_constant_per_token() {
        // 1 + 2 + 4 + ... < 2 x (the last capacity) <= 4n, and in fact < 2n here.
        for n in 1..5000 {
            let copied = positions_copied(16, n);
            assert!(copied < 2 * n, "n = {n}: {copied} copied");
        }
    }

    #[test]
    fn the_peak_holds_old_and_new() {
        assert_eq!(peak_positions(16, 10), 16);
        // Growing from 512 to 1024 holds 512 + 1024 positions during the copy.
        assert_eq!(peak_positions(16, 1000), 1536);
        assert_eq!(peak_positions(16, 8192), 12_288);
    }

    #[test]
    fn a_fixed_step_copies_quadratically() {
        // Growing by one each step (torch.cat): 1 + 2 + ... + 999 positions.
        assert_eq!(positions_copied_fixed_step(1, 1000), 499_500);
        assert_eq!(positions_copied_fixed_step(16, 1000), 31_248);
        // Twice the tokens: about four times the copies (doubling: about twice).
        assert_eq!(positions_copied_fixed_step(16, 2000), 124_000);
        // SmolLM2's full 8192-token context in f32: 377 MB copied by doubling, 96 GB by
        // steps of 16.
        assert_eq!(positions_copied(16, 8192) * KV_BYTES_PER_TOKEN, 376_750_080);
        assert_eq!(
            positions_copied_fixed_step(16, 8192) * KV_BYTES_PER_TOKEN,
            96_448_020_480
        );
    }

    #[test]
    #[should_panic]
    fn a_zero_capacity_is_rejected() {
        // 0 * 2 is 0: the loop would never end.
        capacity_after(0, 1);
    }
}
