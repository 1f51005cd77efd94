//! `kvlab generate --speculative`, `kvlab compare --speculative`, `kvlab bench-verify`
//! and `kvlab spec-sweep`: the JSON reports carry the promised fields, greedy
//! speculative decoding gives plain decoding's tokens through the CLI (random weights on
//! every cache layout, and the real model with its chat template), and bad input is
//! one clear line with exit code 1.

mod common;

use common::cli::*;
use common::MODEL_DIR;
use serde_json::Value;

fn ids(v: &Value) -> Vec<u64> {
    v["generated_ids"]
        .as_array()
        .expect("generated_ids")
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect()
}

const RANDOM: [&str; 5] = [
    "--random-weights",
    "--prompt-len",
    "12",
    "--max-new-tokens",
    "6",
];

#[test]
fn generate_speculative_reports_the_drafter_figures_on_every_layout() {
    let plain = json(&[&["generate"], &RANDOM[..], &["--json"]].concat());
    for cache in ["preallocated", "growable", "paged", "prefix"] {
        let g = json(
            &[
                &["generate"],
                &RANDOM[..],
                &["--speculative", "ngram:2", "--draft-len", "3"],
                &["--cache", cache, "--block-size", "4", "--json"],
            ]
            .concat(),
        );
        for key in [
            "acceptance_rate",
            "mean_accepted_len",
            "target_forwards",
            "tokens_per_forward",
            "ttft_ms",
            "tpot_ms",
            "decode_tok_s",
            "kv_cache_bytes",
        ] {
            assert!(g.get(key).is_some(), "{cache}: no {key} in {g}");
        }
        assert_eq!(g["drafter"], "ngram:2");
        assert_eq!(g["draft_len"], 3);
        assert_eq!(ids(&g), ids(&plain), "{cache}: greedy tokens differ");
        let forwards = g["target_forwards"].as_f64().unwrap();
        let tpf = g["tokens_per_forward"].as_f64().unwrap();
        assert!((tpf - ids(&g).len() as f64 / forwards).abs() < 1e-9);
    }
}

#[test]
fn compare_speculative_says_identical_and_the_speedup() {
    let r = json(
        &[
            &["compare"],
            &RANDOM[..],
            &["--speculative", "early-exit:10", "--draft-len", "2"],
            &["--cache", "prefix", "--json"],
        ]
        .concat(),
    );
    assert_eq!(r["tokens_identical"], true);
    assert_eq!(r["cache"], "prefix");
    assert!(r["speedup_total"].as_f64().unwrap() > 0.0);
    assert!(r["predicted_speedup"].as_f64().unwrap() > 0.0);
    assert_eq!(r["speculative"]["drafter"], "early-exit:10");
    // Sampling: speculative sampling runs (the tokens need not equal plain's draws).
    let r = json(
        &[
            &["compare"],
            &RANDOM[..],
            &[
                "--speculative",
                "ngram",
                "--temperature",
                "0.9",
                "--seed",
                "4",
            ],
            &["--json"],
        ]
        .concat(),
    );
    assert_eq!(
        r["speculative"]["generated_ids"].as_array().unwrap().len(),
        6
    );
}

