//! Prefill/decode disaggregation (src/engine/transfer.rs) against one colocated engine:
//! a request prefilled in engine A, its KV rows serialized, parsed and imported into
//! engine B, decodes to the same tokens from the same logits, bit for bit, whatever the
//! pools store (f32, int8 or int4 codes travel as stored). Then the transfer's wire format
//! refuses malformed bytes, and a pool of another element, with one clear line.

mod common;

use common::{bits, real_model_present, tiny_config, MODEL_DIR};
use kvlab::cache::paged::BlockPool;
use kvlab::cache::{KvElement, KvPolicy};
use kvlab::engine::{
    Engine, EngineConfig, Event, KvTransfer, Policy, Request, Role, SamplingParams,
};
use kvlab::Model;
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;

/// Tokens and the logits each was sampled from, per request id.
type Outcomes = HashMap<u64, (Vec<u32>, Vec<Vec<f32>>)>;

/// Positions each engine's pool holds: more than any test here keeps at once (at most 5
/// requests of 29 + 9 positions), so no test preempts. The default pool is sized for serving
/// SmolLM2 (755 MB), and every `Engine::new` writes its whole pool: with it, this file's
/// tests on tiny models spent 119 s of system time in page faults (2-core VM, 2026-12-07).
const POOL_POSITIONS: usize = 1024;

fn config(model: &Model, budget: usize, bs: usize) -> EngineConfig {
    config_kv(model, budget, bs, KvPolicy::Full)
}

fn config_kv(model: &Model, budget: usize, bs: usize, kv: KvPolicy) -> EngineConfig {
    let element = KvElement::for_pool(&model.config, kv, "paged").unwrap();
    EngineConfig {
        policy: Policy::ContinuousChunked,
        max_batch_tokens: budget,
        block_size: bs,
        kv_budget_bytes: POOL_POSITIONS.div_ceil(bs)
            * BlockPool::block_bytes(&model.config, element, bs),
        kv,
        capture_logits: true,
        ..EngineConfig::default()
    }
}

/// The pool elements a transfer carries: f32, int8, int4 per token.
const ELEMENTS: [KvPolicy; 3] = [
    KvPolicy::Full,
    KvPolicy::Int8,
    KvPolicy::Int4PerToken { group: 4 },
];

/// Steps `engine` until idle; collects tokens, logits and (prefill role) transfers.
fn drain(engine: &mut Engine, out: &mut Outcomes) -> Vec<(u64, KvTransfer)> {
    let mut transfers = Vec::new();
    while engine.has_work() {
        let report = engine.step().unwrap();
        for (id, logits) in report.logits {
            out.entry(id).or_default().1.push(logits);
        }
        for (id, event) in report.events {
            match event {
                Event::Token { id: token } => out.entry(id).or_default().0.push(token),
                Event::Failed { message } => panic!("request {id} failed: {message}"),
                Event::Finished { .. } => {}
            }
        }
        transfers.extend(report.transfers);
    }
    transfers
}

