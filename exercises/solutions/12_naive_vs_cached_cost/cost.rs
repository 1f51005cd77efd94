//! # Exercise 12 — what the cache saves: counting q·k dot products (O(N³) vs O(N²))
//!
//! The seed article (§2.2): without a cache, step t recomputes attention for all t
//! positions, O(t²) work per step and O(N³) in total; with the cache each step does one
//! query against t keys, O(t) per step and O(N²) in total. "打开KV缓存和关闭KV缓存，解码速度
//! 可以差出一个数量级." This exercise counts it exactly, per layer and per head.
//!
//! Generating `N` new tokens from a prompt of `P` tokens takes `N` forward passes. Pass `s`
//! (0-based) sees `L = P + s` tokens: the prompt plus the `s` tokens generated so far (the
//! last generated token is never fed back, so there is no pass after it).
//!
//! ```text
//! naive,  any pass:        causal attention over all L rows (exercise 06), from scratch
//! cached, pass 0 (prefill, 预填充): the same; there is nothing cached yet
//! cached, pass s >= 1 (decode, 解码): only the new token's query, over the cache (exercise 11)
//! ```
//!
//! How many q·k dot products is each? Count them on a 4-token example before you write
//! any code.
//!
//! Pass 0 costs the same either way: the cache does nothing for the first token's latency
//! (首token延迟, TTFT). Its whole benefit is in the decode passes, and it grows with N.

/// Dot products in naive pass `step`: full causal attention over `prompt_len + step` tokens.
pub fn naive_step(prompt_len: u64, step: u64) -> u64 {
    let len = prompt_len + step;
    // Row i attends to keys 0..=i: 1 + 2 + ... + len.
    len * (len + 1) / 2
}

/// Dot products in cached pass `step`: prefill at step 0, one query per decode step after.
pub fn cached_step(prompt_len: u64, step: u64) -> u64 {
    let len = prompt_len + step;
    if step == 0 {
        // Prefill is causal attention over the prompt, exactly like the naive path.
        len * (len + 1) / 2
    } else {
        // Why only `len`: the new token's query against every cached key (itself included);
        // the rows of the past are not recomputed.
        len
    }
}

/// Total dot products to generate `new_tokens` tokens without a cache.
pub fn naive_total(prompt_len: u64, new_tokens: u64) -> u64 {
    (0..new_tokens).map(|s| naive_step(prompt_len, s)).sum()
}

/// Total dot products to generate `new_tokens` tokens with a KV cache.
pub fn cached_total(prompt_len: u64, new_tokens: u64) -> u64 {
    (0..new_tokens).map(|s| cached_step(prompt_len, s)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 + 2 + ... + n
    fn triangular(n: u64) -> u64 {
        n * (n + 1) / 2
    }

    /// triangular(1) + ... + triangular(n) = n(n + 1)(n + 2)/6: where the N³ comes from.
    fn tetrahedral(n: u64) -> u64 {
        n * (n + 1) * (n + 2) / 6
    }

    #[test]
    fn hand_counted_steps() {
        // P = 4: the prompt alone is 1 + 2 + 3 + 4 = 10 either way.
        assert_eq!(naive_step(4, 0), 10);
        assert_eq!(cached_step(4, 0), 10);
        // Pass 2 sees 6 tokens: naive redoes all 21 pairs, cached does 6.
        assert_eq!(naive_step(4, 2), 21);
        assert_eq!(cached_step(4, 2), 6);
        // P = 4, N = 3: naive 10 + 15 + 21 = 46; cached 10 + 5 + 6 = 21.
        assert_eq!(naive_total(4, 3), 46);
        assert_eq!(cached_total(4, 3), 21);
    }

    #[test]
    fn the_first_token_costs_the_same() {
        // TTFT: the cache cannot help the prefill.
        for p in [1, 7, 100, 4096] {
            assert!(naive_total(p, 1) > 0);
            assert_eq!(naive_total(p, 1), cached_total(p, 1), "prompt {p}");
        }
    }

    #[test]
    fn closed_forms() {
        for p in 1..20 {
            assert_eq!((naive_total(p, 0), cached_total(p, 0)), (0, 0));
            for n in 1..40 {
                let t = p + n - 1; // tokens seen by the last pass
                                   // Cached: every (query, key <= query) pair once: T(T + 1)/2, O(N²).
                assert_eq!(
                    cached_total(p, n),
                    triangular(t),
                    "cached, P = {p}, N = {n}"
                );
                // Naive: a triangle per pass, summed: a tetrahedral number, O(N³).
                assert_eq!(
                    naive_total(p, n),
                    tetrahedral(t) - tetrahedral(p - 1),
                    "naive, P = {p}, N = {n}"
                );
            }
        }
    }

    #[test]
    fn per_step_cost_quadratic_vs_linear() {
        // Double the context: naive's step costs ~4x, cached's 2x. Step 1023 sees 1024 tokens.
        let (short, long) = (511, 1023);
        let naive = naive_step(1, long) as f64 / naive_step(1, short) as f64;
        let cached = cached_step(1, long) as f64 / cached_step(1, short) as f64;
        assert!((naive - 4.0).abs() < 0.01, "naive ratio {naive}");
        assert!((cached - 2.0).abs() < 0.01, "cached ratio {cached}");
    }

    #[test]
    fn the_saving_grows_with_the_generation_length() {
        let ratio = |n| naive_total(16, n) as f64 / cached_total(16, n) as f64;
        let ratios: Vec<f64> = [1, 64, 256, 1024].iter().map(|&n| ratio(n)).collect();
        assert_eq!(ratios[0], 1.0);
        assert!(ratios.windows(2).all(|w| w[1] > w[0]), "ratios {ratios:?}");
        // "an order of magnitude": 27x at 64 new tokens, 347x at 1024
        assert!(ratios[1] > 20.0 && ratios[3] > 300.0, "ratios {ratios:?}");
    }

    #[test]
    fn long_contexts_need_u64() {
        // A 2048-token prompt and 2048 new tokens: ten billion dot products naive, per
        // layer and head, more than u32 can count; 8.4 million cached.
        assert_eq!(naive_total(2048, 2048), 10_021_590_016);
        assert_eq!(cached_total(2048, 2048), 8_386_560);
    }
}
