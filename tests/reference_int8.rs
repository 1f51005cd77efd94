//! int8 weights on the real model (SmolLM2-135M-Instruct): how far do Q8_0 blocks move
//! the logits from f32 (with f32 activations, `--dtype int8`, and with int8 ones,
//! `--dtype w8a8`), which greedy tokens change, and does naive == cached hold? And the
//! same questions for bf16 weights with bf16 activations (`--dtype bf16a`).
//!
//! For each reference prompt (tests/fixtures), teacher-forced on the reference greedy
//! tokens: the f32 and int8 models' logits at every step, their largest absolute
//! difference and whether their top-1 tokens agree; then the int8 model's own greedy
//! tokens against the reference's. Needs the real model (see tests/reference.rs;
//! KVLAB_ALLOW_MISSING_MODEL=1 skips on purpose).

mod common;

use common::{ids, MODEL_DIR};
use kvlab::cache::PreallocatedCache;
use kvlab::model::KvSource;
use kvlab::simd::WeightElem;
use kvlab::{loader, ops, Model};
use serde_json::Value;
use std::path::Path;

fn model() -> Option<Model> {
    common::real_model_present().then(|| loader::load_model(Path::new(MODEL_DIR)).unwrap())
}

fn fixture() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/smollm2-135m-instruct.json"
        ))
        .unwrap(),
    )
    .unwrap()
}

/// Logits after the prompt and after each forced token, on the cached path.
fn forced<E: WeightElem>(m: &Model<E>, prompt: &[u32], forced: &[u32]) -> Vec<Vec<f32>> {
    let mut cache = PreallocatedCache::new(&m.config, prompt.len() + forced.len()).unwrap();
    let mut all = vec![m.forward(prompt, KvSource::Cache(&mut cache)).unwrap()];
    for &t in forced {
        all.push(m.forward(&[t], KvSource::Cache(&mut cache)).unwrap());
    }
    all
}

/// `n` greedy tokens after `prompt`, on the cached path (no stop token: a fixed count).
fn greedy<E: WeightElem>(m: &Model<E>, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut cache = PreallocatedCache::new(&m.config, prompt.len() + n).unwrap();
    let mut logits = m.forward(prompt, KvSource::Cache(&mut cache)).unwrap();
    let mut out = Vec::new();
    while out.len() < n {
        let t = ops::argmax(&logits) as u32;
        out.push(t);
        if out.len() < n {
            logits = m.forward(&[t], KvSource::Cache(&mut cache)).unwrap();
        }
    }
    out
}

#[test]
fn int8_logits_stay_close_to_f32_and_paths_stay_bitwise_equal() {
    let Some(f32_model) = model() else { return };
    let (agree, steps, max_diff) = close_to_f32(&f32_model, &f32_model.to_int8().unwrap(), "int8");
    // Q8_0 moves each weight by at most half a step, 1/254 of its block's largest: the
    // same order as bf16's 2^-9 relative, and held to the same bounds as bf16.
    assert!(
        agree * 10 >= steps * 9,
        "top-1 agreement {agree}/{steps} < 90%"
    );
    assert!(max_diff < 2.0, "max logit difference {max_diff}");
}

/// W8A8 (`--dtype w8a8`): the int8 weights, and every matmul's activations rounded to
/// Q8_0 too: a second rounding of the same relative size (half a step of a 32-value
/// block's largest) at the other input of every product. The two errors add, so the
/// logits are held to twice int8's bound on their largest difference (on this machine
/// int8 moved them by 1.21 at most, W8A8 by 2.02: the int8 bound alone would not hold),
/// and to int8's top-1 agreement; naive == cached stays bitwise.
#[test]
fn w8a8_logits_stay_close_to_f32_and_paths_stay_bitwise_equal() {
    let Some(f32_model) = model() else { return };
    let (agree, steps, max_diff) = close_to_f32(&f32_model, &f32_model.to_w8a8().unwrap(), "w8a8");
    assert!(
        agree * 10 >= steps * 9,
        "top-1 agreement {agree}/{steps} < 90%"
    );
    assert!(max_diff < 2.0 * 2.0, "max logit difference {max_diff}");
}

