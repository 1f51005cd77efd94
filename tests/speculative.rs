//! Speculative decoding against plain cached decoding.
//!
//! - Greedy: the same tokens, and the target logits behind every emitted token bitwise
//!   those of the plain cached path, for random tiny models, prompts, `k`, drafters
//!   (n-gram, early exit, bf16, another model, an oracle that is always right, one that
//!   is always wrong), EOS and max-token cuts, and every cache layout, including a
//!   sequence forked from another so that its blocks are shared (the parent's K/V must
//!   survive the child's rollbacks).
//! - Sampling: the joint distribution of the first two tokens matches the target's exact
//!   distribution (chi-square, p < 0.001 fails), and the same test rejects two wrong
//!   acceptance rules.
//! - Bad input: clear errors.
//!
//! The measured figures are experiments, not tests: `kvlab spec-sweep` and
//! `kvlab bench-verify`, run by scripts/figures.sh and scripts/book_outputs.py.

mod common;

use common::{bits, cached_step_logits, tiny_config};
use kvlab::backend::generate;
use kvlab::cache::{new_store, CacheKind, KvStore, PagedCache, PagedSeq};
use kvlab::generate::{GenerateOptions, PathKind};
use kvlab::model::KvSource;
use kvlab::rng::Rng;
use kvlab::sampler::SamplerConfig;
use kvlab::speculative::sampling::distribution;
use kvlab::speculative::{
    generate_speculative, AcceptRule, Draft, Drafter, DrafterSpec, LmDrafter, SpecGeneration,
    SpecOptions,
};
use kvlab::{Config, Error, Model};
use proptest::prelude::*;

/// Replays a script: `Right` proposes what plain greedy decoding emits next (always
/// accepted), `Wrong` proposes something else at every position (never accepted).
struct Scripted {
    prompt_len: usize,
    script: Vec<u32>,
    vocab: u32,
    right: bool,
}

impl Drafter for Scripted {
    fn name(&self) -> String {
        if self.right { "oracle" } else { "always-wrong" }.into()
    }
    fn propose(
        &mut self,
        context: &[u32],
        k: usize,
        _: &SamplerConfig,
        _: &mut Rng,
    ) -> kvlab::Result<Draft> {
        let done = context.len() - self.prompt_len;
        // The oracle knows nothing past the script's end (an EOS, or max_new_tokens).
        let known = if self.right {
            self.script.len()
        } else {
            usize::MAX
        };
        let tokens = (done..(done + k).min(known))
            .map(|i| {
                let t = self.script.get(i).copied().unwrap_or(0);
                if self.right {
                    t
                } else {
                    (t + 1) % self.vocab
                }
            })
            .collect();
        Ok(Draft {
            tokens,
            probs: None,
            forwards: 0,
        })
    }
}

fn config_strategy() -> impl Strategy<Value = Config> {
    (1usize..=3, 1usize..=2, 1usize..=2, 1usize..=2, 8usize..=48).prop_map(
        |(layers, n_kv_heads, group, half_head, vocab)| {
            tiny_config(layers, n_kv_heads * group, n_kv_heads, 4 * half_head, vocab)
        },
    )
}

/// Where the target's K/V live in a case.
#[derive(Debug, Clone, Copy)]
enum Layout {
    Store(CacheKind),
    /// A prefix-caching pool where a parent sequence holds `prompt[..shared]` and the
    /// generating sequence is a fork of it: the shared blocks have two holders.
    Forked {
        shared: usize,
    },
}

fn plain_greedy(model: &Model, prompt: &[u32], max_new: usize, eos: &[u32]) -> Vec<u32> {
    let opts = GenerateOptions {
        max_new_tokens: max_new,
        path: PathKind::Cached,
        sampler: SamplerConfig::default(),
        eos_ids: eos.to_vec(),
    };
    generate(model, prompt, &opts, |_| {})
        .unwrap()
        .generated_ids
}

