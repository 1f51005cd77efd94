//! The serving engine (src/engine/) against solo runs: every request's tokens and the
//! logits they were sampled from equal what `generate` gives it alone, bit for bit,
//! whatever the policy, the token budget, the arrival times, the pool size (preemption)
//! and the other requests. Then the scheduler's promises one by one: the budget, no
//! starvation, preemption, cancellation, the bounded queue, requests that can never fit.
//! Every weight format the engine serves (`--dtype`, `--layout`) gives a request the bits
//! `generate` gives it with the same weights.

mod common;

use common::{bits, real_model_present, step_logits_on, tiny_config, MODEL_DIR};
use kvlab::backend::{cpu_decoder, CacheLayout};
use kvlab::batch::{batch_model, BatchModel};
use kvlab::cache::paged::{blocks_for_sequence, BlockPool};
use kvlab::cache::{new_policy_store, KvElement, KvPolicy, RowCodes};
use kvlab::device::{WeightDtype, WeightLayout};
use kvlab::engine::{
    Engine, EngineConfig, EngineHandle, Event, FinishReason, Policy, Request, SamplingParams,
    Speculation, StepReport, SubmitError,
};
use kvlab::generate::generate_with;
use kvlab::generate::{GenerateOptions, PathKind};
use kvlab::simd::WeightElem;
use kvlab::{Config, Model};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::collections::HashMap;
use std::sync::Arc;

/// What the engine produced for one request.
#[derive(Default, Debug)]
struct Outcome {
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
    finish: Option<FinishReason>,
}

/// `request` alone: its tokens (the stop id, if sampled, removed: the engine does not
/// emit it) and the logits each token was sampled from.
fn solo(model: &Model, request: &Request) -> (Vec<u32>, Vec<Vec<f32>>) {
    solo_with(model, request, KvPolicy::Full)
}

/// [`solo`] on a contiguous cache of `kv` (f32, or int8 / int4 per-token codes): the
/// twin of the engine's paged pool of the same element.
fn solo_with<E: WeightElem>(
    model: &Model<E>,
    request: &Request,
    kv: KvPolicy,
) -> (Vec<u32>, Vec<Vec<f32>>) {
    let opts = GenerateOptions {
        max_new_tokens: request.max_tokens,
        path: PathKind::Cached,
        sampler: request.sampling.sampler_config(),
        eos_ids: request.stop_ids.clone(),
    };
    // `generate` is this decoder with the default (preallocated, full) layout.
    let layout = CacheLayout {
        policy: kv,
        ..CacheLayout::default()
    };
    let (prompt, max) = (request.prompt.len(), request.max_tokens);
    let mut decoder = cpu_decoder(model, PathKind::Cached, layout, prompt, max).unwrap();
    let generated = generate_with(decoder.as_mut(), &request.prompt, &opts, |_| {})
        .unwrap()
        .generated_ids;
    let fed = &generated[..generated.len() - 1];
    let mut cache = new_policy_store(&model.config, kv, prompt + fed.len()).unwrap();
    let logits = step_logits_on(model, &mut cache, &request.prompt, fed);
    let mut tokens = generated.clone();
    if tokens.last().is_some_and(|t| request.stop_ids.contains(t)) {
        tokens.pop();
    }
    (tokens, logits)
}