/// Colocated vs prefill in A -> bytes -> decode in B, for `requests` on `model`.
/// Both engines' pools store `kv`.
fn check_twin_kv(
    model: Arc<Model>,
    requests: Vec<Request>,
    budget: usize,
    bs: usize,
    kv: KvPolicy,
) {
    let config = |budget, bs| config_kv(&model, budget, bs, kv);
    let mut colocated = Engine::new(model.clone(), config(budget, bs)).unwrap();
    for r in &requests {
        colocated.add(r.clone()).unwrap();
    }
    let mut expected = Outcomes::new();
    drain(&mut colocated, &mut expected);

    let mut prefill = Engine::new(model.clone(), config(budget, bs)).unwrap();
    prefill.set_role(Role::PrefillOnly);
    let mut decode = Engine::new(model.clone(), config(budget, bs)).unwrap();
    decode.set_role(Role::DecodeOnly);
    for r in &requests {
        prefill.add(r.clone()).unwrap();
    }
    let mut got = Outcomes::new();
    let transfers = drain(&mut prefill, &mut got);
    assert_eq!(
        prefill.cache().stats().used,
        0,
        "the prefill engine kept blocks"
    );
    for (id, t) in transfers {
        let bytes = t.to_bytes();
        let parsed = KvTransfer::from_bytes(&bytes).unwrap();
        assert_eq!(parsed, t);
        decode.import(id, &parsed).unwrap();
    }
    drain(&mut decode, &mut got);
    for (id, (tokens, logits)) in &expected {
        let (got_tokens, got_logits) = &got[id];
        assert_eq!(got_tokens, tokens, "request {id} tokens");
        assert_eq!(bits(got_logits), bits(logits), "request {id} logits");
    }
    assert_eq!(
        decode.cache().stats().used,
        0,
        "the decode engine kept blocks"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Random tiny models, prompts, budgets, block sizes, greedy and seeded sampling.
    /// `window > 0`: a Gemma-shaped model whose local layers (window 1-5, mostly shorter
    /// than the prompt) have given blocks back before the transfer: those positions
    /// travel as zero rows the decoder's mask never reads (`paged/row_io.rs`).
    #[test]
    fn a_shipped_prefill_decodes_to_the_colocated_tokens_and_logits(
        seed in any::<u64>(),
        layers in 1usize..=2,
        budget in 1usize..40,
        bs in 1usize..9,
        element in 0usize..3,
        window in 0usize..6,
        requests in prop::collection::vec((1usize..30, 2usize..10, any::<bool>(), any::<u64>()), 1..6),
    ) {
        let config = match window {
            0 => tiny_config(layers, 4, 2, 8, 64),
            w => {
                let local: Vec<bool> = (0..=layers).map(|l| l % 2 == 0).collect();
                common::tiny_gemma_config(4, 1, 8, 64, w, &local)
            }
        };
        let model = Arc::new(Model::random(config, seed).unwrap());
        let requests = requests
            .into_iter()
            .map(|(len, max_tokens, sampled, rseed)| {
                let mut r = kvlab::rng::Rng::new(rseed);
                Request {
                    prompt: (0..len).map(|_| (r.next_u64() % 64) as u32).collect(),
                    max_tokens,
                    sampling: SamplingParams {
                        // Hot enough that the draws matter on a random model's logits.
                        temperature: if sampled { 4.0 } else { 0.0 },
                        top_p: 1.0,
                        seed: rseed,
                    },
                    stop_ids: vec![],
                }
            })
            .collect();
        check_twin_kv(model, requests, budget, bs, ELEMENTS[element]);
    }
}

#[test]
fn the_real_model_decodes_a_shipped_prefill_to_the_same_logits() {
    if !real_model_present() {
        return;
    }
    let model = Arc::new(kvlab::loader::load_model(std::path::Path::new(MODEL_DIR)).unwrap());
    let requests: Vec<Request> = (0..3u32)
        .map(|i| {
            greedy(
                (0..20 + 7 * i)
                    .map(|j| 100 + (i * 31 + j * 17) % 5000)
                    .collect(),
                6,
            )
        })
        .collect();
    // f32 rows, and int8 codes with their scales.
    for kv in [KvPolicy::Full, KvPolicy::Int8] {
        check_twin_kv(model.clone(), requests.clone(), 32, 16, kv);
    }
}

fn one_transfer() -> (Arc<Model>, KvTransfer) {
    let model = Arc::new(Model::random(tiny_config(2, 4, 2, 8, 64), 5).unwrap());
    let mut prefill = Engine::new(model.clone(), config(&model, 64, 4)).unwrap();
    prefill.set_role(Role::PrefillOnly);
    prefill.add(greedy((0..9).collect(), 4)).unwrap();
    let mut transfers = drain(&mut prefill, &mut Outcomes::new());
    (model, transfers.pop().unwrap().1)
}

#[test]
fn malformed_transfers_are_one_line_errors() {
    let (model, t) = one_transfer();
    let bytes = t.to_bytes();
    // The header, "full", 9 prompt ids, then 2 layers x 9 positions x kv_dim 16 x (K, V)
    // x 4 bytes of payload.
    assert_eq!(bytes.len(), 48 + 4 + 4 * 9 + 2 * 2 * 9 * 16 * 4);
    for cut in [0, 3, 10, 40, 60, bytes.len() - 1] {
        let e = KvTransfer::from_bytes(&bytes[..cut])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("malformed KV transfer") && !e.contains('\n'),
            "{e}"
        );
    }
    let mut forged = bytes.clone();
    forged[12..16].copy_from_slice(&u32::MAX.to_le_bytes()); // prompt length
    assert!(KvTransfer::from_bytes(&forged).is_err());
    // Zero positions, u32::MAX layers: a 0-byte payload that must not size anything.
    let mut forged = bytes[..48].to_vec();
    forged[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    forged[12..16].copy_from_slice(&0u32.to_le_bytes());
    let e = KvTransfer::from_bytes(&forged).unwrap_err().to_string();
    assert!(e.contains("none may be 0"), "{e}");
    let mut forged = bytes.clone();
    forged[0] = b'X';
    assert!(KvTransfer::from_bytes(&forged)
        .unwrap_err()
        .to_string()
        .contains("KVT2"));
    // Right bytes, wrong model: another layer count / KV width.
    let other = Arc::new(Model::random(tiny_config(3, 4, 2, 8, 64), 5).unwrap());
    let mut decode = Engine::new(other.clone(), config(&other, 64, 4)).unwrap();
    decode.set_role(Role::DecodeOnly);
    let e = decode.import(0, &t).unwrap_err().to_string();
    assert!(e.contains("same model") && !e.contains('\n'), "{e}");
    let mut decode = Engine::new(model.clone(), config(&model, 64, 4)).unwrap();
    decode.set_role(Role::DecodeOnly);
    let mut short = t.clone();
    short.rows[1].pop();
    assert!(decode.import(0, &short).is_err());
    let e = decode
        .add(greedy(t.prompt.clone(), 2))
        .unwrap_err()
        .to_string();
    assert!(e.contains("only decodes"), "{e}");
    decode.import(0, &t).unwrap();
}

#[test]
fn a_quantized_pool_ships_its_codes_and_a_pool_of_another_element_refuses_them() {
    // The same prefill from an f32, an int8 and an int4-per-token pool: the payload is
    // the pool's bytes per position, so int8 ships 16 codes + 4 bytes of scale per head
    // row pair where f32 ships 64 bytes.
    let model = Arc::new(Model::random(tiny_config(2, 4, 2, 8, 64), 5).unwrap());
    let mut payloads = Vec::new();
    for kv in ELEMENTS {
        let mut prefill = Engine::new(model.clone(), config_kv(&model, 64, 4, kv)).unwrap();
        prefill.set_role(Role::PrefillOnly);
        prefill.add(greedy((0..9).collect(), 4)).unwrap();
        let (_, t) = drain(&mut prefill, &mut Outcomes::new()).pop().unwrap();
        assert_eq!(t.row_bytes, prefill.cache().row_bytes());
        payloads.push((kv, t.row_bytes, t));
    }
    let rows: Vec<usize> = payloads.iter().map(|(_, b, _)| *b).collect();
    // kv_dim 16 (2 KV heads of 8): f32 K+V 128 bytes; int8 2 x (16 codes + 2 scales x 4);
    // int4 per token in groups of 4: 2 x (8 bytes of codes + 4 groups x (scale, min) x 4).
    assert_eq!(rows, vec![128, 48, 80]);
    // An int8 transfer into an f32 pool (and the reverse): refused in one line.
    for (i, j) in [(1, 0), (0, 1), (2, 1)] {
        let (_, _, t) = &payloads[i];
        let mut decode =
            Engine::new(model.clone(), config_kv(&model, 64, 4, payloads[j].0)).unwrap();
        decode.set_role(Role::DecodeOnly);
        let e = decode.import(0, t).unwrap_err().to_string();
        assert!(
            e.contains("same model and --kv") && !e.contains('\n'),
            "{e}"
        );
        assert_eq!(
            decode.cache().stats().used,
            0,
            "a refused import took blocks"
        );
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any bytes: a transfer with random bytes overwritten (header, name, ids, rows) and
    /// cut anywhere parses or is refused, and one that parses is imported or refused,
    /// never a panic or a huge allocation.
    #[test]
    fn a_damaged_transfer_is_refused_or_decoded_never_a_panic(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
        int8 in any::<bool>(),
    ) {
        let kv = if int8 { KvPolicy::Int8 } else { KvPolicy::Full };
        let model = Arc::new(Model::random(tiny_config(2, 4, 2, 8, 64), 5).unwrap());
        let mut prefill = Engine::new(model.clone(), config_kv(&model, 64, 4, kv)).unwrap();
        prefill.set_role(Role::PrefillOnly);
        prefill.add(greedy((0..9).collect(), 4)).unwrap();
        let (_, t) = drain(&mut prefill, &mut Outcomes::new()).pop().unwrap();
        let mut bytes = t.to_bytes();
        for (at, byte) in flips {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        let end = bytes.len() - cut.index(bytes.len() / 4 + 1);
        if let Ok(parsed) = KvTransfer::from_bytes(&bytes[..end]) {
            let mut decode = Engine::new(model.clone(), config_kv(&model, 64, 4, kv)).unwrap();
            decode.set_role(Role::DecodeOnly);
            if decode.import(0, &parsed).is_ok() {
                let mut out = Outcomes::new();
                drain(&mut decode, &mut out);
            }
        }
    }
}