/// Runs one speculative greedy generation; returns the report and the logits per token.
fn run(
    model: &Model,
    cache: &mut dyn KvStore,
    drafter: &mut dyn Drafter,
    prompt: &[u32],
    opts: &SpecOptions,
) -> (SpecGeneration, Vec<Vec<f32>>) {
    let mut logits = Vec::new();
    let g = generate_speculative(model, cache, drafter, prompt, opts, |_, l| {
        logits.push(l.to_vec())
    })
    .unwrap();
    (g, logits)
}

proptest! {
    // 96 cases by default; PROPTEST_CASES=500 for a longer hunt.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(96)
    ))]

    #[test]
    fn greedy_speculative_equals_plain_cached_bit_for_bit(
        (config, prompt, drafter_pick, eos_at, layout_pick, shared) in config_strategy()
            .prop_flat_map(|c| {
                let v = c.vocab_size as u32;
                (Just(c), prop::collection::vec(0..v, 1..24), 0usize..7,
                 prop::option::of(0usize..24), 0usize..5, 0usize..24)
            }),
        max_new in 1usize..24,
        k in 1usize..7,
        n in 1usize..5,
        block_size in 1usize..6,
        seed in any::<u64>(),
    ) {
        let model = Model::random(config, seed).unwrap();
        let vocab = model.config.vocab_size as u32;
        // EOS: a token plain decoding emits (so the cut happens), or none.
        let free_run = plain_greedy(&model, &prompt, max_new, &[]);
        let eos: Vec<u32> = eos_at.map(|i| free_run[i % free_run.len()]).into_iter().collect();
        let want_ids = plain_greedy(&model, &prompt, max_new, &eos);
        let want = bits(&cached_step_logits(&model, &prompt, &want_ids[..want_ids.len() - 1]));

        let other = Model::random(model.config.clone(), seed ^ 1).unwrap();
        let layers = model.layers.len();
        let mut drafter: Box<dyn Drafter + '_> = match drafter_pick {
            0 => DrafterSpec::Ngram { n }.build(&model).unwrap(),
            1 if layers >= 2 => DrafterSpec::EarlyExit { layers: 1 + n % (layers - 1) }
                .build(&model).unwrap(),
            2 => DrafterSpec::Bf16.build(&model).unwrap(),
            3 => Box::new(LmDrafter::whole(&other, "other").unwrap()),
            4 => Box::new(Scripted { prompt_len: prompt.len(), script: want_ids.clone(), vocab, right: false }),
            _ => Box::new(Scripted { prompt_len: prompt.len(), script: want_ids.clone(), vocab, right: true }),
        };
        let opts = SpecOptions { eos_ids: eos.clone(), ..SpecOptions::greedy(max_new, k) };
        let capacity = prompt.len() + max_new;
        let layout = match layout_pick {
            4 if prompt.len() >= 2 => Layout::Forked { shared: shared % prompt.len() },
            i => Layout::Store(CacheKind::ALL[i % 4]),
        };

        let (g, logits) = match layout {
            Layout::Store(CacheKind::Paged | CacheKind::Prefix) => {
                let prefix = matches!(layout, Layout::Store(CacheKind::Prefix));
                let mut seq = PagedSeq::single(&model.config, block_size,
                    capacity.div_ceil(block_size), prefix).unwrap();
                let out = run(&model, &mut seq, drafter.as_mut(), &prompt, &opts);
                // Rollback gave back every block only rejected drafts used.
                prop_assert_eq!(seq.cache().check_invariants(), Ok(()));
                prop_assert_eq!(seq.cache().block_table(seq.id()).unwrap().len(),
                    seq.len().div_ceil(block_size));
                out
            }
            Layout::Store(kind) => {
                let mut cache = new_store(&model.config, kind, capacity, block_size).unwrap();
                run(&model, cache.as_mut(), drafter.as_mut(), &prompt, &opts)
            }
            Layout::Forked { shared } => {
                let blocks = 2 * capacity.div_ceil(block_size) + 2;
                let mut pool = PagedCache::new(&model.config, block_size, blocks, true).unwrap();
                let parent = pool.add_sequence();
                if shared > 0 {
                    model.forward(&prompt[..shared], KvSource::Cache(&mut pool.seq(parent).unwrap())).unwrap();
                }
                let child = pool.fork(parent).unwrap();
                let out = run(&model, &mut pool.seq(child).unwrap(), drafter.as_mut(), &prompt, &opts);
                prop_assert_eq!(pool.check_invariants(), Ok(()));
                // The parent's shared blocks are intact: its continuation is a fresh run's.
                let parent_logits = model
                    .forward(&prompt[shared..], KvSource::Cache(&mut pool.seq(parent).unwrap()))
                    .unwrap();
                prop_assert_eq!(bits(&[parent_logits]), bits(&cached_step_logits(&model, &prompt, &[])));
                out
            }
        };
        prop_assert_eq!(&g.generated_ids, &want_ids, "drafter {}", g.drafter);
        prop_assert_eq!(bits(&logits), want, "drafter {}", g.drafter);
        prop_assert!(g.target_forwards <= want_ids.len());
        prop_assert!(g.draft_accepted <= g.draft_proposed);
        match drafter_pick {
            4 => {
                prop_assert_eq!(g.draft_accepted, 0);
                prop_assert_eq!(g.target_forwards, want_ids.len());
            }
            5 | 6 => prop_assert_eq!(g.draft_accepted, g.draft_proposed),
            _ => {}
        }
    }
}

