//! # Exercise 15 — the roofline: which limit sets the speed (访存密集 vs 算力密集)
//!
//! The seed article (§1.3): the bottleneck of decode is memory bandwidth (显存带宽), not
//! arithmetic. A machine has two speeds: how many bytes per second its memory delivers
//! (bandwidth, B) and how many floating-point operations per second its cores do (F). A
//! forward pass needs both, and whichever takes longer sets the time: the *roofline*
//! (Williams et al. 2009).
//!
//! - **Bytes.** Every pass streams every weight from memory once (a weight is
//!   `bytes_per_elem` bytes), and attention reads the K and V of every cached position.
//! - **FLOPs.** Every weight does one multiply and one add per token in the pass, so a
//!   pass over `n` tokens costs about `2 × params × n` FLOPs (attention's own FLOPs are
//!   small next to that for short contexts; this exercise leaves them out).
//!
//! A decode step is a pass over one token; a prefill, over the whole prompt. Same bytes,
//! very different FLOPs: that is why the first token and the rest behave so differently.
//! Numbers here use SmolLM2-135M's real shape (134 515 008 parameters, 30 layers, 3 KV
//! heads of 64, f32) on a made-up machine with round numbers; `kvlab bench` measures a
//! real one (book chapter "Prefill is compute-bound, decode memory-bound").

/// Given (exercise 13): K and V bytes one token adds to the cache, over all layers.
pub fn kv_bytes_per_token(
    n_layers: u64,
    n_kv_heads: u64,
    head_dim: u64,
    bytes_per_elem: u64,
) -> u64 {
    2 * n_layers * n_kv_heads * head_dim * bytes_per_elem
}

/// Bytes one decode step must read from memory when the cache holds `context` positions.
pub fn decode_bytes_per_token(
    params: u64,
    bytes_per_elem: u64,
    kv_bytes_per_token: u64,
    context: u64,
) -> u64 {
    // TODO: Questions:
    // - Which weights does one decode step read, and how many bytes is one weight?
    // - Which cached positions does attention read for the new token, and how many bytes
    //   is one position's K and V?
    0
}

/// The most tokens per second decode can reach when memory delivers `bandwidth` bytes/s.
pub fn decode_roof_tok_per_s(bytes_per_token: u64, bandwidth: f64) -> f64 {
    // TODO: if nothing but memory limited it, how long would one token take, and how many
    // tokens is that per second?
    0.0
}

/// FLOPs of the weight matrices for a pass over `tokens` tokens.
pub fn pass_flops(params: u64, tokens: u64) -> u64 {
    // TODO: how many floating-point operations does one weight do for one token (count
    // the add as well as the multiply)? And for `tokens` tokens in the same pass?
    0
}

/// The shortest time a prefill of `tokens` tokens can take on `flops_per_s` FLOP/s.
pub fn prefill_roof_seconds(params: u64, tokens: u64, flops_per_s: f64) -> f64 {
    // TODO: if the cores ran at their peak the whole time, how long would the FLOPs take?
    0.0
}

/// What sets the time of a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    Memory,
    Compute,
}

/// For a pass over `tokens` tokens that reads every weight once (the KV cache left out):
/// does reading the weights or computing with them take longer?
pub fn which_binds(
    params: u64,
    bytes_per_elem: u64,
    tokens: u64,
    bandwidth: f64,
    flops_per_s: f64,
) -> Bound {
    // TODO: Questions:
    // - How long does reading the weights take? Does it depend on `tokens`?
    // - How long does computing with them take? Does that depend on `tokens`?
    // - The two overlap: which one sets the time of the pass?
    Bound::Memory
}

/// SmolLM2-135M, for the tests.
pub const SMOLLM2_PARAMS: u64 = 134_515_008;
pub const F32: u64 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up machine: memory streams 100 GB/s, the cores do 2 TFLOP/s of f32.
    const BANDWIDTH: f64 = 100e9;
    const FLOPS: f64 = 2e12;

    fn smollm2_kv() -> u64 {
        kv_bytes_per_token(30, 3, 64, F32)
    }

    fn assert_rel(got: f64, want: f64) {
        assert!(
            (got - want).abs() <= want.abs() * 1e-9,
            "got {got}, want {want}"
        );
    }

    #[test]
    fn decode_reads_every_weight_and_the_whole_cache() {
        // Empty cache: just the weights, 4 bytes each.
        assert_eq!(
            decode_bytes_per_token(SMOLLM2_PARAMS, F32, smollm2_kv(), 0),
            538_060_032
        );
        // 1024 cached positions add 1024 x 46 080 bytes of K and V.
        assert_eq!(
            decode_bytes_per_token(SMOLLM2_PARAMS, F32, smollm2_kv(), 1024),
            585_245_952
        );
        // In bf16 the weights are half the bytes (here with an empty cache).
        assert_eq!(decode_bytes_per_token(SMOLLM2_PARAMS, 2, 0, 0), 269_030_016);
    }

    #[test]
    fn the_decode_roof_is_bandwidth_over_bytes() {
        let at_1k = decode_bytes_per_token(SMOLLM2_PARAMS, F32, smollm2_kv(), 1024);
        assert_rel(
            decode_roof_tok_per_s(at_1k, BANDWIDTH),
            170.868_332_635_643_75,
        );
        // Twice the bandwidth, twice the roof: nothing else enters.
        assert_rel(
            decode_roof_tok_per_s(at_1k, 2.0 * BANDWIDTH),
            2.0 * 170.868_332_635_643_75,
        );
    }

    #[test]
    fn the_roof_falls_as_the_context_grows() {
        let roof = |t| {
            decode_roof_tok_per_s(
                decode_bytes_per_token(SMOLLM2_PARAMS, F32, smollm2_kv(), t),
                BANDWIDTH,
            )
        };
        assert_rel(roof(0), 185.852_867_807_880_6);
        // At its full 8192-token context the f32 cache is 70% of the weights' bytes.
        assert_rel(roof(8192), 109.224_274_869_650_87);
        assert!(roof(0) > roof(1024) && roof(1024) > roof(8192));
    }

    #[test]
    fn prefill_flops_are_two_per_weight_per_token() {
        assert_eq!(pass_flops(SMOLLM2_PARAMS, 1), 269_030_016);
        assert_eq!(pass_flops(SMOLLM2_PARAMS, 512), 137_743_368_192);
        // 512 tokens at 2 TFLOP/s: at least 68.9 ms, whatever the bandwidth.
        assert_rel(
            prefill_roof_seconds(SMOLLM2_PARAMS, 512, FLOPS),
            0.068_871_684_096,
        );
    }

    #[test]
    fn decode_is_memory_bound_and_a_long_prefill_compute_bound() {
        let bound = |tokens| which_binds(SMOLLM2_PARAMS, F32, tokens, BANDWIDTH, FLOPS);
        assert_eq!(bound(1), Bound::Memory);
        assert_eq!(bound(512), Bound::Compute);
        // The ridge: 2 x params x n / F = 4 x params / B at n = 2 F / B = 40 tokens per pass.
        assert_eq!(bound(39), Bound::Memory);
        assert_eq!(bound(41), Bound::Compute);
        // bf16 weights halve the bytes, so the ridge moves down to 20 tokens.
        let bf16 = |tokens| which_binds(SMOLLM2_PARAMS, 2, tokens, BANDWIDTH, FLOPS);
        assert_eq!((bf16(19), bf16(21)), (Bound::Memory, Bound::Compute));
    }
}
