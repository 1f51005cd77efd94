//! # Exercise 11 — a decode step: one new query over the cache (解码 decode)
//!
//! After prefill, each decode step (解码) feeds only the newest token: compute its q, k and
//! v, append k and v to the cache (exercise 10), then attend with q over every position the
//! cache holds. The past keys and values are read, never recomputed; that is the whole trick
//! (§2.2: "每次decode只需要为最新token算一次K和V，历史token的K、V直接复用").
//!
//! The new token is the last position, and the causal mask (exercise 06) lets the last row
//! see everything before it. So no mask is needed here: attending over the cache's `len`
//! positions gives the same row the naive path recomputes from scratch, which the tests
//! check.
//!
//! The cache layout is `[capacity, n_kv_heads, head_dim]`: position-major, so one append
//! writes one contiguous row. Reading one head is a strided walk through it.

/// Given (exercise 04): numerically stable softmax, in place.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in x.iter_mut() {
        *v /= sum;
    }
}

pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Given (exercise 10): one layer's preallocated KV cache.
pub struct KvCache {
    /// `[capacity, n_kv_heads, head_dim]`; positions `0..len` are filled.
    pub k_cache: Vec<f32>,
    /// `[capacity, n_kv_heads, head_dim]`; positions `0..len` are filled.
    pub v_cache: Vec<f32>,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub capacity: usize,
    pub len: usize,
}

impl KvCache {
    pub fn new(n_kv_heads: usize, head_dim: usize, capacity: usize) -> Self {
        let size = capacity * n_kv_heads * head_dim;
        let (k_cache, v_cache) = (vec![0.0; size], vec![0.0; size]);
        KvCache {
            k_cache,
            v_cache,
            n_kv_heads,
            head_dim,
            capacity,
            len: 0,
        }
    }

    /// Writes one position; `k`, `v`: `[n_kv_heads, head_dim]`. Panics when full, to keep
    /// this exercise short (exercise 10 returns `CacheFull` instead).
    pub fn append(&mut self, k: &[f32], v: &[f32]) {
        let row = self.n_kv_heads * self.head_dim;
        assert!(self.len < self.capacity, "cache full");
        let start = self.len * row;
        self.k_cache[start..start + row].copy_from_slice(k);
        self.v_cache[start..start + row].copy_from_slice(v);
        self.len += 1;
    }

    pub fn reset(&mut self) {
        self.len = 0;
    }
}