/// The cache ends holding exactly what plain decoding's holds (every token but the
/// last), even when an EOS or max_new_tokens cut a round short.
#[test]
fn cache_ends_where_plain_decoding_ends() {
    let model = Model::random(tiny_config(2, 2, 1, 8, 32), 7).unwrap();
    let prompt = [3u32, 5, 7, 3, 5, 7, 3, 5];
    let want = plain_greedy(&model, &prompt, 12, &[]);
    for k in 1..6 {
        for (eos, max_new) in [(vec![], 12), (vec![want[4]], 12), (vec![], 5)] {
            let mut oracle = Scripted {
                prompt_len: prompt.len(),
                script: want.clone(),
                vocab: 32,
                right: true,
            };
            let opts = SpecOptions {
                eos_ids: eos.clone(),
                ..SpecOptions::greedy(max_new, k)
            };
            let mut cache = new_store(&model.config, CacheKind::Paged, 24, 2).unwrap();
            let (g, _) = run(&model, cache.as_mut(), &mut oracle, &prompt, &opts);
            assert_eq!(
                g.generated_ids,
                plain_greedy(&model, &prompt, max_new, &eos)
            );
            assert_eq!(cache.len(), prompt.len() + g.generated_ids.len() - 1);
            // Blocks of 2 positions: the ones rejected drafts took were given back.
            let block_bytes = 2 * kvlab::cache::bytes_per_token(&model.config);
            assert_eq!(
                cache.bytes_reserved(),
                cache.len().div_ceil(2) * block_bytes
            );
        }
    }
}

