//! # Exercise 34 — split-K attention: one softmax from many partial ones
//!
//! A decode step (解码) has one query per head and `pos + 1` keys. One block per head walks
//! them all; at a long context that leaves most of a GPU idle. Split-K (Flash-Decoding, Dao,
//! Haziza, Massa & Sizov 2023) cuts the keys into chunks of [`CHUNK`] and lets each chunk
//! compute a *partial* softmax, unnormalised, in its own block:
//!
//! ```text
//! m_s = max score in chunk s,   l_s = Σ exp(score − m_s),   acc_s[d] = Σ exp(score − m_s) · v[d]
//! ```
//!
//! A second kernel merges the chunks. Every chunk shifted its exponents by its own max; the
//! merge moves them all to the common max `m` (multiplying by `exp(m_s − m)` undoes one
//! shift and applies the other), then divides once:
//!
//! ```text
//! m = max_s m_s,   out[d] = Σ_s acc_s[d] · exp(m_s − m) / Σ_s l_s · exp(m_s − m)
//! ```
//!
//! which is exactly `softmax(scores) · V`: exercise 04's shift by the max, done in two steps.
//! The shift is not decoration: with a score of 200, `exp(200)` overflows f32, and with
//! scores of −1000 every `exp` is 0 and the sum is 0/0.
//!
//! kvlab: `kernels/attention_splitk.cu` (`attention_v3_split`, `attention_v3_combine`),
//! `src/cuda/ops_splitk.rs`; book chapter "The CUDA backend", section "Split-K attention
//! for long contexts". Its CPU twin is [`softmax_weighted_sum`] below.

/// Keys per chunk (`CHUNK` in kernels/attention_splitk.cu).
pub const CHUNK: usize = 256;

/// One chunk's partial softmax for one head: what `attention_v3_split` writes.
#[derive(Clone, Debug)]
pub struct Partial {
    /// The chunk's largest score; `-inf` when it has no key with a finite score.
    pub m: f32,
    /// `Σ exp(score − m)` over the chunk's keys.
    pub l: f32,
    /// `[head_dim]` `Σ exp(score − m) · v` over the chunk's keys.
    pub acc: Vec<f32>,
}

/// (a) The partial softmax of one chunk: `scores` `[n]`, `values` `[n, head_dim]`.
pub fn partial(scores: &[f32], values: &[f32], head_dim: usize) -> Partial {
    // TODO: Questions:
    // - Where does the search for the chunk's max start, so that a chunk of scores near
    //   -1000 finds its own max and not something bigger?
    // - Each key adds its weight to l and its weighted value row to acc. Which weight, and
    //   why is it not divided by anything here?
    // - A chunk whose every score is -inf (or that has no keys): what is exp(score - m)
    //   then, and what should the chunk report instead?
    // - The test `one_chunk_is_the_plain_softmax_bit_for_bit` wants the twin's bits: add in
    //   the order `softmax_weighted_sum` (below) adds.
    let _ = (scores, values);
    Partial {
        m: 0.0,
        l: 0.0,
        acc: vec![0.0; head_dim],
    }
}

/// (b) Merges the partials of chunks `0, 1, 2, ...`, in order, into the attention output
/// `[head_dim]`. At least one partial has a finite `m`.
pub fn combine(parts: &[Partial]) -> Vec<f32> {
    // TODO: Questions:
    // - Chunk s shifted its exponents by m_s. To which common value should every chunk be
    //   moved, so that no exp() overflows, and by what factor does that multiply its l and
    //   its acc?
    // - Which of the two, l or acc, needs that factor? (Try a chunk whose max is far below
    //   the others'.)
    // - When do you divide, and by what? What happens to a chunk with l = 0 if you divide
    //   each chunk by its own l first?
    let _ = parts;
    Vec::new()
}

/// (c) How many chunks a query at position `pos` merges, when the scratch has room for
/// `n_splits` chunks (the grid covers the key buffer's whole capacity).
pub fn chunks_used(pos: usize, n_splits: usize) -> usize {
    // TODO: Questions:
    // - How many keys does a query at position `pos` see (count position 0)? Which chunk
    //   holds its last key, and how many chunks is that, counting from chunk 0?
    // - The scratch has room for n_splits chunks: can the answer ever be more?
    let _ = (pos, n_splits);
    0
}