/// Attention of one query `q: [head_dim]` over KV head `kv_head` of the cache's first
/// `cache.len` positions. Returns `[head_dim]`.
pub fn cached_attention(q: &[f32], cache: &KvCache, kv_head: usize) -> Vec<f32> {
    let (head_dim, n_kv_heads) = (cache.head_dim, cache.n_kv_heads);
    assert_eq!(q.len(), head_dim);
    assert!(kv_head < n_kv_heads);
    // Where position t's vector for this head starts in the [capacity, n_kv_heads, head_dim]
    // buffers.
    let offset = |t: usize| (t * n_kv_heads + kv_head) * head_dim;
    let scale = 1.0 / (head_dim as f32).sqrt();
    // Why 0..len and not 0..capacity: rows past `len` are unwritten or stale (left over
    // from a previous request after `reset`); they must never be read.
    let mut scores: Vec<f32> = (0..cache.len)
        .map(|t| dot(q, &cache.k_cache[offset(t)..offset(t) + head_dim]) * scale)
        .collect();
    softmax(&mut scores);
    let mut out = vec![0.0f32; head_dim];
    for (t, w) in scores.iter().enumerate() {
        let v_t = &cache.v_cache[offset(t)..offset(t) + head_dim];
        for (o, x) in out.iter_mut().zip(v_t) {
            *o += w * x;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: exercise 06's causal attention for one head, `[seq, head_dim]` in and out.
    fn causal_reference(q: &[f32], k: &[f32], v: &[f32], head_dim: usize) -> Vec<f32> {
        let seq = q.len() / head_dim;
        let mut out = vec![0.0f32; seq * head_dim];
        for i in 0..seq {
            let q_i = &q[i * head_dim..(i + 1) * head_dim];
            // masked: only j <= i get a score, the future stays -inf
            let mut scores = vec![f32::NEG_INFINITY; seq];
            for (j, s) in scores.iter_mut().enumerate().take(i + 1) {
                *s = dot(q_i, &k[j * head_dim..(j + 1) * head_dim]) / (head_dim as f32).sqrt();
            }
            softmax(&mut scores);
            for (j, w) in scores.iter().enumerate() {
                for d in 0..head_dim {
                    out[i * head_dim + d] += w * v[j * head_dim + d];
                }
            }
        }
        out
    }

    fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Within 1e-5, not bitwise: your loop may add in a different order than the reference,
    /// and float addition is not associative. (kvlab's naive and cached paths share one
    /// attention function, and there the results are bitwise equal.)
    fn assert_close(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        for (d, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() < 1e-5, "{what}, dim {d}: got {g}, want {w}");
        }
    }

    /// Head `h` of a `[seq, n_kv_heads, head_dim]` buffer, as a contiguous `[seq, head_dim]`.
    fn one_head(x: &[f32], h: usize, n_kv_heads: usize, head_dim: usize) -> Vec<f32> {
        x.chunks_exact(head_dim)
            .skip(h)
            .step_by(n_kv_heads)
            .flatten()
            .copied()
            .collect()
    }

    #[test]
    fn one_position_returns_its_value() {
        let mut cache = KvCache::new(1, 3, 4);
        cache.append(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]);
        assert_eq!(
            cached_attention(&[0.5, 0.5, 0.5], &cache, 0),
            vec![4.0, 5.0, 6.0]
        );
    }

    #[test]
    fn decode_after_prefill_equals_the_last_causal_row() {
        // Prefill puts the prompt's tokens 0..5 into the cache; the decode step appends
        // token 5 and attends with its query.
        let (seq, hd) = (6, 8);
        let (q, k, v) = (
            pseudo_random(seq * hd, 1),
            pseudo_random(seq * hd, 2),
            pseudo_random(seq * hd, 3),
        );
        let mut cache = KvCache::new(1, hd, 16);
        for t in 0..seq {
            cache.append(&k[t * hd..(t + 1) * hd], &v[t * hd..(t + 1) * hd]);
        }
        let got = cached_attention(&q[(seq - 1) * hd..], &cache, 0);
        let naive = causal_reference(&q, &k, &v, hd);
        assert_close(&got, &naive[(seq - 1) * hd..], "last position");
    }

    #[test]
    fn every_decode_step_equals_the_naive_recompute() {
        // Token by token, two KV heads: step t sees exactly what the naive path sees in row t.
        let (seq, n_kv_heads, hd) = (7, 2, 4);
        let row = n_kv_heads * hd;
        let (q, k, v) = (
            pseudo_random(seq * row, 4),
            pseudo_random(seq * row, 5),
            pseudo_random(seq * row, 6),
        );
        let mut cache = KvCache::new(n_kv_heads, hd, seq);
        for t in 0..seq {
            cache.append(&k[t * row..(t + 1) * row], &v[t * row..(t + 1) * row]);
            for h in 0..n_kv_heads {
                let (qh, kh, vh) = (
                    one_head(&q, h, n_kv_heads, hd),
                    one_head(&k, h, n_kv_heads, hd),
                    one_head(&v, h, n_kv_heads, hd),
                );
                let naive = causal_reference(
                    &qh[..(t + 1) * hd],
                    &kh[..(t + 1) * hd],
                    &vh[..(t + 1) * hd],
                    hd,
                );
                let got = cached_attention(&qh[t * hd..(t + 1) * hd], &cache, h);
                assert_close(&got, &naive[t * hd..], &format!("step {t}, kv head {h}"));
            }
        }
    }

    #[test]
    fn stale_rows_past_len_are_ignored() {
        let hd = 4;
        let mut cache = KvCache::new(1, hd, 8);
        // A first request leaves 6 positions of large values behind...
        for _ in 0..6 {
            cache.append(&[9.0; 4], &[100.0; 4]);
        }
        cache.reset();
        // ...and the second request has written only 2.
        let (k, v) = (pseudo_random(2 * hd, 7), pseudo_random(2 * hd, 8));
        cache.append(&k[..hd], &v[..hd]);
        cache.append(&k[hd..], &v[hd..]);
        let q = pseudo_random(2 * hd, 9);
        let naive = causal_reference(&q, &k, &v, hd);
        assert_close(
            &cached_attention(&q[hd..], &cache, 0),
            &naive[hd..],
            "after reset",
        );
    }
}
