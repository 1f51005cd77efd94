//! Tests written to catch wrong code, each against the textbook definition rather
//! than against kvlab's own output: the sampler's distributions from seeded draws,
//! attention against an f64 formula (grouped heads, non-zero start position, the
//! diagonal included), and stopping right after EOS.

mod common;

use kvlab::attention::{causal_attention, Heads};
use kvlab::backend::generate;
use kvlab::generate::{GenerateOptions, PathKind, StopReason};
use kvlab::rng::Rng;
use kvlab::sampler::{Sampler, SamplerConfig};
use kvlab::{Error, Model};

// ---------------------------------------------------------------- sampler

const DRAWS: usize = 40_000;

/// Frequencies of each token over `DRAWS` seeded draws.
fn frequencies(logits: &[f32], temperature: f32, top_k: usize, top_p: f32) -> Vec<f64> {
    let mut sampler = Sampler::new(SamplerConfig {
        temperature,
        top_k,
        top_p,
        seed: 12345,
    });
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..DRAWS {
        counts[sampler.sample(logits).unwrap() as usize] += 1;
    }
    counts.iter().map(|&c| c as f64 / DRAWS as f64).collect()
}

/// The definition: p_i ∝ exp(l_i / T) over the kept set, 0 elsewhere.
fn softmax_over(logits: &[f32], temperature: f64, kept: &[usize]) -> Vec<f64> {
    let weights: Vec<f64> = (0..logits.len())
        .map(|i| {
            if kept.contains(&i) {
                (logits[i] as f64 / temperature).exp()
            } else {
                0.0
            }
        })
        .collect();
    let total: f64 = weights.iter().sum();
    weights.iter().map(|w| w / total).collect()
}

/// Every frequency within 0.015 of its probability (the standard error of a
/// frequency over 40,000 draws is at most 0.0025: this is 6 of them).
fn assert_close(got: &[f64], want: &[f64], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() < 0.015,
            "{what}: token {i} drawn {g:.4} of the time, the definition says {w:.4}\n got {got:.4?}\nwant {want:.4?}"
        );
    }
}

const LOGITS: [f32; 5] = [1.0, 2.5, -0.5, 2.0, 0.0];

#[test]
fn temperature_divides_the_logits() {
    for t in [0.5f32, 1.0, 2.0] {
        let got = frequencies(&LOGITS, t, 0, 1.0);
        let want = softmax_over(&LOGITS, t as f64, &[0, 1, 2, 3, 4]);
        assert_close(&got, &want, &format!("T = {t}"));
    }
}

#[test]
fn top_k_keeps_the_k_most_likely() {
    let got = frequencies(&LOGITS, 1.0, 2, 1.0);
    // Tokens 1 (2.5) and 3 (2.0), renormalised.
    assert_close(&got, &softmax_over(&LOGITS, 1.0, &[1, 3]), "top-k 2");
}

#[test]
fn top_p_keeps_the_token_that_crosses_p() {
    // Probabilities 0.5, 0.3, 0.15, 0.05 at T = 1.
    let logits: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
    // 0.5 < 0.7 <= 0.5 + 0.3: the nucleus is tokens 0 and 1 (token 1 crosses p).
    let got = frequencies(&logits, 1.0, 0, 0.7);
    assert_close(&got, &softmax_over(&logits, 1.0, &[0, 1]), "top-p 0.7");
    // 0.8 < 0.9 <= 0.95: three tokens.
    let got = frequencies(&logits, 1.0, 0, 0.9);
    assert_close(&got, &softmax_over(&logits, 1.0, &[0, 1, 2]), "top-p 0.9");
}

#[test]
fn greedy_and_tiny_temperatures_pick_the_argmax() {
    for t in [0.0f32, 1e-38, 1e-30, f32::MIN_POSITIVE, 1e-45] {
        let mut sampler = Sampler::new(SamplerConfig {
            temperature: t,
            seed: 1,
            ..SamplerConfig::default()
        });
        for _ in 0..100 {
            assert_eq!(sampler.sample(&LOGITS).unwrap(), 1, "T = {t}");
        }
    }
    // Huge logits at a small temperature: still no overflow.
    let mut sampler = Sampler::new(SamplerConfig {
        temperature: 1e-3,
        ..SamplerConfig::default()
    });
    assert_eq!(sampler.sample(&[3e38, -3e38, 2e38]).unwrap(), 0);
}

#[test]
fn non_finite_logits_are_an_error_not_a_token() {
    for t in [0.0f32, 1.0] {
        let mut sampler = Sampler::new(SamplerConfig {
            temperature: t,
            ..SamplerConfig::default()
        });
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let err = sampler.sample(&[1.0, bad, 0.0]).unwrap_err();
            assert!(matches!(err, Error::NonFinite(_)), "{err}");
            assert!(err.to_string().contains("token 1"), "{err}");
        }
    }
}