/// bf16a (`--dtype bf16a`): the bf16 weights, and every matmul's activations rounded to
/// bf16 too (`vdpbf16ps`'s arithmetic): a second rounding of 2^-9 relative at most, at
/// the other input of every product, the size of the weights' own. Both are finer than
/// a Q8_0 step, so bf16a is held to the bounds of bf16 alone (`tests/reference_bf16.rs`),
/// not W8A8's doubled one (on this machine it moved the logits by 0.44 at most).
#[test]
fn bf16a_logits_stay_close_to_f32_and_paths_stay_bitwise_equal() {
    let Some(f32_model) = model() else { return };
    let (agree, steps, max_diff) =
        close_to_f32(&f32_model, &f32_model.to_bf16a().unwrap(), "bf16a");
    assert!(
        agree * 10 >= steps * 9,
        "top-1 agreement {agree}/{steps} < 90%"
    );
    assert!(max_diff < 2.0, "max logit difference {max_diff}");
}

/// `other` (a format of `f32_model`) teacher-forced on every reference case against f32:
/// `(top-1 agreements, steps, max |logit difference|)`, after checking that naive ==
/// cached within `other` and printing how long its own greedy run follows the reference.
fn close_to_f32<E: WeightElem>(
    f32_model: &Model,
    int8_model: &Model<E>,
    name: &str,
) -> (usize, usize, f32) {
    let (mut steps, mut agree, mut max_diff) = (0usize, 0usize, 0.0f32);
    let (mut same_greedy, mut greedy_tokens) = (0usize, 0usize);
    for case in fixture()["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let prompt = ids(&case["prompt_ids"]);
        let reference = ids(&case["greedy_ids"]);
        let forced_tokens = &reference[..reference.len() - 1];
        let a = forced(f32_model, &prompt, forced_tokens);
        let b = forced(int8_model, &prompt, forced_tokens);
        let mut case_agree = 0;
        for (la, lb) in a.iter().zip(&b) {
            steps += 1;
            if ops::argmax(la) == ops::argmax(lb) {
                agree += 1;
                case_agree += 1;
            }
            for (x, y) in la.iter().zip(lb) {
                max_diff = max_diff.max((x - y).abs());
            }
        }
        // Free-running: the int8 model's own greedy tokens against the reference's.
        let own = greedy(int8_model, &prompt, reference.len());
        let first_change = own.iter().zip(&reference).position(|(x, y)| x != y);
        greedy_tokens += reference.len();
        same_greedy += first_change.unwrap_or(reference.len());
        eprintln!(
            "  {name}: top-1 agreement {case_agree}/{}; greedy: {}",
            a.len(),
            match first_change {
                None => format!("all {} tokens as the reference", reference.len()),
                Some(i) => format!("first {i} of {} as the reference", reference.len()),
            }
        );
        // Naive == cached within int8, on the real model: the last step's logits.
        let mut seq = prompt.clone();
        seq.extend_from_slice(forced_tokens);
        let naive = int8_model.forward(&seq, KvSource::ThisPass).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&naive),
            bits(b.last().unwrap()),
            "naive != cached in {name}"
        );
    }
    eprintln!(
        "{name} vs f32: top-1 agreement {agree}/{steps}, max |logit difference| {max_diff:.3}; \
         greedy tokens before the first change: {same_greedy}/{greedy_tokens}"
    );
    (agree, steps, max_diff)
}

/// `kvlab generate --json` on the real model with `--dtype`: (generated ids, text).
fn cli_generate(dtype: &str, prompt: &str) -> (Vec<u32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvlab"))
        .args(["generate", "--model", MODEL_DIR, "--dtype", dtype, "--chat"])
        .args(["--prompt", prompt, "--max-new-tokens", "32", "--json"])
        .output()
        .expect("the kvlab binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    (
        ids(&r["generated_ids"]),
        r["text"].as_str().unwrap().to_string(),
    )
}

#[test]
fn cli_int8_answers_the_question() {
    cli_answers_the_question("int8");
}

#[test]
fn cli_w8a8_answers_the_question() {
    cli_answers_the_question("w8a8");
}

#[test]
fn cli_bf16a_answers_the_question() {
    cli_answers_the_question("bf16a");
}

fn cli_answers_the_question(dtype: &str) {
    if model().is_none() {
        return;
    }
    let prompt = "What is the capital of France?";
    let (f32_ids, f32_text) = cli_generate("f32", prompt);
    let (int8_ids, int8_text) = cli_generate(dtype, prompt);
    let same = int8_ids
        .iter()
        .zip(&f32_ids)
        .take_while(|(a, b)| a == b)
        .count();
    eprintln!(
        "{dtype}: {int8_text:?}\nf32:  {f32_text:?}\n{same} of {} {dtype} tokens as f32's {}",
        int8_ids.len(),
        f32_ids.len()
    );
    assert!(int8_text.contains("Paris"), "{int8_text:?}");
}