/// Given: the whole split-K step for one head, as the two kernels run it. `scores` and
/// `values` (`[key_rows, head_dim]`) cover the key buffer's capacity, `n_splits` chunks;
/// keys past `pos` are not this query's. Chunks past `pos` are left as a longer row left
/// them (stale scratch): the combine must not read them.
pub fn split_attention(
    scores: &[f32],
    values: &[f32],
    head_dim: usize,
    pos: usize,
    n_splits: usize,
) -> Vec<f32> {
    let stale = Partial {
        m: 30.0,
        l: 1.0,
        acc: vec![1e3; head_dim],
    };
    let parts: Vec<Partial> = (0..n_splits)
        .map(|s| {
            let first = s * CHUNK;
            if first > pos {
                return stale.clone();
            }
            let last = (first + CHUNK).min(pos + 1);
            partial(
                &scores[first..last],
                &values[first * head_dim..last * head_dim],
                head_dim,
            )
        })
        .collect();
    combine(&parts[..chunks_used(pos, n_splits)])
}

/// Given: the plain twin, one pass over all the keys: shift by the max, exponentiate, sum,
/// divide. For a single chunk it adds in exactly the order [`partial`] and [`combine`] do.
pub fn softmax_weighted_sum(scores: &[f32], values: &[f32], head_dim: usize) -> Vec<f32> {
    let max = scores.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let mut sum = 0.0;
    let mut out = vec![0.0; head_dim];
    for (&s, v) in scores.iter().zip(values.chunks_exact(head_dim)) {
        let e = (s - max).exp();
        sum += e;
        for (o, &x) in out.iter_mut().zip(v) {
            *o += e * x;
        }
    }
    out.iter().map(|o| o / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD_DIM: usize = 4;

    /// Scores in about [-3, 3] and values in [-1, 1], deterministic.
    fn keys(n: usize) -> (Vec<f32>, Vec<f32>) {
        let scores = (0..n)
            .map(|j| ((j * 37 % 101) as f32 - 50.0) * 0.06)
            .collect();
        let values = (0..n * HEAD_DIM)
            .map(|i| ((i * 53 % 89) as f32 - 44.0) / 44.0)
            .collect();
        (scores, values)
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|f| f.to_bits()).collect()
    }

    /// How far two ways of computing the same n-key softmax-weighted sum of values in
    /// [-1, 1] may drift apart. Each output is a ratio of two sums of n terms; a sum's
    /// rounding error is at most about n·u relative to its terms (u = 2^-24; recursive
    /// summation, Higham, "Accuracy and Stability of Numerical Algorithms", §4.2), and each
    /// weight exp(s − m) carries about |s − m|·u more from the rounded subtraction, which over
    /// all weights adds less than n·u again. Each computation is within ~2n·u of the exact
    /// value, so the two are within 4n·u of each other; 8n·u leaves room for exp's own ulp.
    fn tol(n: usize) -> f32 {
        8.0 * n as f32 * f32::EPSILON / 2.0
    }

    fn assert_close(got: &[f32], want: &[f32], n: usize, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (d, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= tol(n),
                "{what}: out[{d}] = {g}, the one-pass softmax gives {w} (tolerance {})",
                tol(n)
            );
        }
    }

    #[test]
    fn one_chunk_is_the_plain_softmax_bit_for_bit() {
        let (scores, values) = keys(200);
        let one = partial(&scores, &values, HEAD_DIM);
        let want = softmax_weighted_sum(&scores, &values, HEAD_DIM);
        assert!((one.l - 1.0).abs() > 1e-3, "l is not normalised");
        assert_eq!(bits(&combine(&[one])), bits(&want));
        // A position in the first chunk of a bigger buffer: the same bits.
        assert_eq!(
            bits(&split_attention(&scores, &values, HEAD_DIM, 199, 1)),
            bits(&want)
        );
    }

    #[test]
    fn a_partial_is_unnormalised_and_shifted_by_its_own_max() {
        let p = partial(&[1.0, 3.0], &[10.0, 0.0, 0.0, 10.0], 2);
        assert_eq!(p.m, 3.0);
        let e = (-2.0f32).exp();
        assert!((p.l - (1.0 + e)).abs() < 1e-6, "l = {}", p.l);
        assert!((p.acc[0] - 10.0 * e).abs() < 1e-5, "acc = {:?}", p.acc);
        assert!((p.acc[1] - 10.0).abs() < 1e-5, "acc = {:?}", p.acc);
    }

    #[test]
    fn chunks_across_boundaries_agree_with_one_pass() {
        let (scores, values) = keys(1024);
        for pos in [255, 256, 257, 511, 512, 699, 1023] {
            let n = pos + 1;
            let want = softmax_weighted_sum(&scores[..n], &values[..n * HEAD_DIM], HEAD_DIM);
            // 4 chunks of room (a 1024-key buffer), whatever the position.
            let got = split_attention(&scores, &values, HEAD_DIM, pos, 4);
            assert_close(&got, &want, n, &format!("pos {pos}"));
        }
        // By hand: 700 keys as chunks of 256, 256 and 188.
        let n = 700;
        let parts: Vec<Partial> = [0..256, 256..512, 512..700]
            .into_iter()
            .map(|r| {
                partial(
                    &scores[r.clone()],
                    &values[r.start * HEAD_DIM..r.end * HEAD_DIM],
                    HEAD_DIM,
                )
            })
            .collect();
        let want = softmax_weighted_sum(&scores[..n], &values[..n * HEAD_DIM], HEAD_DIM);
        assert_close(&combine(&parts), &want, n, "three chunks by hand");
    }

    #[test]
    fn a_chunk_with_no_finite_score_adds_nothing() {
        let inf = f32::NEG_INFINITY;
        let masked = partial(&[inf, inf], &[1.0; 2 * HEAD_DIM], HEAD_DIM);
        assert_eq!(masked.m, inf);
        assert_eq!(masked.l, 0.0);
        assert_eq!(masked.acc, vec![0.0; HEAD_DIM], "no NaN in an empty chunk");
        let empty = partial(&[], &[], HEAD_DIM);
        assert_eq!((empty.m, empty.l), (inf, 0.0));
        assert_eq!(empty.acc, vec![0.0; HEAD_DIM]);

        let (scores, values) = keys(40);
        let real = partial(&scores, &values, HEAD_DIM);
        let alone = bits(&combine(std::slice::from_ref(&real)));
        assert_eq!(bits(&combine(&[real.clone(), masked.clone()])), alone);
        assert_eq!(bits(&combine(&[masked, real.clone(), empty])), alone);
    }

    #[test]
    fn all_negative_scores() {
        let (scores, values) = keys(600);
        let low: Vec<f32> = scores.iter().map(|s| s - 1000.0).collect();
        let got = split_attention(&low, &values, HEAD_DIM, 599, 3);
        assert!(got.iter().all(|x| x.is_finite()), "{got:?}");
        let want = softmax_weighted_sum(&low, &values, HEAD_DIM);
        assert_close(&got, &want, 600, "scores near -1000");
    }

    #[test]
    fn one_huge_score_does_not_overflow() {
        // exp(200) is inf in f32: without the shift by the max every sum overflows.
        let (mut scores, values) = keys(700);
        scores[300] = 200.0; // in the middle chunk of three
        let got = split_attention(&scores, &values, HEAD_DIM, 699, 3);
        assert!(got.iter().all(|x| x.is_finite()), "{got:?}");
        // Every other weight is below exp(-190): the output is key 300's value.
        let v300 = &values[300 * HEAD_DIM..301 * HEAD_DIM];
        assert_close(&got, v300, 700, "score 200");
        let want = softmax_weighted_sum(&scores, &values, HEAD_DIM);
        assert_close(&got, &want, 700, "score 200");
    }

    #[test]
    fn a_position_merges_the_chunks_up_to_its_own() {
        assert_eq!(chunks_used(0, 16), 1, "position 0 has one key");
        assert_eq!(chunks_used(255, 16), 1);
        assert_eq!(chunks_used(256, 16), 2, "key 256 opens chunk 1");
        assert_eq!(chunks_used(699, 4), 3);
        assert_eq!(chunks_used(4095, 16), 16);
        assert_eq!(chunks_used(4096, 16), 16, "never past the scratch");
        assert_eq!(chunks_used(10_000, 4), 4);
    }
}