/// Runs the engine until it is idle, adding `arrivals[i] = (step, request)` at its step.
/// Checks the budget and the pool's invariants after every iteration. The outcomes are
/// keyed by `i`, the index in `arrivals`.
fn run(
    engine: &mut Engine,
    arrivals: Vec<(usize, Request)>,
) -> (HashMap<u64, Outcome>, Vec<StepReport>) {
    let mut outcomes: HashMap<u64, Outcome> = HashMap::new();
    let mut reports = Vec::new();
    let mut pending: Vec<(usize, usize, Request)> = (arrivals.into_iter().enumerate())
        .map(|(i, (step, request))| (step, i, request))
        .collect();
    pending.sort_by_key(|(step, i, _)| (*step, *i));
    let mut pending = pending.into_iter().peekable();
    let mut index_of = HashMap::new(); // engine id -> index in `arrivals`
    for step in 0.. {
        assert!(step < 100_000, "the engine never finished: starvation");
        while let Some((_, i, request)) = pending.next_if(|(s, _, _)| *s <= step) {
            let id = engine.add(request).unwrap();
            index_of.insert(id, i as u64);
            outcomes.insert(i as u64, Outcome::default());
        }
        if !engine.has_work() {
            if pending.peek().is_none() {
                break;
            }
            continue;
        }
        let report = engine.step().unwrap();
        let budget = engine.config().max_batch_tokens;
        let prefills = report.rows.iter().filter(|r| r.rows > 1).count();
        if engine.config().policy == Policy::ContinuousChunked || prefills == 0 {
            assert!(
                report.n_rows() <= budget,
                "{} rows > budget {budget}",
                report.n_rows()
            );
        }
        assert!(report.rows.len() <= engine.config().max_batch_seqs);
        engine.cache().check_invariants().unwrap();
        for (id, logits) in &report.logits {
            outcomes
                .get_mut(&index_of[id])
                .unwrap()
                .logits
                .push(logits.clone());
        }
        for (id, event) in &report.events {
            let o = outcomes.get_mut(&index_of[id]).unwrap();
            match event {
                Event::Token { id } => o.tokens.push(*id),
                Event::Finished { reason, .. } => o.finish = Some(*reason),
                Event::Failed { message } => panic!("request {id} failed: {message}"),
            }
        }
        reports.push(report);
    }
    (outcomes, reports)
}

fn config_strategy() -> impl Strategy<Value = Config> {
    (1usize..=2, 1usize..=2, 1usize..=2, 1usize..=2, 16usize..=64).prop_map(
        |(layers, n_kv_heads, group, half_head, vocab)| {
            tiny_config(layers, n_kv_heads * group, n_kv_heads, 4 * half_head, vocab)
        },
    )
}

fn policy_strategy() -> impl Strategy<Value = Policy> {
    prop::sample::select(Policy::ALL.to_vec())
}