/// Rollback into a block that filled up (and so was named by the prefix cache) leaves
/// it partial: alone holding it, the sequence forgets its name and writes in place, so
/// a pool of exactly `ceil(capacity / block_size)` blocks suffices (the proptest's saved
/// seed ran out of blocks here); shared with a fork, it keeps its name and the next
/// write copies it, leaving the fork's rows intact.
#[test]
fn rollback_into_a_named_block() {
    let model = Model::random(tiny_config(2, 2, 1, 8, 32), 3).unwrap();
    let fresh = |tokens: &[u32]| bits(&[model.forward(tokens, KvSource::ThisPass).unwrap()]);
    // Alone: 9 positions, 3 blocks of 3, nothing spare.
    let mut seq = PagedSeq::single(&model.config, 3, 3, true).unwrap();
    model
        .forward(&[1, 2, 3, 4, 5, 6], KvSource::Cache(&mut seq))
        .unwrap();
    seq.truncate(4); // block 1 held [4, 5, 6] and was named; now it holds [4]
    assert_eq!(seq.cache().check_invariants(), Ok(()));
    let logits = model
        .forward(&[9, 10, 11, 12, 13], KvSource::Cache(&mut seq))
        .unwrap();
    assert_eq!(bits(&[logits]), fresh(&[1, 2, 3, 4, 9, 10, 11, 12, 13]));
    assert_eq!(
        seq.cache().cow_copies,
        0,
        "a block held alone is written in place"
    );
    assert_eq!(seq.cache().check_invariants(), Ok(()));

    // Shared: the child's rollback must not let it write into the parent's block.
    let mut pool = PagedCache::new(&model.config, 3, 8, true).unwrap();
    let parent = pool.add_sequence();
    model
        .forward(
            &[1, 2, 3, 4, 5, 6],
            KvSource::Cache(&mut pool.seq(parent).unwrap()),
        )
        .unwrap();
    let child = pool.fork(parent).unwrap();
    pool.seq(child).unwrap().truncate(4);
    let logits = model
        .forward(&[9], KvSource::Cache(&mut pool.seq(child).unwrap()))
        .unwrap();
    assert_eq!(bits(&[logits]), fresh(&[1, 2, 3, 4, 9]));
    assert_eq!(
        pool.cow_copies, 1,
        "the shared block was copied, not written"
    );
    let logits = model
        .forward(&[7], KvSource::Cache(&mut pool.seq(parent).unwrap()))
        .unwrap();
    assert_eq!(bits(&[logits]), fresh(&[1, 2, 3, 4, 5, 6, 7]));
    assert_eq!(pool.check_invariants(), Ok(()));
}

// ---- speculative sampling: a chi-square test on the first two tokens ----

/// The statistical model: vocabulary 8, so the 2-token prefix has 64 cells.
fn stat_model(seed: u64) -> Model {
    Model::random(tiny_config(2, 2, 1, 8, 8), seed).unwrap()
}

/// The target's exact distribution of the first `len` tokens, indexed by the tokens
/// read as a base-`vocab` number (`t1 * vocab + t2` for two).
fn exact_joint(model: &Model, prompt: &[u32], sampler: &SamplerConfig, len: usize) -> Vec<f64> {
    let p = distribution(&model.forward(prompt, KvSource::ThisPass).unwrap(), sampler);
    if len == 1 {
        return p.iter().map(|&x| x as f64).collect();
    }
    let mut joint = Vec::new();
    for (t, &p_t) in p.iter().enumerate() {
        let seq: Vec<u32> = prompt.iter().copied().chain([t as u32]).collect();
        let rest = if p_t > 0.0 {
            exact_joint(model, &seq, sampler, len - 1)
        } else {
            vec![0.0; model.config.vocab_size.pow(len as u32 - 1)]
        };
        joint.extend(rest.iter().map(|&r| p_t as f64 * r));
    }
    joint
}

/// Pearson's chi-square of `counts` against `expected` probabilities, cells with an
/// expected count under 5 pooled into one; returns (statistic, degrees of freedom).
fn chi_square(counts: &[u64], expected: &[f64]) -> (f64, usize) {
    let n: u64 = counts.iter().sum();
    let (mut stat, mut cells) = (0.0, 0);
    let (mut pooled_obs, mut pooled_exp) = (0.0, 0.0);
    for (&c, &p) in counts.iter().zip(expected) {
        let e = p * n as f64;
        if e < 5.0 {
            pooled_obs += c as f64;
            pooled_exp += e;
        } else {
            stat += (c as f64 - e).powi(2) / e;
            cells += 1;
        }
    }
    if pooled_exp > 0.0 {
        stat += (pooled_obs - pooled_exp).powi(2) / pooled_exp.max(1e-12);
        cells += 1;
    }
    (stat, cells - 1)
}

/// The chi-square quantile for `1 - 0.001` (Wilson & Hilferty 1931: accurate to a few
/// tenths of a percent for df >= 5, plenty for a pass/fail threshold).
fn chi_square_critical_0001(df: usize) -> f64 {
    const Z_0999: f64 = 3.090_232;
    let d = df as f64;
    d * (1.0 - 2.0 / (9.0 * d) + Z_0999 * (2.0 / (9.0 * d)).sqrt()).powi(3)
}

