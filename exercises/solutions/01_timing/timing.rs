//! # Exercise 01 — timing methodology: what a TTFT includes, and how to trust it
//!
//! `kvlab compare` puts the same request through two paths and compares their times. One
//! run of each is a sample, not a measurement: the first run of a process pays for cold
//! caches and the allocator's first pages, and on a shared machine any run can be hit by
//! another process. So `compare` measures the time to first token (首token延迟, TTFT)
//! apart, in rounds:
//!
//! ```text
//! round 0 (warm-up, not counted):  cached, naive
//! round 1:                         naive,  cached
//! round 2:                         cached, naive
//! ...                              the paths alternate which goes first
//! ```
//!
//! and reports the **median** of the counted rounds: one outlier moves a mean of five runs,
//! never their median. (kvlab's median of an even count is the upper of the middle two.)
//!
//! And what does TTFT include? The prompt cannot be read before its cache exists: a cache
//! reserved for `prompt + max_new_tokens` positions is allocated and zero-filled first, and
//! zero-filling writes every byte. So the first token a request sees comes after both:
//!
//! ```text
//! TTFT as the request sees it = reserving the cache + prefill and the first sampling
//! reserving = bytes / the rate at which fresh memory can be zero-filled
//! ```
//!
//! kvlab: `src/lab/compare.rs` (`compare_with`, `round_order`), `src/lab/timing.rs`
//! (`median`), `src/generate.rs` (`alloc_ms`, `ttft_with_alloc_ms`); book chapters
//! "Introduction" (the first table), "Naive vs cached" and "Cache layouts" (§3.3).

/// Which path a run takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Cached,
    Naive,
}

/// The median of `times`: the middle one, the upper of the middle two for an even count;
/// `None` for no times.
pub fn median(times: &[f64]) -> Option<f64> {
    if times.is_empty() {
        return None;
    }
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(sorted[sorted.len() / 2])
}

/// Every run of a measurement of `rounds` counted rounds, in order: `(round, path)`, the
/// warm-up round 0 first, cached first in even rounds and naive first in odd ones.
pub fn schedule(rounds: usize) -> Vec<(usize, Path)> {
    (0..=rounds)
        .flat_map(|round| {
            let order = if round % 2 == 0 {
                [Path::Cached, Path::Naive]
            } else {
                [Path::Naive, Path::Cached]
            };
            order.map(|path| (round, path))
        })
        .collect()
}

/// The median TTFT of `path` over the counted rounds of `runs` (`(round, path, ms)`, the
/// warm-up round among them), or `None` if it has no counted run.
pub fn median_ttft(runs: &[(usize, Path, f64)], path: Path) -> Option<f64> {
    let counted: Vec<f64> = runs
        .iter()
        .filter(|&&(round, p, _)| round > 0 && p == path)
        .map(|&(_, _, ms)| ms)
        .collect();
    median(&counted)
}

/// TTFT as a request sees it, in ms: reserving and zero-filling `reserved_bytes` at
/// `fill_bytes_per_s`, then `prefill_ms`.
pub fn ttft_seen_ms(reserved_bytes: u64, fill_bytes_per_s: f64, prefill_ms: f64) -> f64 {
    reserved_bytes as f64 / fill_bytes_per_s * 1e3 + prefill_ms
}

#[cfg(test)]
mod tests {
    use super::*;
    use Path::{Cached as C, Naive as N};

    #[test]
    fn the_median_ignores_one_outlier_the_mean_does_not() {
        let times = [100.0, 102.0, 98.0, 101.0, 300.0];
        assert_eq!(median(&times), Some(101.0));
        let mean = times.iter().sum::<f64>() / 5.0;
        assert!(mean > 140.0, "the mean moved: {mean}");
        assert_eq!(
            median(&[3.0, 1.0, 2.0, 4.0]),
            Some(3.0),
            "the upper of the middle two"
        );
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[7.0]), Some(7.0));
    }

    #[test]
    fn rounds_alternate_after_a_warm_up() {
        assert_eq!(
            schedule(3),
            [
                (0, C),
                (0, N),
                (1, N),
                (1, C),
                (2, C),
                (2, N),
                (3, N),
                (3, C)
            ]
        );
        // Over an even number of counted rounds, each path goes first equally often.
        let firsts: Vec<Path> = schedule(4)
            .chunks(2)
            .skip(1)
            .map(|pair| pair[0].1)
            .collect();
        assert_eq!(firsts.iter().filter(|&&p| p == C).count(), 2);
        assert_eq!(schedule(0), [(0, C), (0, N)], "a warm-up round only");
    }

    #[test]
    fn the_warm_up_round_is_not_counted() {
        // The cold first run is the slowest; it must not reach the median.
        let runs = [
            (0, C, 900.0),
            (0, N, 500.0),
            (1, N, 210.0),
            (1, C, 205.0),
            (2, C, 208.0),
            (2, N, 212.0),
            (3, N, 211.0),
            (3, C, 207.0),
        ];
        assert_eq!(median_ttft(&runs, C), Some(207.0));
        assert_eq!(median_ttft(&runs, N), Some(211.0));
        assert_eq!(
            median_ttft(&runs[..2], C),
            None,
            "only the warm-up: nothing counted"
        );
    }

    #[test]
    fn a_large_reservation_costs_time_before_the_first_token() {
        // 177 MiB zero-filled at 1.4 GB/s (fresh pages: each one faulted in, then written)
        // before a 120 ms prefill: the request waits longer for the reservation than for
        // its prompt.
        let reserved = 177 * 1024 * 1024;
        let seen = ttft_seen_ms(reserved, 1.4e9, 120.0);
        assert!((seen - 252.57).abs() < 0.01, "{seen}");
        assert_eq!(
            ttft_seen_ms(0, 1.4e9, 120.0),
            120.0,
            "nothing reserved, nothing to wait for"
        );
    }
}
