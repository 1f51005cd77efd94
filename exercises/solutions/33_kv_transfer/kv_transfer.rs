//! # Exercise 33 — the KV cache on the wire: what disaggregation ships
//!
//! Disaggregated serving (DistServe, Splitwise) runs prefill (预填充) on one machine and
//! decode (解码) on another. After the prefill, a request's state is its prompt, its first
//! token and the K and V of every prompt position in every layer: the KV缓存 (KV cache)
//! itself, which must cross the link before the decode machine can take the second token.
//! For one request:
//!
//! ```text
//! bytes    = header + prompt_tokens · kv_bytes_per_token
//! transfer = latency + bytes / bandwidth                       (seconds)
//! ```
//!
//! `kv_bytes_per_token` is the formula of exercise 6: 46,080 bytes for SmolLM2 in f32
//! (a 1000-token prompt ships 46 MB), 524,288 for a 7B MHA model in bf16 (a 4096-token
//! prompt ships 2 GiB). Whether shipping pays depends on the link: the transfer adds to
//! the request's time to the second token, and the decode machine cannot use the blocks
//! before they arrive. One way to size it is a budget: the longest prompt whose transfer
//! still fits in, say, one decode step, so that it hides behind work already running.
//!
//! kvlab: `src/engine/transfer.rs` (`KvTransfer`: a 48-byte header, the pool element's
//! name and the token ids, then the rows as the pool stores them: little-endian f32, or
//! int8 codes and scales with `--kv int8`), `src/lab/disagg.rs` (`kvlab bench-disagg`: the same workload over
//! loopback TCP and on one engine); book chapter "A server", section "Disaggregation".

/// The fixed header `src/engine/transfer.rs` writes before the rows (the element's name
/// and the token ids that follow it are left out here).
pub const HEADER_BYTES: u64 = 48;

/// Bytes one request's transfer puts on the wire, or `None` if the count overflows u64.
pub fn transfer_bytes(prompt_tokens: u64, kv_bytes_per_token: u64) -> Option<u64> {
    prompt_tokens
        .checked_mul(kv_bytes_per_token)?
        .checked_add(HEADER_BYTES)
}

/// Seconds to ship `bytes` over a link of `bandwidth` bytes/s that adds `latency_s`.
pub fn transfer_s(bytes: u64, bandwidth: f64, latency_s: f64) -> f64 {
    latency_s + bytes as f64 / bandwidth
}

/// The longest prompt whose transfer fits in `budget_s`: 0 when even the latency does not.
pub fn longest_prompt_within(
    kv_bytes_per_token: u64,
    bandwidth: f64,
    latency_s: f64,
    budget_s: f64,
) -> u64 {
    let room = (budget_s - latency_s) * bandwidth - HEADER_BYTES as f64;
    if room <= 0.0 || kv_bytes_per_token == 0 {
        return 0;
    }
    (room / kv_bytes_per_token as f64).floor() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOLLM2_F32: u64 = 46_080;
    const MHA_7B_BF16: u64 = 524_288;

    #[test]
    fn smollm2_ships_46_mb_for_a_thousand_tokens() {
        assert_eq!(transfer_bytes(1000, SMOLLM2_F32), Some(46_080_048));
        assert_eq!(
            transfer_bytes(0, SMOLLM2_F32),
            Some(48),
            "an empty prompt still sends its header"
        );
    }

    #[test]
    fn sizes_that_overflow_are_none() {
        assert_eq!(transfer_bytes(u64::MAX / 2, MHA_7B_BF16), None);
        assert_eq!(
            transfer_bytes(u64::MAX / SMOLLM2_F32, SMOLLM2_F32 + 1),
            None
        );
        assert_eq!(
            transfer_bytes(1, u64::MAX - 43),
            None,
            "the header can overflow too"
        );
    }

    #[test]
    fn a_7b_prompt_over_100_gbit_takes_a_sixth_of_a_second() {
        let bytes = transfer_bytes(4096, MHA_7B_BF16).unwrap();
        assert_eq!(bytes, 2 * 1024 * 1024 * 1024 + 48);
        let t = transfer_s(bytes, 12.5e9, 10e-6);
        assert!((t - 0.171_808_0).abs() < 1e-6, "{t}");
    }

    #[test]
    fn latency_counts_once_and_bandwidth_divides() {
        assert_eq!(transfer_s(0, 1e9, 0.002), 0.002);
        assert!((transfer_s(1_000_000_000, 2e9, 0.0) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn the_longest_prompt_that_hides_behind_a_decode_step() {
        // A 20 ms decode step, a 10 GB/s link with 1 ms of latency: 19 ms of transfer.
        let n = longest_prompt_within(SMOLLM2_F32, 10e9, 0.001, 0.020);
        assert_eq!(n, 4123);
        // The answer is the longest: one more token does not fit, this one does.
        let fits =
            |n: u64| transfer_s(transfer_bytes(n, SMOLLM2_F32).unwrap(), 10e9, 0.001) <= 0.020;
        assert!(fits(n) && !fits(n + 1));
        // 4231.8 tokens' worth of room: whole tokens only.
        assert_eq!(
            longest_prompt_within(SMOLLM2_F32, 10e9, 0.001, 0.0205),
            4231
        );
        // A budget the latency alone spends: nothing fits.
        assert_eq!(longest_prompt_within(SMOLLM2_F32, 10e9, 0.020, 0.020), 0);
        assert_eq!(longest_prompt_within(SMOLLM2_F32, 10e9, 0.030, 0.020), 0);
    }
}