#[test]
fn bad_speculative_input_is_one_line_and_exit_1() {
    fn gen<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        [&["generate"], &RANDOM[..], extra].concat()
    }
    fails_with(
        &gen(&["--speculative", "medusa"]),
        "unknown drafter `medusa`: use ngram, ngram:N, early-exit:L or bf16",
    );
    fails_with(
        &gen(&["--speculative", "ngram:0"]),
        "must be a whole number >= 1",
    );
    fails_with(
        &gen(&["--speculative", "ngram", "--dtype", "bf16"]),
        "--speculative verifies with f32 weights only",
    );
    fails_with(
        &gen(&["--speculative", "ngram", "--draft-len", "0"]),
        "draft length must be at least 1",
    );
    fails_with(
        &gen(&["--speculative", "ngram", "--draft-len", "100000"]),
        "does not fit the model's context of 8192 tokens",
    );
    fails_with(
        &gen(&["--speculative", "early-exit:30"]),
        "early-exit:30: the draft must keep between 1 and 29 of the model's 30 layers",
    );
    fails_with(
        &gen(&["--speculative", "ngram", "--path", "naive"]),
        "drop --path naive",
    );
    fails_with(
        &gen(&["--speculative", "ngram", "--device", "cuda"]),
        "drop --device cuda",
    );
    fails_with(
        &[
            &["compare"],
            &RANDOM[..],
            &["--speculative", "early-exit:0"],
        ]
        .concat(),
        "early-exit:0",
    );
    fails_with(
        &[
            "spec-sweep",
            "--random-weights",
            "--prompt-len",
            "8",
            "--drafters",
            "ngram,bf16:2",
        ],
        "unknown drafter `bf16:2`",
    );
    fails_with(
        &["bench-verify", "--random-weights", "--context", "8190"],
        "lower --context or --max-k",
    );
}

/// The verify-cost table and the sweep: one row per k, one cell per (drafter, k).
#[test]
fn bench_verify_and_spec_sweep_json() {
    let r = json(&[
        "bench-verify",
        "--random-weights",
        "--context",
        "16",
        "--max-k",
        "3",
        "--reps",
        "1",
        "--json",
    ]);
    let rows = r["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["k"], i + 1);
        assert_eq!(row["rows"], i + 2);
        assert!(row["ratio"].as_f64().unwrap() > 0.0);
    }
    let r = json(&[
        "spec-sweep",
        "--random-weights",
        "--prompt-len",
        "10",
        "--max-new-tokens",
        "4",
        "--drafters",
        "ngram,early-exit:15",
        "--draft-lens",
        "1,3",
        "--json",
    ]);
    let cells = r["cells"].as_array().unwrap();
    let got: Vec<(String, u64)> = cells
        .iter()
        .map(|c| {
            (
                c["drafter"].as_str().unwrap().into(),
                c["k"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = [
        ("ngram:3", 1),
        ("ngram:3", 3),
        ("early-exit:15", 1),
        ("early-exit:15", 3),
    ];
    assert_eq!(
        got,
        want.map(|(d, k)| (d.to_string(), k)).to_vec(),
        "cells in order"
    );
    for c in cells {
        assert_eq!(c["tokens_identical"], true);
        for key in [
            "acceptance_rate",
            "tokens_per_forward",
            "speedup_total",
            "predicted_speedup",
        ] {
            assert!(c[key].as_f64().is_some(), "no {key} in {c}");
        }
    }
}

/// The real model, its chat template and EOS: `generate --speculative ngram --chat`
/// emits exactly the tokens of plain `generate --chat`.
#[test]
fn real_model_speculative_chat_equals_plain_chat() {
    if !common::real_model_present() {
        return;
    }
    let request = [
        "--model",
        MODEL_DIR,
        "--prompt",
        "Repeat the following text word for word: The KV cache stores the keys and values of every token in every layer, so that each new token only computes its own.",
        "--chat",
        "--max-new-tokens",
        "40",
        "--json",
    ];
    let plain = json(&[&["generate"], &request[..]].concat());
    for extra in [
        &["--speculative", "ngram"][..],
        &[
            "--speculative",
            "ngram:2",
            "--draft-len",
            "8",
            "--cache",
            "prefix",
        ][..],
    ] {
        let spec = json(&[&["generate"], &request[..], extra].concat());
        assert_eq!(ids(&spec), ids(&plain), "{extra:?}");
        assert_eq!(spec["text"], plain["text"]);
        assert_eq!(spec["stop_reason"], plain["stop_reason"]);
        // The model copies the passage: whole runs of drafts are accepted (measured:
        // 20 of 24 at k = 4), so the equality covers multi-token rounds.
        assert!(spec["draft_accepted"].as_u64().unwrap() >= 10, "{spec}");
    }
}
