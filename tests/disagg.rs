//! Prefill/decode disaggregation (src/engine/transfer.rs) against one colocated engine:
//! a request prefilled in engine A, its KV rows serialized, parsed and imported into
//! engine B, decodes to the same tokens from the same logits, bit for bit. Then the
//! transfer's wire format refuses malformed bytes with one clear line.

mod common;

use common::{bits, real_model_present, tiny_config, MODEL_DIR};
use kvlab::engine::{
    Engine, EngineConfig, Event, KvTransfer, Policy, Request, Role, SamplingParams,
};
use kvlab::Model;
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;

/// Tokens and the logits each was sampled from, per request id.
type Outcomes = HashMap<u64, (Vec<u32>, Vec<Vec<f32>>)>;

fn config(budget: usize, bs: usize) -> EngineConfig {
    EngineConfig {
        policy: Policy::ContinuousChunked,
        max_batch_tokens: budget,
        block_size: bs,
        capture_logits: true,
        ..EngineConfig::default()
    }
}

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
fn check_twin(model: Arc<Model>, requests: Vec<Request>, budget: usize, bs: usize) {
    let mut colocated = Engine::new(model.clone(), config(budget, bs)).unwrap();
    for r in &requests {
        colocated.add(r.clone()).unwrap();
    }
    let mut expected = Outcomes::new();
    drain(&mut colocated, &mut expected);

    let mut prefill = Engine::new(model.clone(), config(budget, bs)).unwrap();
    prefill.set_role(Role::PrefillOnly);
    let mut decode = Engine::new(model, config(budget, bs)).unwrap();
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
    #[test]
    fn a_shipped_prefill_decodes_to_the_colocated_tokens_and_logits(
        seed in any::<u64>(),
        layers in 1usize..=2,
        budget in 1usize..40,
        bs in 1usize..9,
        requests in prop::collection::vec((1usize..30, 2usize..10, any::<bool>(), any::<u64>()), 1..6),
    ) {
        let model = Arc::new(Model::random(tiny_config(layers, 4, 2, 8, 64), seed).unwrap());
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
        check_twin(model, requests, budget, bs);
    }
}

#[test]
fn the_real_model_decodes_a_shipped_prefill_to_the_same_logits() {
    if !real_model_present() {
        return;
    }
    let model = Arc::new(kvlab::loader::load_model(std::path::Path::new(MODEL_DIR)).unwrap());
    let requests = (0..3u32)
        .map(|i| {
            greedy(
                (0..20 + 7 * i)
                    .map(|j| 100 + (i * 31 + j * 17) % 5000)
                    .collect(),
                6,
            )
        })
        .collect();
    check_twin(model, requests, 32, 16);
}

fn one_transfer() -> (Arc<Model>, KvTransfer) {
    let model = Arc::new(Model::random(tiny_config(2, 4, 2, 8, 64), 5).unwrap());
    let mut prefill = Engine::new(model.clone(), config(64, 4)).unwrap();
    prefill.set_role(Role::PrefillOnly);
    prefill.add(greedy((0..9).collect(), 4)).unwrap();
    let mut transfers = drain(&mut prefill, &mut Outcomes::new());
    (model, transfers.pop().unwrap().1)
}

#[test]
fn malformed_transfers_are_one_line_errors() {
    let (model, t) = one_transfer();
    let bytes = t.to_bytes();
    // 2 layers x 9 positions x kv_dim 16 x (K, V) x 4 bytes of payload.
    assert_eq!(bytes.len(), 44 + 4 * 9 + 2 * 2 * 9 * 16 * 4);
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
    let mut forged = bytes[..44].to_vec();
    forged[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    forged[12..16].copy_from_slice(&0u32.to_le_bytes());
    let e = KvTransfer::from_bytes(&forged).unwrap_err().to_string();
    assert!(e.contains("none may be 0"), "{e}");
    let mut forged = bytes.clone();
    forged[0] = b'X';
    assert!(KvTransfer::from_bytes(&forged)
        .unwrap_err()
        .to_string()
        .contains("KVT1"));
    // Right bytes, wrong model: another layer count / KV width.
    let other = Arc::new(Model::random(tiny_config(3, 4, 2, 8, 64), 5).unwrap());
    let mut decode = Engine::new(other, config(64, 4)).unwrap();
    decode.set_role(Role::DecodeOnly);
    let e = decode.import(0, &t).unwrap_err().to_string();
    assert!(e.contains("same model") && !e.contains('\n'), "{e}");
    let mut decode = Engine::new(model, config(64, 4)).unwrap();
    decode.set_role(Role::DecodeOnly);
    let mut short = t.clone();
    short.k[1].pop();
    assert!(decode.import(0, &short).is_err());
    let e = decode
        .add(greedy(t.prompt.clone(), 2))
        .unwrap_err()
        .to_string();
    assert!(e.contains("only decodes"), "{e}");
    decode.import(0, &t).unwrap();
}

fn greedy(prompt: Vec<u32>, max_tokens: usize) -> Request {
    Request {
        prompt,
        max_tokens,
        sampling: SamplingParams::default(),
        stop_ids: vec![],
    }
}