fn engine_config(
    model: &Model,
    policy: Policy,
    budget: usize,
    blocks: usize,
    bs: usize,
    kv: KvPolicy,
) -> EngineConfig {
    let element = KvElement::for_pool(&model.config, kv, "paged").unwrap();
    EngineConfig {
        policy,
        max_batch_tokens: budget,
        max_batch_seqs: 6,
        kv_budget_bytes: blocks * BlockPool::block_bytes(&model.config, element, bs),
        block_size: bs,
        kv,
        max_waiting: 1000,
        prefix_caching: true,
        capture_logits: true,
        speculation: None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random requests arriving at random iterations, any policy, any budget, a pool
    /// from roomy to barely one request (preemptions), blocks of f32, int8 or int4
    /// per-token codes, or f32, int8 or int4 blocks under a window per query (`--kv
    /// [int8+]sliding`, which gives blocks back mid-request): every request's tokens and
    /// logits equal its solo run on a contiguous cache of the same kind (for the f32
    /// window, its ring; for codes under a window, every row kept and masked), bitwise,
    /// and every request finishes.
    #[test]
    fn every_request_gets_its_solo_tokens_and_logits(
        config in config_strategy(),
        seed in any::<u64>(),
        policy in policy_strategy(),
        budget in 1usize..48,
        bs in 1usize..9,
        extra_blocks in 0usize..30,
        requests in prop::collection::vec(
            (0usize..12, 1usize..30, 1usize..12, any::<bool>(), any::<u64>(), any::<bool>()),
            1..8,
        ),
        element in 0usize..7,
        draft_len in 0usize..4,
    ) {
        serves_every_request_its_solo_bits(
            config, seed, policy, budget, bs, extra_blocks, requests, element, draft_len,
        )?;
    }

    /// The same on Gemma-3-shaped models (local layers, several patterns, a window
    /// shorter than most requests): the pool keeps a block table per layer group, the
    /// local groups giving blocks back as their windows slide (`paged/groups.rs`),
    /// under f32, int8 and int4 per-token blocks.
    #[test]
    fn a_model_with_local_layers_gets_its_solo_bits(
        config in gemma_config_strategy(),
        seed in any::<u64>(),
        policy in policy_strategy(),
        budget in 1usize..48,
        bs in 1usize..9,
        extra_blocks in 0usize..30,
        requests in prop::collection::vec(
            (0usize..12, 1usize..30, 1usize..12, any::<bool>(), any::<u64>(), any::<bool>()),
            1..8,
        ),
        element in 0usize..3,
        draft_len in 0usize..4,
    ) {
        serves_every_request_its_solo_bits(
            config, seed, policy, budget, bs, extra_blocks, requests, element, draft_len,
        )?;
    }
}

/// Random Gemma shapes: 2-4 layers, each local or global, a window of 2-6 positions.
fn gemma_config_strategy() -> impl Strategy<Value = Config> {
    (
        prop::collection::vec(any::<bool>(), 2..=4),
        1usize..=2,
        1usize..=2,
        16usize..=64,
        2usize..=6,
    )
        .prop_map(|(local, group, half_head, vocab, window)| {
            common::tiny_gemma_config(group, 1, 4 * half_head, vocab, window, &local)
        })
}

/// The body of the two property tests above: random arrivals, `kv` the `element`-th of
/// the policies below, and every request's tokens and logits == its solo run.
#[allow(clippy::too_many_arguments)]
fn serves_every_request_its_solo_bits(
    config: Config,
    seed: u64,
    policy: Policy,
    budget: usize,
    bs: usize,
    extra_blocks: usize,
    requests: Vec<(usize, usize, usize, bool, u64, bool)>,
    element: usize,
    draft_len: usize,
) -> Result<(), TestCaseError> {
    // head_dim is a multiple of 4 here: an int4 group of 4 channels tiles every head.
    let kv = [
        KvPolicy::Full,
        KvPolicy::Int8,
        KvPolicy::Int4PerToken { group: 4 },
        KvPolicy::Sliding {
            window: 6,
            sinks: 2,
            codes: RowCodes::F32,
        },
        KvPolicy::Sliding {
            window: 3,
            sinks: 0,
            codes: RowCodes::F32,
        },
        KvPolicy::Sliding {
            window: 5,
            sinks: 1,
            codes: RowCodes::Int8,
        },
        KvPolicy::Sliding {
            window: 4,
            sinks: 0,
            codes: RowCodes::Int4PerToken { group: 4 },
        },
    ][element];
    // Speculation (greedy requests): drafts must not change a token or a bit.
    let speculation = (draft_len > 0).then(|| Speculation::new(2, draft_len).unwrap());
    let model = Arc::new(Model::random(config, seed).unwrap());
    let vocab = model.config.vocab_size as u64;
    let shared: Vec<u32> = (0..16).map(|i| (i * 5 % vocab) as u32).collect();
    let arrivals: Vec<(usize, Request)> = requests
        .iter()
        .map(|&(at, len, max_tokens, sampled, rseed, share)| {
            let mut prompt: Vec<u32> = if share {
                shared[..len.min(16)].to_vec()
            } else {
                vec![]
            };
            let mut r = kvlab::rng::Rng::new(rseed);
            prompt.extend((prompt.len()..len).map(|_| (r.next_u64() % vocab) as u32));
            let request = Request {
                prompt,
                max_tokens,
                sampling: SamplingParams {
                    temperature: if sampled { 0.8 } else { 0.0 },
                    top_p: if sampled { 0.9 } else { 1.0 },
                    seed: rseed,
                },
                stop_ids: vec![(rseed % vocab) as u32],
            };
            (at, request)
        })
        .collect();
    // The largest request must fit alone; `extra_blocks` more make room for others.
    // (A model with local layers fills a run of blocks in each layer group's table.)
    let need = arrivals
        .iter()
        .map(|(_, r)| blocks_for_sequence(&model.config, r.prompt.len() + r.max_tokens - 1, bs))
        .max()
        .unwrap();
    let config = EngineConfig {
        speculation,
        ..engine_config(&model, policy, budget, need + extra_blocks, bs, kv)
    };
    let mut engine = Engine::new(model.clone(), config).unwrap();
    let expected: Vec<(Vec<u32>, Vec<Vec<f32>>)> = arrivals
        .iter()
        .map(|(_, r)| solo_with(&model, r, kv))
        .collect();
    let (outcomes, _) = run(&mut engine, arrivals);
    for (id, (tokens, logits)) in expected.iter().enumerate() {
        let got = &outcomes[&(id as u64)];
        prop_assert!(got.finish.is_some(), "request {} did not finish", id);
        prop_assert_eq!(&got.tokens, tokens, "request {} tokens", id);
        prop_assert_eq!(
            bits(&got.logits),
            bits(&logits[..got.logits.len()]),
            "request {} logits",
            id
        );
        prop_assert_eq!(
            got.logits.len(),
            tokens.len() + (got.finish == Some(FinishReason::Stop)) as usize
        );
    }
    let stats = engine.cache().stats();
    prop_assert_eq!(
        stats.used,
        0,
        "blocks still held after every request finished"
    );
    Ok(())
}

/// The weight formats `kvlab serve --dtype --layout` offers, each with the model that
/// `generate --dtype --layout` would run: int8 blocks have one layout of their own.
const FORMATS: [(WeightDtype, WeightLayout); 7] = [
    (WeightDtype::F32, WeightLayout::Rows),
    (WeightDtype::F32, WeightLayout::Panels),
    (WeightDtype::Bf16, WeightLayout::Rows),
    (WeightDtype::Bf16, WeightLayout::Panels),
    (WeightDtype::Int8, WeightLayout::Panels),
    (WeightDtype::W8a8, WeightLayout::Panels),
    (WeightDtype::Bf16a, WeightLayout::Panels),
];

/// `model`'s twin in `format`, as `generate` converts it, and the engine's weights made
/// by `batch_model` from the same `model`: requests served on the second must have the
/// first's bits. Runs `check` on the pair.
fn in_format<T>(
    model: &Arc<Model>,
    (dtype, layout): (WeightDtype, WeightLayout),
    check: impl FnOnce(
        &dyn Fn(&Request, KvPolicy) -> (Vec<u32>, Vec<Vec<f32>>),
        Arc<dyn BatchModel>,
    ) -> T,
) -> T {
    let served = batch_model(model.clone(), dtype, layout).unwrap();
    let expected_name = match (dtype, layout) {
        (WeightDtype::Int8, _) => "int8 blocks".to_string(),
        (WeightDtype::W8a8, _) => "w8a8 blocks".to_string(),
        (WeightDtype::Bf16a, _) => "bf16a blocks".to_string(),
        (d, l) => format!("{} in {}", d.name(), l.name()),
    };
    assert_eq!(served.weights(), expected_name);
    match (dtype, layout) {
        (WeightDtype::F32, WeightLayout::Rows) => {
            check(&|r, kv| solo_with(model.as_ref(), r, kv), served)
        }
        (WeightDtype::F32, WeightLayout::Panels) => {
            let twin = model.to_panels().unwrap();
            check(&|r, kv| solo_with(&twin, r, kv), served)
        }
        (WeightDtype::Bf16, WeightLayout::Rows) => {
            let twin = model.to_bf16();
            check(&|r, kv| solo_with(&twin, r, kv), served)
        }
        (WeightDtype::Bf16, WeightLayout::Panels) => {
            let twin = model.to_bf16().to_panels().unwrap();
            check(&|r, kv| solo_with(&twin, r, kv), served)
        }
        (WeightDtype::Int8, _) => {
            let twin = model.to_int8().unwrap();
            check(&|r, kv| solo_with(&twin, r, kv), served)
        }
        (WeightDtype::W8a8, _) => {
            let twin = model.to_w8a8().unwrap();
            check(&|r, kv| solo_with(&twin, r, kv), served)
        }
        (WeightDtype::Bf16a, _) => {
            let twin = model.to_bf16a().unwrap();
            check(&|r, kv| solo_with(&twin, r, kv), served)
        }
    }
}

/// Tiny models whose every matrix has a panel form and int8 blocks: dimensions of 32.
fn format_config_strategy() -> impl Strategy<Value = Config> {
    (1usize..=2, 1usize..=2, 1usize..=2, 2usize..=3).prop_map(
        |(layers, n_kv_heads, group, vocab32)| {
            tiny_config(layers, n_kv_heads * group, n_kv_heads, 32, 32 * vocab32)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Every weight format the engine serves: random requests arriving at random
    /// iterations, f32 or int8 blocks, a pool tight enough to preempt. Each request's
    /// tokens and logits are those of the same request generated alone on the same
    /// weights (`generate --dtype D --layout L`), bitwise.
    #[test]
    fn every_weight_format_serves_its_solo_bits(
        config in format_config_strategy(),
        seed in any::<u64>(),
        format in 0usize..FORMATS.len(),
        int8_kv in any::<bool>(),
        budget in 1usize..40,
        bs in 1usize..6,
        extra_blocks in 0usize..12,
        requests in prop::collection::vec((0usize..6, 1usize..24, 1usize..8, any::<u64>()), 1..6),
    ) {
        let kv = if int8_kv { KvPolicy::Int8 } else { KvPolicy::Full };
        let model = Arc::new(Model::random(config, seed).unwrap());
        let vocab = model.config.vocab_size as u64;
        let arrivals: Vec<(usize, Request)> = requests
            .iter()
            .map(|&(at, len, max_tokens, rseed)| {
                let mut r = kvlab::rng::Rng::new(rseed);
                let prompt = (0..len).map(|_| (r.next_u64() % vocab) as u32).collect();
                (at, greedy(prompt, max_tokens))
            })
            .collect();
        let need = (arrivals.iter())
            .map(|(_, r)| (r.prompt.len() + r.max_tokens - 1).div_ceil(bs))
            .max()
            .unwrap();
        let config = engine_config(&model, Policy::ContinuousChunked, budget, need + extra_blocks, bs, kv);
        in_format(&model, FORMATS[format], |solo, served| {
            let expected: Vec<_> = arrivals.iter().map(|(_, r)| solo(r, kv)).collect();
            let mut engine = Engine::new(served, config).unwrap();
            let (outcomes, _) = run(&mut engine, arrivals);
            for (id, (tokens, logits)) in expected.iter().enumerate() {
                let got = &outcomes[&(id as u64)];
                prop_assert_eq!(&got.tokens, tokens, "request {} tokens ({:?})", id, FORMATS[format]);
                prop_assert_eq!(bits(&got.logits), bits(logits), "request {} logits", id);
            }
            prop_assert_eq!(engine.cache().stats().used, 0);
            Ok(())
        })?;
    }
}

fn greedy(prompt: Vec<u32>, max_tokens: usize) -> Request {
    Request {
        prompt,
        max_tokens,
        sampling: SamplingParams::default(),
        stop_ids: vec![],
    }
}

fn tiny_model() -> Arc<Model> {
    Arc::new(Model::random(tiny_config(2, 4, 2, 8, 64), 11).unwrap())
}

/// Speculation that drafts, sometimes right: a random model's greedy text falls into
/// loops, which prompt lookup predicts, and out of them, which it does not. Six
/// requests, drafts of 4, a small pool: the same tokens and logits as alone, many drafts
/// accepted and many rejected, fewer iterations than without drafts, and every block
/// back in the pool (rolled-back drafts included).
#[test]
fn speculation_in_the_engine_keeps_every_token_and_saves_iterations() {
    // Untied: a tied random model's greedy text repeats its last token forever, which
    // every draft predicts (nothing would be rejected).
    let config = Config {
        tie_word_embeddings: false,
        ..tiny_config(2, 4, 2, 16, 64)
    };
    let model = Arc::new(Model::random(config, 5).unwrap());
    let requests: Vec<Request> = (0..6u32)
        .map(|i| greedy((0..16 + i).map(|j| (7 * i + 13 * j * j) % 61).collect(), 40))
        .collect();
    let need: usize = requests.iter().map(|r| r.prompt.len() + 39).sum::<usize>();
    let run_with = |speculation| {
        let config = EngineConfig {
            speculation,
            ..engine_config(
                &model,
                Policy::ContinuousChunked,
                64,
                need.div_ceil(4),
                4,
                KvPolicy::Full,
            )
        };
        let mut engine = Engine::new(model.clone(), config).unwrap();
        let (outcomes, reports) = run(
            &mut engine,
            requests.iter().map(|r| (0, r.clone())).collect(),
        );
        assert_eq!(engine.cache().stats().used, 0, "blocks leaked");
        (outcomes, reports.len(), engine.metrics())
    };
    let (plain, plain_steps, _) = run_with(None);
    let (spec, spec_steps, metrics) = run_with(Some(Speculation::new(3, 4).unwrap()));
    for (id, request) in requests.iter().enumerate() {
        let (tokens, logits) = solo(&model, request);
        let id = id as u64;
        assert_eq!(plain[&id].tokens, tokens, "request {id} without drafts");
        assert_eq!(spec[&id].tokens, tokens, "request {id} with drafts");
        assert_eq!(
            bits(&spec[&id].logits),
            bits(&logits),
            "request {id} logits"
        );
    }
    // Both ways exercised: a wrong acceptance, or a rollback that forgets a rejected
    // draft's row, changes a token or a logit above.
    let rejected = metrics.drafted_tokens - metrics.accepted_tokens;
    assert!(
        metrics.accepted_tokens >= 20 && rejected >= 20,
        "{} of {} drafts accepted: too few of one kind for the check to mean anything",
        metrics.accepted_tokens,
        metrics.drafted_tokens
    );
    assert!(
        spec_steps < plain_steps,
        "{spec_steps} iterations with drafts, {plain_steps} without"
    );
}

/// A 100-token prompt arriving among running decodes, budget 16: every iteration runs
/// at most 16 rows, the decodes run in every iteration (no stall), the prompt in chunks.
#[test]
fn chunked_prefill_respects_the_budget_and_never_stalls_decodes() {
    let model = tiny_model();
    let mut config = engine_config(
        &model,
        Policy::ContinuousChunked,
        16,
        200,
        4,
        KvPolicy::Full,
    );
    config.capture_logits = false;
    let mut engine = Engine::new(model, config).unwrap();
    let decoders: Vec<(usize, Request)> =
        (0..4).map(|i| (0, greedy(vec![i + 1, 2, 3], 40))).collect();
    let long: Vec<u32> = (0..100).map(|i| i % 64).collect();
    let mut arrivals = decoders;
    arrivals.push((3, greedy(long, 5)));
    let (outcomes, reports) = run(&mut engine, arrivals);
    assert!(outcomes.values().all(|o| o.finish.is_some()));
    let chunks: Vec<usize> = reports
        .iter()
        .flat_map(|r| r.rows.iter().filter(|row| row.id == 4 && row.rows > 1)) // id 4: added last
        .map(|row| row.rows)
        .collect();
    assert!(chunks.len() >= 7, "the prompt ran in {chunks:?}");
    for r in reports
        .iter()
        .filter(|r| r.rows.iter().any(|row| row.id == 4 && row.rows > 1))
    {
        assert_eq!(
            r.rows.iter().filter(|row| row.rows == 1).count(),
            4,
            "a decode stalled"
        );
        assert!(r.n_rows() <= 16);
    }
}

/// A pool that holds one long request at a time and three requests that grow: the
/// youngest is preempted (recomputed), and every one still gets its solo tokens.
#[test]
fn preemption_by_recompute_keeps_the_tokens() {
    let model = tiny_model();
    let requests: Vec<Request> = (0..3)
        .map(|i| greedy((0..10).map(|j| (i * 13 + j) % 64).collect(), 30))
        .collect();
    // 39 positions = 10 blocks of 4 for one request; 16 blocks cannot hold three.
    let config = engine_config(&model, Policy::Continuous, 64, 16, 4, KvPolicy::Full);
    let mut engine = Engine::new(model.clone(), config).unwrap();
    let expected: Vec<_> = requests.iter().map(|r| solo(&model, r)).collect();
    let (outcomes, reports) = run(&mut engine, requests.into_iter().map(|r| (0, r)).collect());
    assert!(
        engine.metrics().preemptions > 0,
        "the pool was big enough: no preemption"
    );
    assert!(reports.iter().any(|r| !r.preempted.is_empty()));
    for (id, (tokens, logits)) in expected.iter().enumerate() {
        assert_eq!(&outcomes[&(id as u64)].tokens, tokens);
        assert_eq!(bits(&outcomes[&(id as u64)].logits), bits(logits));
    }
}

#[test]
fn cancellation_returns_every_block() {
    let model = tiny_model();
    let config = engine_config(&model, Policy::ContinuousChunked, 8, 100, 4, KvPolicy::Full);
    let mut engine = Engine::new(model, config).unwrap();
    let ids: Vec<u64> = (0..4)
        .map(|i| {
            engine
                .add(greedy(vec![i, 1, 2, 3, 4, 5, 6, 7, 8, 9], 50))
                .unwrap()
        })
        .collect();
    for _ in 0..5 {
        engine.step().unwrap();
    }
    assert!(engine.cache().stats().used > 0);
    for id in ids {
        engine.cancel(id);
    }
    let report = engine.step().unwrap();
    assert_eq!(report.cancelled.len(), 4);
    assert!(!engine.has_work());
    engine.cache().check_invariants().unwrap();
    assert_eq!(engine.cache().stats().used, 0);
    assert_eq!(engine.metrics().requests_cancelled, 4);
}

#[test]
fn a_full_queue_refuses_and_an_impossible_request_is_invalid() {
    let model = tiny_model();
    let mut config = engine_config(&model, Policy::Continuous, 64, 10, 4, KvPolicy::Full);
    config.max_waiting = 2;
    let mut engine = Engine::new(model, config).unwrap();
    engine.add(greedy(vec![1, 2], 3)).unwrap();
    engine.add(greedy(vec![1, 2], 3)).unwrap();
    assert!(matches!(
        engine.add(greedy(vec![1, 2], 3)),
        Err(SubmitError::QueueFull { .. })
    ));
    // 10 blocks of 4 = 40 positions: 30 + 20 never fit.
    let err = engine.add(greedy(vec![1; 30], 20)).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, SubmitError::Invalid(_)), "{message}");
    assert!(
        message.contains("KV blocks") && !message.contains('\n'),
        "{message}"
    );
    for bad in [greedy(vec![], 3), greedy(vec![99], 3), greedy(vec![1], 0)] {
        assert!(matches!(engine.add(bad), Err(SubmitError::Invalid(_))));
    }
}

/// The threaded handle: concurrent streams, each its solo tokens; a dropped stream
/// is cancelled; shutdown fails later submits.
#[test]
fn the_handle_streams_tokens_and_cancels_on_drop() {
    let model = tiny_model();
    let config = engine_config(
        &model,
        Policy::ContinuousChunked,
        32,
        100,
        4,
        KvPolicy::Full,
    );
    let handle = EngineHandle::spawn(model.clone(), config).unwrap();
    // Before any iteration, the counters already describe the empty pool.
    let at_start = handle.metrics();
    assert!(at_start.kv_blocks_free > 0 && at_start.kv_blocks_used == 0);
    let requests: Vec<Request> = (0..5).map(|i| greedy(vec![i, 7, 9, 11], 12)).collect();
    let mut streams: Vec<_> = requests
        .iter()
        .map(|r| handle.submit(r.clone()).unwrap())
        .collect();
    let dropped = handle.submit(greedy(vec![3; 20], 60)).unwrap();
    drop(dropped);
    for (stream, request) in streams.iter_mut().zip(&requests) {
        let mut tokens = Vec::new();
        let mut finished = None;
        while let Some(event) = stream.blocking_next() {
            match event {
                Event::Token { id } => tokens.push(id),
                Event::Finished {
                    reason,
                    completion_tokens,
                    ..
                } => {
                    assert_eq!(completion_tokens, tokens.len());
                    finished = Some(reason);
                }
                Event::Failed { message } => panic!("{message}"),
            }
        }
        assert_eq!(finished, Some(FinishReason::Length));
        assert_eq!(tokens, solo(&model, request).0);
    }
    drop(streams);
    // The cancellation and the retirements reach the metrics within a few iterations.
    let mut metrics = handle.metrics();
    for _ in 0..1000 {
        if metrics.requests_finished == 5 && metrics.kv_blocks_used == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        metrics = handle.metrics();
    }
    assert_eq!(metrics.requests_finished, 5);
    assert_eq!(metrics.kv_blocks_used, 0);
    assert!(metrics.ttft_seconds.count >= 5);
    handle.shutdown();
    let mut refused = false;
    for _ in 0..1000 {
        if matches!(
            handle.submit(greedy(vec![1], 1)),
            Err(SubmitError::ShutDown)
        ) {
            refused = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(refused, "submit after shutdown was accepted");
}

/// The real model: 8 concurrent greedy requests through the continuous engine, each
/// with the tokens `generate` gives it alone.
#[test]
fn real_model_eight_concurrent_requests_equal_solo_generate() {
    eight_concurrent_requests_equal_solo(KvPolicy::Full, (WeightDtype::F32, WeightLayout::Rows));
}

/// The same with the pool's blocks in int8: each request's tokens and logits are those
/// of `generate --kv int8` alone (a contiguous int8 cache), bit for bit.
#[test]
fn real_model_eight_concurrent_requests_on_int8_blocks_equal_solo_generate() {
    eight_concurrent_requests_equal_solo(KvPolicy::Int8, (WeightDtype::F32, WeightLayout::Rows));
}

/// bf16 weights in panels serving from int8 blocks (`kvlab serve --dtype bf16 --kv
/// int8`): each request has the bits of `generate --dtype bf16 --kv int8` alone.
#[test]
fn real_model_bf16_panels_with_int8_blocks_equal_solo_generate() {
    eight_concurrent_requests_equal_solo(KvPolicy::Int8, (WeightDtype::Bf16, WeightLayout::Panels));
}

/// A window per query with sinks (`kvlab serve --kv sliding --window 8 --sinks 2`): each
/// request's bits are those of `generate --kv sliding` alone (a contiguous ring), while
/// the pool gives back the blocks its window slid past.
#[test]
fn real_model_sliding_window_equals_solo_generate() {
    let kv = KvPolicy::Sliding {
        window: 8,
        sinks: 2,
        codes: RowCodes::F32,
    };
    eight_concurrent_requests_equal_solo(kv, (WeightDtype::F32, WeightLayout::Rows));
}

/// Every axis at once (`kvlab serve --dtype int8 --kv int8+sliding --window 8 --sinks
/// 2`): int8 weights, int8 blocks under a window per query that hands blocks back;
/// each request has the bits of `generate --dtype int8 --kv int8+sliding` alone.
#[test]
fn real_model_int8_weights_with_int8_blocks_under_a_window_equal_solo_generate() {
    let kv = KvPolicy::Sliding {
        window: 8,
        sinks: 2,
        codes: RowCodes::Int8,
    };
    eight_concurrent_requests_equal_solo(kv, (WeightDtype::Int8, WeightLayout::Panels));
}

/// int8 weights (Q8_0 blocks) with an f32 pool: `generate --dtype int8` alone.
#[test]
fn real_model_int8_weights_equal_solo_generate() {
    eight_concurrent_requests_equal_solo(KvPolicy::Full, (WeightDtype::Int8, WeightLayout::Panels));
}

/// int8 weights times int8 activations, with an int8 pool: `generate --dtype w8a8 --kv
/// int8` alone. Quantizing the activations changes the model, never batch invariance.
#[test]
fn real_model_w8a8_with_int8_blocks_equal_solo_generate() {
    eight_concurrent_requests_equal_solo(KvPolicy::Int8, (WeightDtype::W8a8, WeightLayout::Panels));
}

fn eight_concurrent_requests_equal_solo(kv: KvPolicy, format: (WeightDtype, WeightLayout)) {
    if !real_model_present() {
        return;
    }
    let model = Arc::new(kvlab::loader::load_model(std::path::Path::new(MODEL_DIR)).unwrap());
    let prompts: Vec<Vec<u32>> = (0..8u32)
        .map(|i| {
            (0..6 + 3 * i)
                .map(|j| 100 + (i * 31 + j * 17) % 5000)
                .collect()
        })
        .collect();
    let requests: Vec<Request> = prompts.into_iter().map(|p| greedy(p, 12)).collect();
    let config = EngineConfig {
        policy: Policy::ContinuousChunked,
        max_batch_tokens: 32,
        capture_logits: true,
        kv,
        ..EngineConfig::default()
    };
    in_format(&model, format, |solo, served| {
        let expected: Vec<_> = requests.iter().map(|r| solo(r, kv)).collect();
        let mut engine = Engine::new(served, config).unwrap();
        let (outcomes, reports) = run(&mut engine, requests.into_iter().map(|r| (0, r)).collect());
        assert!(reports
            .iter()
            .any(|r| r.rows.iter().filter(|row| row.rows == 1).count() >= 8));
        for (id, (tokens, logits)) in expected.iter().enumerate() {
            assert_eq!(
                &outcomes[&(id as u64)].tokens,
                tokens,
                "request {id} ({format:?})"
            );
            assert_eq!(
                bits(&outcomes[&(id as u64)].logits),
                bits(logits),
                "request {id} ({format:?})"
            );
        }
    });
}
