//! # Exercise 44 — codes under a window: two axes of the cache that multiply
//!
//! A cache is three choices (book: "Eviction and sliding windows", section "Codes under
//! the window"): a *layout* (where a row lives: a contiguous buffer or blocks), an
//! *element* (what one row is: f32, or int8/int4 codes with their scales) and a
//! *retention* (which rows are kept: all, or a window). `--kv int8+sliding --window W
//! --sinks S` takes one element and one retention, and a paged pool holds it: blocks of
//! int8 rows, handed back to the pool as the window slides.
//!
//! The two axes are independent, so what the cache holds is a product:
//!
//! ```text
//! bytes = (blocks held) × block_size × (bytes of one position, as its element)
//!          └ retention ┘               └─────────── element ───────────┘
//! ```
//!
//! **The element.** One position stores a key row and a value row of `kv_dim = n_kv_heads
//! × head_dim` channels in each of `n_layers` layers:
//! - f32: 4 bytes a channel;
//! - int8 (`--kv int8`): 1 byte a channel, plus one f32 scale per head (its group is the
//!   whole head, exercise 22);
//! - int4 per token (`--kv int4-per-token --group G`): half a byte a channel (two codes a
//!   byte), plus an f32 scale *and* an f32 zero point per group of `G` channels.
//!
//! **The retention.** Under a window per query (exercise 43), decoding one token per pass,
//! the query at `len` sees the sinks `0..sinks` and the recent run `len + 1 - (window -
//! sinks) ..= len` (or everything `0..=len` while the window still reaches the sinks).
//! Every block holding one of those positions is held; the rest went back to the pool. A
//! block holding a sink and a recent position counts once.
//!
//! kvlab: `src/cache/element.rs` (`KvElement::bytes_per_token`), `src/cache/paged/retention.rs`
//! (`Retention::peak_blocks`), `src/cache/policy.rs` (`RowCodes`).

/// What each kept row is stored as.
#[derive(Clone, Copy, Debug)]
pub enum Codes {
    F32,
    Int8,
    Int4PerToken { group: usize },
}

/// Bytes of one position's K and V in all `n_layers` layers of `n_kv_heads` heads of
/// `head_dim` channels, stored as `codes` (codes and their scales).
pub fn bytes_per_position(
    codes: Codes,
    n_layers: usize,
    n_kv_heads: usize,
    head_dim: usize,
) -> usize {
    // TODO: Questions:
    // - How many channels does one side (K or V) of one layer hold? How many bytes is
    //   one f32 channel, one int8 code, one int4 code?
    // - How many f32 scales does an int8 row carry (what is its group)? And an int4 row
    //   of groups of `group` channels: which two numbers per group, and how many groups?
    // - How many sides, how many layers?
    let _ = (codes, n_layers, n_kv_heads, head_dim);
    0
}

/// Blocks of `block_size` positions a sequence holds while the token at `len` is
/// decoded under a window per query of `window` positions, `sinks` of them sinks: every
/// block holding a position the query at `len` sees (itself included), each once.
pub fn blocks_held(len: usize, window: usize, sinks: usize, block_size: usize) -> usize {
    // TODO: Questions:
    // - Which positions does the query at `len` see (exercise 43's two runs)?
    // - Which blocks hold the sink run? The recent run, which ends at `len` itself?
    // - When the sinks' last block also holds recent positions, how do you count it
    //   once?
    let _ = (len, window, sinks, block_size);
    0
}