const RUNS: u64 = 20_000;

/// Samples the first `len` tokens `RUNS` times (seeds 0..RUNS) with draft length
/// `len - 1` (so the first round drafts all but one of them and the target's token
/// completes it), and returns the chi-square statistic against the exact target
/// distribution, and the critical value.
fn sampled_chi_square(drafter_kind: &str, rule: AcceptRule, len: usize) -> (f64, f64) {
    let k = len - 1;
    let model = stat_model(11);
    let draft_model = stat_model(12); // another model: q differs from p
                                      // Temperature 2 flattens the random model's peaked distributions: more cells with
                                      // enough expected counts, so more power against wrong rules.
    let sampler = SamplerConfig {
        temperature: 2.0,
        ..SamplerConfig::default()
    };
    // `1 2 x 1 2`: the n-gram drafter finds "1 2" and proposes `x 1 ...`. Pick the `x`
    // the target gives a probability nearest 1/2, so that the n-gram draft is accepted
    // about as often as it is rejected.
    let prompt_with = |x: u32| [1u32, 2, x, 1, 2];
    let p_x = |x: u32| {
        let logits = model.forward(&prompt_with(x), KvSource::ThisPass).unwrap();
        distribution(&logits, &sampler)[x as usize]
    };
    let x = (0..model.config.vocab_size as u32)
        .min_by(|&a, &b| (p_x(a) - 0.5).abs().total_cmp(&(p_x(b) - 0.5).abs()))
        .unwrap();
    let prompt = prompt_with(x);
    let expected = exact_joint(&model, &prompt, &sampler, len);
    let v = model.config.vocab_size;
    // One thread: the model is tiny, and rayon's hand-offs would cost more than the math.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let (counts, proposed, accepted) = pool.install(|| {
        let mut counts = vec![0u64; v.pow(len as u32)];
        let (mut proposed, mut accepted) = (0, 0);
        let mut drafter: Box<dyn Drafter> = match drafter_kind {
            "ngram" => DrafterSpec::Ngram { n: 2 }.build(&model).unwrap(),
            "early-exit" => DrafterSpec::EarlyExit { layers: 1 }.build(&model).unwrap(),
            _ => Box::new(LmDrafter::whole(&draft_model, "other").unwrap()),
        };
        for seed in 0..RUNS {
            let opts = SpecOptions {
                sampler: SamplerConfig { seed, ..sampler },
                accept_rule: rule,
                ..SpecOptions::greedy(len, k)
            };
            let mut cache = new_store(&model.config, CacheKind::Preallocated, 10, 16).unwrap();
            let g = generate_speculative(
                &model,
                cache.as_mut(),
                drafter.as_mut(),
                &prompt,
                &opts,
                |_, _| {},
            )
            .unwrap();
            let cell = g
                .generated_ids
                .iter()
                .fold(0, |acc, &t| acc * v + t as usize);
            counts[cell] += 1;
            proposed += g.draft_proposed;
            accepted += g.draft_accepted;
        }
        (counts, proposed, accepted)
    });

    let (stat, df) = chi_square(&counts, &expected);
    println!(
        "{drafter_kind}, {rule:?}, {len} tokens, k={k}: chi-square {stat:.1}, df {df}, critical {:.1}, acceptance {:.3}",
        chi_square_critical_0001(df),
        accepted as f64 / proposed as f64
    );
    // Both branches (accept, and reject + resample) must be exercised for the test to mean much.
    assert!(
        rule != AcceptRule::Exact || (0 < accepted && accepted < proposed),
        "{drafter_kind}: {accepted} of {proposed} drafts accepted"
    );
    (stat, chi_square_critical_0001(df))
}

#[test]
fn speculative_sampling_matches_the_target_distribution() {
    for drafter in ["other-model", "early-exit", "ngram"] {
        for len in [2, 3] {
            let (stat, critical) = sampled_chi_square(drafter, AcceptRule::Exact, len);
            assert!(
                stat < critical,
                "{drafter}, {len} tokens: chi-square {stat:.1} >= {critical:.1} (p < 0.001): not the target's distribution"
            );
        }
    }
}

