//! What every experiment in `lab/` shares: how a time is taken, how repeated timings
//! are summarised, which machine ran them, and the synthetic prompts they feed the model.
//!
//! Figures come from medians, not means: on a shared machine a step now and then takes
//! 2-3x longer (another process, a page fault), and one such outlier moves a mean of
//! five runs but not their median. Book: prefill-decode.md, roofline.md.

use crate::error::Result;
use std::time::Instant;

/// Milliseconds since `start`.
pub fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

/// The median of `times` (the upper one of the middle two for an even count).
/// An empty list has no median: 0.0.
pub fn median(mut times: Vec<f64>) -> f64 {
    if times.is_empty() {
        return 0.0;
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Median of `reps` timings of `f`, in milliseconds (after one warm-up call).
pub fn median_ms(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut times = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        f()?;
        times.push(ms_since(start));
    }
    Ok(median(times))
}

/// `len` deterministic token ids below `vocab`, for measurements at a chosen length.
/// `stream` picks one of many different sequences (0: the one `--prompt-len` uses; the
/// prefix experiments give every request's own part another stream).
pub fn synthetic_prompt(len: usize, vocab: usize, stream: usize) -> Vec<u32> {
    let vocab = vocab.max(1);
    (0..len)
        .map(|i| ((i * 7919 + stream * 7877 + 13) % vocab) as u32)
        .collect()
}

/// The CPU model name from /proc/cpuinfo (or "unknown CPU") and the thread count, for
/// figure captions.
pub fn machine_name() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cpu}, {} threads", rayon::current_num_threads())
}
