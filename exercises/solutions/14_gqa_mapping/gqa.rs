//! # Exercise 14 — grouped-query attention (GQA, 分组查询注意力)
//!
//! Multi-head attention (MHA) gives every query head its own K and V head, and the cache
//! stores all of them. GQA (Ainslie et al. 2023) lets a *group* of query heads share one KV
//! head, so the cache shrinks by the group size (§3.4: "KV缓存体积直接除以组数"). MQA
//! (Shazeer 2019) is the extreme, one KV head for all. SmolLM2-135M has 9 query heads and
//! 3 KV heads; Llama-3-8B, 32 and 8.
//!
//! As in llama2.c, GQA is two integers: the group size `kv_mul = n_heads / n_kv_heads`
//! (query heads per KV head), and the KV head each query head reads. *Neighbouring* query
//! heads form a group: heads `0..kv_mul` share KV head 0, the next `kv_mul` share KV head
//! 1, and so on; that is the order Hugging Face's `repeat_kv` produces. The cache holds
//! `n_kv_heads` heads, never the repeated ones: repeating them in memory would throw the
//! saving away.

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

/// The KV head that query head `h` reads.
pub fn kv_head_for(h: usize, n_heads: usize, n_kv_heads: usize) -> usize {
    // Groups must be whole: 9 query heads cannot share 2 KV heads evenly.
    assert_eq!(n_heads % n_kv_heads, 0, "uneven groups");
    let kv_mul = n_heads / n_kv_heads;
    // Why divide and not `h % n_kv_heads`: neighbouring query heads form a group.
    h / kv_mul
}