// ---------------------------------------------------------------- attention

/// Textbook scaled dot-product attention with a causal mask, in f64 (Vaswani et
/// al. 2017): query row `i` sits at position `start_pos + i` and sees keys
/// `0..=start_pos + i`; query head `h` reads KV head `h / (n_heads / n_kv_heads)`.
fn attention_f64(q: &[f32], k: &[f32], v: &[f32], start_pos: usize, heads: Heads) -> Vec<f64> {
    let Heads {
        n_heads,
        n_kv_heads,
        head_dim: d,
    } = heads;
    let group = n_heads / n_kv_heads;
    let kv_dim = n_kv_heads * d;
    let n = q.len() / (n_heads * d);
    let mut out = vec![0.0f64; q.len()];
    for i in 0..n {
        let pos = start_pos + i;
        for h in 0..n_heads {
            let qh = &q[(i * n_heads + h) * d..][..d];
            let kvh = h / group;
            let scores: Vec<f64> = (0..=pos)
                .map(|j| {
                    let kj = &k[j * kv_dim + kvh * d..][..d];
                    let dot: f64 = qh.iter().zip(kj).map(|(a, b)| *a as f64 * *b as f64).sum();
                    dot / (d as f64).sqrt()
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = exps.iter().sum();
            for (j, e) in exps.iter().enumerate() {
                let vj = &v[j * kv_dim + kvh * d..][..d];
                for c in 0..d {
                    out[(i * n_heads + h) * d + c] += e / total * vj[c] as f64;
                }
            }
        }
    }
    out
}

#[test]
fn attention_matches_the_f64_formula() {
    let mut rng = Rng::new(5);
    for (n_heads, n_kv_heads, head_dim, start_pos, n) in [
        (4, 2, 8, 3, 2),  // GQA, a chunk after a warm cache
        (6, 2, 16, 0, 5), // GQA prefill
        (4, 1, 8, 7, 1),  // MQA decode step
        (2, 2, 4, 5, 3),  // MHA
    ] {
        let heads = Heads {
            n_heads,
            n_kv_heads,
            head_dim,
        };
        let end = start_pos + n;
        // Scaled up so the softmax is far from uniform (a wrong scale or mask shows).
        let mut fill = |len: usize| -> Vec<f32> { (0..len).map(|_| rng.symmetric(3.0)).collect() };
        let q = fill(n * n_heads * head_dim);
        let k = fill(end * n_kv_heads * head_dim);
        let v = fill(end * n_kv_heads * head_dim);
        let got = causal_attention(&q, &k, &v, start_pos, heads);
        let want = attention_f64(&q, &k, &v, start_pos, heads);
        for (idx, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (*g as f64 - w).abs() < 1e-4,
                "heads {n_heads}/{n_kv_heads} d {head_dim} start {start_pos} n {n}: out[{idx}] = {g}, formula {w}"
            );
        }
    }
}

// ---------------------------------------------------------------- EOS

#[test]
fn generation_stops_right_after_eos() {
    // Untied: with a tied head a random model mostly repeats its last token.
    let config = kvlab::Config {
        tie_word_embeddings: false,
        ..common::tiny_config(2, 4, 2, 8, 64)
    };
    let model = Model::random(config, 21).unwrap();
    let prompt = [3u32, 9, 27];
    for path in [PathKind::Cached, PathKind::Naive] {
        let opts = |eos_ids: Vec<u32>| GenerateOptions {
            max_new_tokens: 12,
            path,
            // Sampled (seeded), so the tokens vary; the same seed replays the same draws.
            sampler: SamplerConfig {
                temperature: 1.0,
                seed: 7,
                ..SamplerConfig::default()
            },
            eos_ids,
        };
        let free = generate(&model, &prompt, &opts(vec![]), |_| {}).unwrap();
        assert_eq!(free.stop_reason, StopReason::MaxNewTokens);
        let ids = &free.generated_ids;
        // The first position after 2 whose token has not appeared before: make it the EOS.
        let at = (3..ids.len())
            .find(|&i| !ids[..i].contains(&ids[i]))
            .expect("12 sampled tokens hold a new one after the third: else change the seed");
        let mut streamed = Vec::new();
        let stopped =
            generate(&model, &prompt, &opts(vec![ids[at]]), |t| streamed.push(t)).unwrap();
        assert_eq!(stopped.stop_reason, StopReason::Eos, "{path:?}");
        assert_eq!(
            stopped.generated_ids,
            ids[..=at],
            "{path:?}: EOS is the last token"
        );
        assert_eq!(streamed, ids[..=at], "{path:?}: nothing streamed after EOS");
    }
}
