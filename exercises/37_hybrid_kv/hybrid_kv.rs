//! # Exercise 37 — the KV cache of a model with local layers (滑动窗口层的KV缓存)
//!
//! Exercise 13's formula gives every layer the same cache: one K and one V per position.
//! Gemma 3 is trained otherwise. Five of every six layers are *local*: a query sees only the
//! `window` positions that end at its own (512 in Gemma 3), so such a layer never needs more
//! than `window` positions of K and V, however long the text. Only the *global* layers keep
//! every position. Per sequence:
//!
//! ```text
//! bytes = 2 * n_kv_heads * head_dim * bytes_per_elem
//!           * (global_layers * seq_len + local_layers * min(seq_len, window))
//! ```
//!
//! Gemma 3 270M (18 layers, layers 5, 11 and 17 global, 1 KV head of 256, bf16) at 32 768
//! tokens: (3 × 32 768 + 15 × 512) / (18 × 32 768) ≈ 18 % of a full cache. Which layers are
//! local is a pattern: layer `i` is global when `(i + 1)` is a multiple of the pattern (6).
//!
//! kvlab: `Config::layer_window` (src/config.rs) and `KvSizeReport::with_layer_groups`
//! (src/kv_size.rs); `kvlab kv-size --model models/gemma-3-270m --seq-len 32768`.

/// Whether layer `layer` is global (attends to every position) in a pattern of `pattern`.
pub fn is_global(layer: u64, pattern: u64) -> bool {
    // TODO: which layers of 0..18 are global for a pattern of 6? Count from 1, not from 0.
    false
}

/// Positions layer `layer` must keep after `seq_len` tokens.
pub fn positions_held(layer: u64, pattern: u64, window: u64, seq_len: u64) -> u64 {
    // TODO: a global layer keeps them all; a local one at most its window. And before the
    // text is as long as the window?
    0
}

/// K and V bytes of one sequence of `seq_len` tokens, summed over `n_layers` layers.
pub fn hybrid_kv_bytes(
    n_layers: u64,
    pattern: u64,
    window: u64,
    n_kv_heads: u64,
    head_dim: u64,
    bytes_per_elem: u64,
    seq_len: u64,
) -> u64 {
    // TODO: one layer-position costs a K and a V vector of n_kv_heads * head_dim numbers.
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    const BF16: u64 = 2;

    #[test]
    fn gemma3_270m_has_three_global_layers() {
        let global: Vec<u64> = (0..18).filter(|&l| is_global(l, 6)).collect();
        assert_eq!(global, vec![5, 11, 17]);
    }

    #[test]
    fn a_local_layer_holds_at_most_its_window() {
        assert_eq!(positions_held(0, 6, 512, 100), 100);
        assert_eq!(positions_held(0, 6, 512, 512), 512);
        assert_eq!(positions_held(0, 6, 512, 32_768), 512);
        assert_eq!(positions_held(5, 6, 512, 32_768), 32_768);
    }

    #[test]
    fn gemma3_at_32k_holds_about_18_percent_of_a_full_cache() {
        let hybrid = hybrid_kv_bytes(18, 6, 512, 1, 256, BF16, 32_768);
        assert_eq!(hybrid, (3 * 32_768 + 15 * 512) * 2 * 256 * BF16);
        let full = 18 * 32_768 * 2 * 256 * BF16; // exercise 13's formula
        let share = hybrid as f64 / full as f64;
        assert!((0.17..0.18).contains(&share), "{share}");
    }

    #[test]
    fn shorter_than_the_window_it_is_a_full_cache() {
        let full = 18 * 300 * 2 * 256 * BF16;
        assert_eq!(hybrid_kv_bytes(18, 6, 512, 1, 256, BF16, 300), full);
    }

    #[test]
    fn a_pattern_of_one_makes_every_layer_global() {
        // Pattern 1: (i + 1) % 1 == 0 for every layer: a Llama.
        assert_eq!(
            hybrid_kv_bytes(30, 1, 512, 3, 64, 4, 8192),
            30 * 8192 * 2 * 3 * 64 * 4
        );
    }
}