/// The same test must *fail* for the two classic mistakes, or it proves nothing.
#[test]
fn the_chi_square_test_rejects_wrong_acceptance_rules() {
    for rule in [AcceptRule::AlwaysAccept, AcceptRule::NoResidual] {
        let (stat, critical) = sampled_chi_square("other-model", rule, 2);
        assert!(
            stat > critical,
            "{rule:?}: chi-square {stat:.1} <= {critical:.1}: the test cannot tell this wrong rule apart"
        );
    }
}

/// `distribution` is what the plain sampler draws from (top-k and top-p included).
#[test]
fn distribution_is_the_samplers() {
    let logits = [0.3f32, 2.0, -1.0, 1.2, 0.0, 1.9, -0.5, 0.8];
    let config = SamplerConfig {
        temperature: 0.8,
        top_k: 5,
        top_p: 0.9,
        seed: 0,
    };
    let p = distribution(&logits, &config);
    let mut counts = [0u64; 8];
    for seed in 0..RUNS {
        let mut s = kvlab::sampler::Sampler::new(SamplerConfig { seed, ..config });
        counts[s.sample(&logits).unwrap() as usize] += 1;
    }
    let expected: Vec<f64> = p.iter().map(|&x| x as f64).collect();
    let (stat, df) = chi_square(&counts, &expected);
    assert!(stat < chi_square_critical_0001(df), "chi-square {stat:.1}");
    for (i, &c) in counts.iter().enumerate() {
        assert_eq!(c == 0, p[i] == 0.0, "token {i}: kept by one, not the other");
    }
}

// ---- bad input ----

