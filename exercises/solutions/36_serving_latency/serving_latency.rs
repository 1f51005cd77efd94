//! # Exercise 36 — what a load test measures: TTFT, ITL, TPOT and their p99
//!
//! `kvlab loadtest` sends each request at its planned time and writes down when every
//! chunk of the streamed answer arrived. Three latencies come out of those times, the
//! ones vLLM's serving benchmark reports:
//!
//! ```text
//! TTFT = first chunk − sent                    (time to first token: queue + prefill)
//! ITL  = chunk[i] − chunk[i−1], i ≥ 1          (inter-token latency: the gaps a reader sees)
//! TPOT = (last chunk − first chunk) / (tokens − 1)   (time per output token after the first)
//! ```
//!
//! TTFT counts from when the request was *sent*, not from the start of the test: a
//! request that waits in the queue waits on its user's clock. ITL and TPOT differ once a
//! chunk can hold several tokens: with speculative decoding (推测解码) one iteration
//! accepts several drafts, the server sends them together, and the gaps become bursty (a
//! long one, then zeros), while TPOT, one number per request, stays its decode speed.
//!
//! A tail is a percentile. The load test uses the *nearest rank*: the p-th percentile of
//! n samples is the ⌈p·n⌉-th smallest (1-based), so p99 of 30 samples is the largest and
//! p50 of 4 is the second. It is always one of the samples, never an interpolation.
//!
//! kvlab: `src/server/loadtest.rs` (`summarise`, `tpot_ms`, `Percentiles::of`); book
//! chapter "A server", sections "Many users: the load test" and "Weights, cache and
//! drafts, composed".

/// One streamed request as the client saw it. Times in ms since the test started.
pub struct Request {
    pub sent_ms: f64,
    /// Arrival time of each chunk of text, in order.
    pub chunk_ms: Vec<f64>,
    /// Tokens the server generated (a chunk may hold several).
    pub tokens: usize,
}

/// Time to first token, from the request's send; `None` if no chunk came.
pub fn ttft_ms(r: &Request) -> Option<f64> {
    Some(r.chunk_ms.first()? - r.sent_ms)
}

/// The gaps between consecutive chunks (the TTFT is not one of them).
pub fn itl_ms(r: &Request) -> Vec<f64> {
    r.chunk_ms.windows(2).map(|w| w[1] - w[0]).collect()
}

/// Time per output token after the first; `None` below two tokens.
pub fn tpot_ms(r: &Request) -> Option<f64> {
    let (first, last) = (r.chunk_ms.first()?, r.chunk_ms.last()?);
    if r.tokens < 2 {
        return None;
    }
    Some((last - first) / (r.tokens - 1) as f64)
}

/// The nearest-rank `p`-th percentile (`p` in (0, 1]) of `samples`; `None` if empty.
pub fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (p * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(sent_ms: f64, chunk_ms: &[f64], tokens: usize) -> Request {
        Request {
            sent_ms,
            chunk_ms: chunk_ms.to_vec(),
            tokens,
        }
    }

    #[test]
    fn ttft_counts_from_the_send_not_from_the_start_of_the_test() {
        let r = request(500.0, &[700.0, 740.0], 2);
        assert_eq!(ttft_ms(&r), Some(200.0));
        assert_eq!(ttft_ms(&request(0.0, &[], 0)), None, "no chunk, no TTFT");
    }

    #[test]
    fn the_gaps_start_at_the_first_chunk() {
        let r = request(500.0, &[700.0, 740.0, 790.0], 3);
        assert_eq!(itl_ms(&r), vec![40.0, 50.0]);
        assert!(itl_ms(&request(0.0, &[10.0], 1)).is_empty());
    }

    #[test]
    fn tpot_divides_by_the_tokens_after_the_first_not_the_chunks() {
        // Five tokens in three chunks: a speculative step sent three tokens at once.
        let r = request(0.0, &[100.0, 140.0, 180.0], 5);
        assert_eq!(tpot_ms(&r), Some(20.0));
        // One token a chunk: TPOT is the mean gap.
        let plain = request(0.0, &[100.0, 130.0, 190.0], 3);
        assert_eq!(tpot_ms(&plain), Some(45.0));
        assert_eq!(tpot_ms(&request(0.0, &[100.0], 1)), None);
    }

    #[test]
    fn a_burst_of_drafts_makes_the_gaps_uneven_but_not_the_speed() {
        // The same 4 tokens in 90 ms: one a chunk, then in two bursts of two.
        let steady = request(0.0, &[10.0, 40.0, 70.0, 100.0], 4);
        let bursty = request(0.0, &[10.0, 10.0, 100.0, 100.0], 4);
        assert_eq!(tpot_ms(&steady), tpot_ms(&bursty));
        assert_eq!(percentile(&itl_ms(&bursty), 0.5), Some(0.0));
        assert_eq!(percentile(&itl_ms(&bursty), 0.99), Some(90.0));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&hundred, 0.5), Some(50.0));
        assert_eq!(percentile(&hundred, 0.99), Some(99.0));
        assert_eq!(percentile(&hundred, 1.0), Some(100.0));
        let thirty: Vec<f64> = (1..=30).map(f64::from).collect();
        assert_eq!(
            percentile(&thirty, 0.99),
            Some(30.0),
            "p99 of 30 is the largest"
        );
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.5), Some(2.0));
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn percentiles_of_unsorted_samples() {
        let samples = [30.0, 10.0, 50.0, 20.0, 40.0];
        assert_eq!(percentile(&samples, 0.5), Some(30.0));
        assert_eq!(percentile(&samples, 0.2), Some(10.0));
        assert_eq!(percentile(&samples, 0.99), Some(50.0));
        assert_eq!(samples[0], 30.0, "the caller's samples stay as they were");
    }
}