/// The most bytes a sequence of `positions` positions (decoded one token at a time)
/// holds at once: the worst `blocks_held` over its tokens, times the block's bytes.
pub fn peak_window_bytes(
    positions: usize,
    window: usize,
    sinks: usize,
    block_size: usize,
    position_bytes: usize,
) -> usize {
    // TODO: which token holds the most blocks? Try them all.
    let _ = (positions, window, sinks, block_size, position_bytes);
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M: 30 layers, 3 KV heads of 64 channels.
    const SMOL: (usize, usize, usize) = (30, 3, 64);

    fn smol(codes: Codes) -> usize {
        bytes_per_position(codes, SMOL.0, SMOL.1, SMOL.2)
    }

    #[test]
    fn a_position_costs_its_codes_and_their_scales() {
        // The figures `kvlab kv-size` and `KvElement::bytes_per_token` give.
        assert_eq!(smol(Codes::F32), 46_080);
        assert_eq!(smol(Codes::Int8), 12_240);
        assert_eq!(smol(Codes::Int4PerToken { group: 32 }), 8_640);
        // Smaller groups: more scales and zero points per channel.
        assert_eq!(smol(Codes::Int4PerToken { group: 16 }), 11_520);
        // Gemma 3 270M: 18 layers, one KV head of 256 channels.
        assert_eq!(bytes_per_position(Codes::Int8, 18, 1, 256), 9_360);
        assert_eq!(
            bytes_per_position(Codes::Int4PerToken { group: 64 }, 18, 1, 256),
            5_760
        );
    }

    /// The definition, position by position: the distinct blocks of the positions the
    /// query at `len` sees.
    fn blocks_brute(len: usize, window: usize, sinks: usize, bs: usize) -> usize {
        let mut blocks: Vec<usize> = (0..=len)
            .filter(|&j| j < sinks || len - j < window - sinks)
            .map(|j| j / bs)
            .collect();
        blocks.dedup();
        blocks.len()
    }

    #[test]
    fn the_blocks_held_are_those_of_the_positions_seen() {
        // Window 64 with 4 sinks, blocks of 16: the query at 299 sees 0..4 and 240..=299,
        // blocks 0 and 15..=18.
        assert_eq!(blocks_held(299, 64, 4, 16), 5);
        // At 313 the recent run starts at 254 (block 15) and ends in block 19: six.
        assert_eq!(blocks_held(313, 64, 4, 16), 6);
        // Early on everything is seen: the query at 5 holds block 0 only.
        assert_eq!(blocks_held(5, 64, 4, 16), 1);
        for bs in 1..7 {
            for window in 1..12 {
                for sinks in 0..window {
                    for len in 0..60 {
                        assert_eq!(
                            blocks_held(len, window, sinks, bs),
                            blocks_brute(len, window, sinks, bs),
                            "len {len}, window {window}, sinks {sinks}, blocks of {bs}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_peak_is_what_kvlab_eval_measured() {
        // `kvlab eval --max-tokens 300 --kv int8+sliding --window 64 --sinks 4` feeds 299
        // tokens one at a time into blocks of 16 and prints "KV cache: 1.12 MiB": six
        // blocks of int8 rows.
        let bytes = peak_window_bytes(299, 64, 4, 16, smol(Codes::Int8));
        assert_eq!(bytes, 6 * 16 * 12_240);
        assert_eq!(
            format!("{:.2} MiB", bytes as f64 / (1 << 20) as f64),
            "1.12 MiB"
        );
        // One token more: the last holds five blocks (see above), the peak is still six.
        assert_eq!(peak_window_bytes(300, 64, 4, 16, 1), 6 * 16);
    }

    #[test]
    fn element_and_retention_multiply() {
        // The same window in f32 and in int8 holds the same blocks: the ratio of the bytes
        // is the element's alone, whatever the window.
        for (window, sinks, bs) in [(64, 4, 16), (10, 0, 4), (33, 7, 8)] {
            let f32 = peak_window_bytes(500, window, sinks, bs, smol(Codes::F32));
            let int8 = peak_window_bytes(500, window, sinks, bs, smol(Codes::Int8));
            assert_eq!(
                f32 * 12_240,
                int8 * 46_080,
                "window {window}, sinks {sinks}"
            );
        }
        // And a window longer than the text holds every block, as a full cache does.
        let all = peak_window_bytes(100, 200, 4, 16, smol(Codes::Int8));
        assert_eq!(all, 100usize.div_ceil(16) * 16 * 12_240);
    }
}