fn err_text<T>(r: kvlab::Result<T>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn drafter_specs_parse_and_bad_ones_say_why() {
    assert_eq!(
        "ngram".parse::<DrafterSpec>().unwrap(),
        DrafterSpec::Ngram { n: 3 }
    );
    assert_eq!(
        "ngram:5".parse::<DrafterSpec>().unwrap(),
        DrafterSpec::Ngram { n: 5 }
    );
    assert_eq!(
        "early-exit:8".parse::<DrafterSpec>().unwrap(),
        DrafterSpec::EarlyExit { layers: 8 }
    );
    assert_eq!("bf16".parse::<DrafterSpec>().unwrap(), DrafterSpec::Bf16);
    for (spec, shown) in [
        ("ngram", "ngram:3"),
        ("ngram:4", "ngram:4"),
        ("early-exit:2", "early-exit:2"),
        ("bf16", "bf16"),
    ] {
        assert_eq!(spec.parse::<DrafterSpec>().unwrap().to_string(), shown);
    }
    let msg = err_text("medusa".parse::<DrafterSpec>());
    assert!(
        msg.contains("unknown drafter `medusa`") && msg.contains("ngram:N"),
        "{msg}"
    );
    let msg = err_text("ngram:0".parse::<DrafterSpec>());
    assert!(msg.contains(">= 1"), "{msg}");
    let msg = err_text("early-exit".parse::<DrafterSpec>());
    assert!(msg.contains("needs a number of layers"), "{msg}");
    let msg = err_text("early-exit:two".parse::<DrafterSpec>());
    assert!(msg.contains("`two`"), "{msg}");

    let model = Model::random(tiny_config(2, 2, 1, 8, 16), 0).unwrap();
    for layers in [2, 30] {
        let msg = err_text(DrafterSpec::EarlyExit { layers }.build(&model).map(|_| ()));
        assert!(
            msg.contains("between 1 and 1 of the model's 2 layers"),
            "{msg}"
        );
    }
}

#[test]
fn bad_draft_lengths_and_requests_are_clear_errors() {
    let model = Model::random(tiny_config(2, 2, 1, 8, 16), 0).unwrap();
    let mut drafter = DrafterSpec::Ngram { n: 2 }.build(&model).unwrap();
    let prompt = [1u32, 2, 3];
    let mut go = |k: usize, max_new: usize, cache: &mut dyn KvStore| {
        err_text(generate_speculative(
            &model,
            cache,
            drafter.as_mut(),
            &prompt,
            &SpecOptions::greedy(max_new, k),
            |_, _| {},
        ))
    };
    let mut cache = new_store(&model.config, CacheKind::Preallocated, 16, 16).unwrap();
    let msg = go(0, 4, cache.as_mut());
    assert!(msg.contains("draft length must be at least 1"), "{msg}");
    let msg = go(256, 4, cache.as_mut());
    assert!(
        msg.contains("draft length 256 does not fit the model's context of 256"),
        "{msg}"
    );
    let msg = go(4, 300, cache.as_mut());
    assert!(msg.contains("exceeds the model's context"), "{msg}");
    model
        .forward(&prompt, KvSource::Cache(cache.as_mut()))
        .unwrap();
    let msg = go(4, 4, cache.as_mut());
    assert!(msg.contains("already holds 3 positions"), "{msg}");
    assert!(matches!(
        generate_speculative(
            &model,
            cache.as_mut(),
            drafter.as_mut(),
            &[],
            &SpecOptions::greedy(4, 2),
            |_, _| {}
        ),
        Err(Error::EmptyPrompt)
    ));
}

/// The report serialises with the figures the CLI will print.
#[test]
fn the_report_serialises() {
    let model = Model::random(tiny_config(1, 2, 1, 8, 16), 3).unwrap();
    let mut drafter = DrafterSpec::Ngram { n: 2 }.build(&model).unwrap();
    let mut cache = new_store(&model.config, CacheKind::Growable, 0, 16).unwrap();
    let prompt = [1u32, 2, 1, 2, 1, 2];
    let g = generate_speculative(
        &model,
        cache.as_mut(),
        drafter.as_mut(),
        &prompt,
        &SpecOptions::greedy(8, 4),
        |_, _| {},
    )
    .unwrap();
    let json = serde_json::to_value(&g).unwrap();
    for key in [
        "acceptance_rate",
        "mean_accepted_len",
        "target_forwards",
        "tokens_per_forward",
        "ttft_ms",
        "stop_reason",
        "drafter",
    ] {
        assert!(json.get(key).is_some(), "no {key} in {json}");
    }
    assert_eq!(json["drafter"], "ngram:2");
    assert_eq!(g.generated_ids.len(), 8);
    assert!((g.tokens_per_forward - 8.0 / g.target_forwards as f64).abs() < 1e-12);
}

/// A verify pass runs 2-11 rows through `matmul` at once: each row must be the bits of
/// the same row computed alone (a decode step).
#[test]
fn matmul_few_rows_equal_single_rows() {
    let (d_in, d_out) = (70, 2100); // several column strips, one of them ragged
    let w: Vec<f32> = (0..d_in * d_out)
        .map(|i| ((i as f32) * 0.1213).cos())
        .collect();
    for n in 2..13 {
        let x: Vec<f32> = (0..n * d_in).map(|i| ((i as f32) * 0.7311).sin()).collect();
        let mut batch = vec![0.0; n * d_out];
        kvlab::ops::matmul(&x, &w, &mut batch, d_in, d_out);
        for r in 0..n {
            let mut single = vec![0.0; d_out];
            kvlab::ops::matmul(&x[r * d_in..(r + 1) * d_in], &w, &mut single, d_in, d_out);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&single),
                bits(&batch[r * d_out..(r + 1) * d_out]),
                "n={n} row {r}"
            );
        }
    }
}

/// A tiny temperature is the greedy limit, not NaN: `distribution` shifts by the max
/// before dividing by T, as the sampler does (`l / T` alone overflows to inf at 1e-38).
#[test]
fn distribution_at_a_tiny_temperature_is_the_greedy_one_hot() {
    let logits = [0.3f32, 30.0, -1.0, 29.5];
    for temperature in [1e-30f32, 1e-38] {
        let config = SamplerConfig {
            temperature,
            ..SamplerConfig::default()
        };
        let p = distribution(&logits, &config);
        assert_eq!(p, [0.0, 1.0, 0.0, 0.0], "T = {temperature}");
    }
}