/// Decode-step attention for all heads of one new token, with GQA.
///
/// `q: [n_heads, head_dim]`; `k_cache`, `v_cache`: `[len, n_kv_heads, head_dim]` (the filled
/// positions only). Returns `[n_heads, head_dim]`.
pub fn gqa_attention(
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
) -> Vec<f32> {
    assert_eq!(q.len(), n_heads * head_dim);
    assert_eq!(k_cache.len(), v_cache.len());
    let len = k_cache.len() / (n_kv_heads * head_dim);
    let scale = 1.0 / (head_dim as f32).sqrt();
    let mut out = vec![0.0f32; n_heads * head_dim];
    let mut scores = vec![0.0f32; len];
    for h in 0..n_heads {
        let kv_h = kv_head_for(h, n_heads, n_kv_heads);
        // Position t's vector for KV head kv_h in a [len, n_kv_heads, head_dim] buffer.
        let at = |t: usize| (t * n_kv_heads + kv_h) * head_dim;
        let q_h = &q[h * head_dim..(h + 1) * head_dim];
        for (t, s) in scores.iter_mut().enumerate() {
            *s = dot(q_h, &k_cache[at(t)..at(t) + head_dim]) * scale;
        }
        softmax(&mut scores);
        let out_h = &mut out[h * head_dim..(h + 1) * head_dim];
        for (t, w) in scores.iter().enumerate() {
            for (o, x) in out_h.iter_mut().zip(&v_cache[at(t)..at(t) + head_dim]) {
                *o += w * x;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Reference: one query over one head's contiguous `[len, head_dim]` keys and values.
    fn single_head(q: &[f32], k: &[f32], v: &[f32], head_dim: usize) -> Vec<f32> {
        let mut w: Vec<f32> = k
            .chunks_exact(head_dim)
            .map(|k_t| dot(q, k_t) / (head_dim as f32).sqrt())
            .collect();
        softmax(&mut w);
        (0..head_dim)
            .map(|d| {
                w.iter()
                    .enumerate()
                    .map(|(t, w_t)| w_t * v[t * head_dim + d])
                    .sum()
            })
            .collect()
    }

    /// KV head `h` of a `[len, n_kv_heads, head_dim]` cache, as a contiguous `[len, head_dim]`.
    fn one_head(x: &[f32], h: usize, n_kv_heads: usize, head_dim: usize) -> Vec<f32> {
        x.chunks_exact(head_dim)
            .skip(h)
            .step_by(n_kv_heads)
            .flatten()
            .copied()
            .collect()
    }

    /// Checks every query head h against the reference on KV head `expected_kv(h)`.
    fn check_against_reference(
        n_heads: usize,
        n_kv_heads: usize,
        expected_kv: impl Fn(usize) -> usize,
    ) {
        let (len, hd) = (5, 4);
        let q = pseudo_random(n_heads * hd, 1);
        let k = pseudo_random(len * n_kv_heads * hd, 2);
        let v = pseudo_random(len * n_kv_heads * hd, 3);
        let out = gqa_attention(&q, &k, &v, n_heads, n_kv_heads, hd);
        assert_eq!(out.len(), n_heads * hd);
        for h in 0..n_heads {
            let kv = expected_kv(h);
            let (kh, vh) = (
                one_head(&k, kv, n_kv_heads, hd),
                one_head(&v, kv, n_kv_heads, hd),
            );
            let want = single_head(&q[h * hd..(h + 1) * hd], &kh, &vh, hd);
            for (d, (g, w)) in out[h * hd..(h + 1) * hd].iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() < 1e-5,
                    "query head {h} (KV head {kv}), dim {d}: got {g}, want {w}"
                );
            }
        }
    }

    #[test]
    fn mapping_mha_gqa_mqa() {
        // MHA: every query head has its own KV head.
        let mha: Vec<usize> = (0..4).map(|h| kv_head_for(h, 4, 4)).collect();
        assert_eq!(mha, [0, 1, 2, 3]);
        // GQA 9/3 (SmolLM2-135M): kv_mul = 3, neighbours share.
        let gqa: Vec<usize> = (0..9).map(|h| kv_head_for(h, 9, 3)).collect();
        assert_eq!(gqa, [0, 0, 0, 1, 1, 1, 2, 2, 2]);
        // MQA: one KV head for everyone.
        let mqa: Vec<usize> = (0..6).map(|h| kv_head_for(h, 6, 1)).collect();
        assert_eq!(mqa, [0; 6]);
        // Llama-3-8B, 32/8: groups of 4. Here the group size (4) and the number of KV
        // heads (8) differ, so dividing by the wrong one shows.
        let llama3: Vec<usize> = (0..32).map(|h| kv_head_for(h, 32, 8)).collect();
        let want: Vec<usize> = (0..8).flat_map(|kv| [kv; 4]).collect();
        assert_eq!(llama3, want);
    }

    #[test]
    #[should_panic]
    fn uneven_groups_are_rejected() {
        kv_head_for(0, 9, 2);
    }

    #[test]
    fn mha_is_independent_heads() {
        check_against_reference(4, 4, |h| h);
    }

    #[test]
    fn gqa_9_over_3_reads_the_group_kv_head() {
        check_against_reference(9, 3, |h| h / 3);
    }

    #[test]
    fn mqa_every_head_reads_kv_head_0() {
        check_against_reference(4, 1, |_| 0);
    }

    #[test]
    fn gqa_equals_mha_with_repeated_kv_heads() {
        // What GQA saves: the same result as an MHA cache in which each KV head is stored
        // kv_mul times (HF's repeat_kv), from a cache kv_mul times smaller.
        let (n_heads, n_kv_heads, hd, len) = (8, 2, 4, 6);
        let kv_mul = n_heads / n_kv_heads;
        let q = pseudo_random(n_heads * hd, 4);
        let k = pseudo_random(len * n_kv_heads * hd, 5);
        let v = pseudo_random(len * n_kv_heads * hd, 6);
        // [len, n_kv_heads, hd] -> [len, n_heads, hd]: KV head j becomes heads j*kv_mul..(j+1)*kv_mul
        let repeat = |x: &[f32]| -> Vec<f32> {
            x.chunks_exact(hd)
                .flat_map(|head| std::iter::repeat_n(head, kv_mul))
                .flatten()
                .copied()
                .collect()
        };
        let (k_rep, v_rep) = (repeat(&k), repeat(&v));
        assert_eq!(k_rep.len(), kv_mul * k.len());
        let gqa = gqa_attention(&q, &k, &v, n_heads, n_kv_heads, hd);
        let mha = gqa_attention(&q, &k_rep, &v_rep, n_heads, n_heads, hd);
        assert!(gqa.iter().any(|&x| x != 0.0));
        // Same numbers in the same order: bitwise equal, not just close.
        assert_eq!(gqa, mha);
    }
}
