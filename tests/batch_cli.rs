//! `kvlab bench-batch`: bad input is one line, and the JSON report has what the figures
//! and the book read (tokens identical between batched and one-at-a-time runs).

mod common;

use common::cli::{fails_with, fails_with_code, json};

#[test]
fn bench_batch_refuses_bad_input_in_one_line() {
    let base = ["bench-batch", "--random-weights"];
    let with = |extra: &[&'static str]| [&base[..], extra].concat();
    fails_with(&with(&["--concurrency", "0"]), "--concurrency");
    fails_with(
        &with(&["--running", "4", "--stall-budget", "4"]),
        "--stall-budget",
    );
    fails_with(
        &with(&["--long-prompt", "9000"]),
        "exceeds the model's 8192 positions",
    );
    fails_with(&with(&["--max-tokens", "0"]), "at least 1");
    fails_with_code(&with(&["--against", "f16"]), "not a weight format", 2);
    fails_with_code(&with(&["--against", "bf16:tiles"]), "not a layout", 2);
    fails_with(&with(&["--dtype", "int8", "--layout", "rows"]), "--layout");
    fails_with(
        &with(&["--speculative", "early-exit:3"]),
        "the engine drafts by prompt lookup only",
    );
    fails_with(
        &with(&["--speculative", "ngram", "--draft-len", "0"]),
        "--draft-len",
    );
    fails_with(&with(&["--speculative", "ngram:0"]), "whole number >= 1");
    fails_with(
        &with(&["--speculative", "ngram", "--spec-concurrency", "0"]),
        "--spec-concurrency",
    );
}

/// `--speculative ngram`: the copy load runs without and with drafts, with the same
/// tokens, and the counters add up.
#[test]
fn bench_batch_speculation_reports_both_engines() {
    let r = json(&[
        "bench-batch",
        "--random-weights",
        "--concurrency",
        "1",
        "--prompt-len",
        "12",
        "--max-tokens",
        "6",
        "--running",
        "1",
        "--long-prompt",
        "4",
        "--stall-budget",
        "4",
        "--speculative",
        "ngram:2",
        "--draft-len",
        "3",
        "--spec-concurrency",
        "2",
        "--json",
    ]);
    let sp = &r["speculation"];
    assert_eq!(sp["tokens_identical"], true, "{sp}");
    assert_eq!(sp["concurrency"], 2, "{sp}");
    assert_eq!(
        (sp["ngram"].as_u64(), sp["draft_len"].as_u64()),
        (Some(2), Some(3))
    );
    let (drafted, accepted) = (
        sp["drafted_tokens"].as_u64().unwrap(),
        sp["accepted_tokens"].as_u64().unwrap(),
    );
    assert!(drafted > 0 && accepted <= drafted, "{sp}");
    assert!(
        sp["speculative_iterations"].as_u64() <= sp["plain_iterations"].as_u64(),
        "{sp}"
    );
    // Without --speculative there is no such section.
    assert!(json(&[
        "bench-batch",
        "--random-weights",
        "--concurrency",
        "1",
        "--prompt-len",
        "2",
        "--max-tokens",
        "1",
        "--running",
        "1",
        "--long-prompt",
        "2",
        "--stall-budget",
        "2",
        "--json"
    ])["speculation"]
        .is_null());
}

/// `--dtype bf16 --against f32:rows`: the engine runs both formats at each level, and
/// the report says which is which.
#[test]
fn bench_batch_runs_the_against_weights_beside_its_own() {
    let r = json(&[
        "bench-batch",
        "--random-weights",
        "--concurrency",
        "2",
        "--prompt-len",
        "4",
        "--max-tokens",
        "2",
        "--running",
        "1",
        "--long-prompt",
        "8",
        "--stall-budget",
        "4",
        "--dtype",
        "bf16",
        "--against",
        "f32:rows",
        "--json",
    ]);
    assert_eq!(r["weights"], "bf16 in panels", "{r}");
    assert_eq!(r["against_weights"], "f32 in rows", "{r}");
    let point = &r["points"][0];
    let against = &point["against"];
    assert!(
        against["continuous_tok_s"].as_f64().unwrap() > 0.0,
        "{point}"
    );
    let gain =
        point["continuous_tok_s"].as_f64().unwrap() / against["continuous_tok_s"].as_f64().unwrap();
    assert!(
        (against["gain"].as_f64().unwrap() - gain).abs() < 1e-9 * gain,
        "{point}"
    );
    // bf16 panels stream half the bytes of f32.
    let f32_bytes = json(&[
        "bench-batch",
        "--random-weights",
        "--concurrency",
        "1",
        "--prompt-len",
        "2",
        "--max-tokens",
        "1",
        "--running",
        "1",
        "--long-prompt",
        "2",
        "--stall-budget",
        "2",
        "--layout",
        "rows",
        "--json",
    ]);
    assert_eq!(f32_bytes["weights"], "f32 in rows");
    let ratio = r["weight_bytes"].as_f64().unwrap() / f32_bytes["weight_bytes"].as_f64().unwrap();
    assert!((0.49..0.51).contains(&ratio), "{ratio}");
}

#[test]
fn bench_batch_json_reports_identical_tokens() {
    let r = json(&[
        "bench-batch",
        "--random-weights",
        "--concurrency",
        "1,3",
        "--prompt-len",
        "4",
        "--max-tokens",
        "3",
        "--running",
        "2",
        "--long-prompt",
        "20",
        "--stall-budget",
        "8",
        "--json",
    ]);
    let points = r["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    for p in points {
        assert_eq!(p["tokens_identical"], true, "{p}");
        assert!(p["continuous_tok_s"].as_f64().unwrap() > 0.0);
    }
    let stall = r["stall"].as_array().unwrap();
    assert_eq!(stall[0]["policy"], "continuous");
    assert_eq!(stall[1]["policy"], "continuous-chunked");
    // Whole prompt: one iteration holds all 20 prompt rows; chunked: never more than 8 rows.
    let rows = |run: &serde_json::Value| -> Vec<u64> {
        run["iterations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["decode_rows"].as_u64().unwrap() + i["prefill_rows"].as_u64().unwrap())
            .collect()
    };
    assert!(rows(&stall[0]).iter().any(|&n| n >= 20));
    assert!(
        rows(&stall[1]).iter().all(|&n| n <= 8),
        "{:?}",
        rows(&stall[1])
    );
}
