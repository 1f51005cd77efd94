//! The eviction policies from the command line: shapes that cannot work are one-line
//! errors before any model loads; `kvlab eval` runs them on the real model; `kvlab
//! eval-table` reads saved reports and refuses reports of different texts.

mod common;

use common::cli::{fails_with, json, ok};

const TEXT: &str = "tests/fixtures/eval/gpl-3-head.txt";

#[test]
fn bad_windows_and_budgets_are_one_line_errors() {
    fn eval<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec!["eval", "--model", "/no/such/model", "--text-file", TEXT];
        args.extend_from_slice(extra);
        args
    }
    // The policy is checked first: the missing model is never reached.
    fails_with(
        &eval(&["--kv", "window", "--window", "0"]),
        "a window of 0 positions keeps nothing to attend to: give a window of at least 1",
    );
    fails_with(
        &eval(&["--kv", "window", "--window", "4", "--sinks", "4"]),
        "4 sinks leave no room for recent tokens in a window of 4",
    );
    fails_with(
        &eval(&["--kv", "h2o", "--budget", "0"]),
        "an H2O budget of 0 positions keeps nothing",
    );
    fails_with(
        &eval(&["--kv", "h2o", "--budget", "8", "--recent", "9"]),
        "a recent window of 9 does not fit an H2O budget of 8",
    );
    fails_with(
        &[
            "evict-speed",
            "--model",
            "/no/such/model",
            "--text-file",
            TEXT,
            "--window",
            "3",
            "--sinks",
            "7",
        ],
        "7 sinks leave no room",
    );
}

#[test]
fn eval_table_refuses_reports_of_different_texts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.jsonl");
    let line = |label: &str, n: usize| {
        format!(
            r#"{{"kv":"window","label":"{label}","n_tokens":{n},"kv_cache_bytes":100,"kv_bytes_ratio":0.5,"perplexity":3.0,"full_perplexity":2.0,"top1_agreement":0.75,"mean_kl":0.1}}"#
        )
    };
    std::fs::write(&path, format!("{}\n{}\n", line("a", 10), line("b", 12))).unwrap();
    let path = path.to_str().unwrap();
    fails_with(
        &["eval-table", "--data", path],
        "the reports score different texts",
    );
    std::fs::write(dir.path().join("one.jsonl"), line("window-w4-s1", 10)).unwrap();
    let table = ok(
        &[
            "eval-table",
            "--data",
            dir.path().join("one.jsonl").to_str().unwrap(),
        ],
        "",
    );
    assert!(
        table.contains("| window-w4-s1 | 100 B | 50.0 % | 3.000 | +50.0 % | 75.0 % | 0.1000 |"),
        "{table}"
    );
    fails_with(
        &["eval-table", "--data", "/no/such/file.jsonl"],
        "file.jsonl",
    );
}

/// The real model, 48 tokens: a window of 8 positions holds 8 positions' bytes whatever
/// the text, and forgets (its perplexity is not the full cache's).
#[test]
fn eval_runs_the_window_and_h2o_on_the_real_model() {
    if !common::real_model_present() {
        return;
    }
    let per_token = 30 * 2 * 3 * 64 * 4;
    for (policy, size) in [
        (vec!["--kv", "window", "--window", "8", "--sinks", "2"], 8),
        (vec!["--kv", "h2o", "--budget", "8"], 8),
    ] {
        let mut args = vec!["eval", "--text-file", TEXT, "--max-tokens", "48", "--json"];
        args.extend_from_slice(&policy);
        let report = json(&args);
        assert_eq!(report["n_tokens"], 48);
        assert_eq!(report["kv_cache_bytes"], size * per_token, "{report}");
        assert_eq!(report["full_kv_cache_bytes"], 48 * per_token);
        let (ppl, full) = (
            report["perplexity"].as_f64().unwrap(),
            report["full_perplexity"].as_f64().unwrap(),
        );
        assert!(ppl.is_finite() && ppl != full, "{report}");
    }
}

/// Token by token, a window per query sees what the per-pass window keeps: `kvlab eval`
/// (one token per pass) gives the same perplexity, agreement and KL, to the bit, on the
/// real model, from a ring of the same `window` slots.
#[test]
fn eval_of_a_window_per_query_is_the_per_pass_window_token_by_token() {
    if !common::real_model_present() {
        return;
    }
    let run = |kv: &'static str| {
        json(&[
            "eval",
            "--text-file",
            TEXT,
            "--max-tokens",
            "48",
            "--json",
            "--kv",
            kv,
            "--window",
            "8",
            "--sinks",
            "2",
        ])
    };
    let (window, sliding) = (run("window"), run("sliding"));
    for field in ["perplexity", "top1_agreement", "mean_kl", "kv_cache_bytes"] {
        assert_eq!(
            window[field], sliding[field],
            "{field}: {window} vs {sliding}"
        );
    }
    assert_ne!(window["perplexity"], window["full_perplexity"]);
}

/// `--kv window`, `sliding` and `h2o` on generate and compare: a prompt longer than the
/// window is prefilled in chunks (the per-pass window) or in one pass whose queries each
/// see their own window (`sliding`, whose ring keeps room for a pass of 128: here all 28
/// positions); compare reports different tokens as the policy's cost (exit 0), not as a bug.
#[test]
fn generate_and_compare_take_the_eviction_policies() {
    for (kv, reserved) in [
        (
            ["--kv", "window", "--window", "8", "--sinks", "2"].as_slice(),
            8,
        ),
        (
            ["--kv", "sliding", "--window", "8", "--sinks", "2"].as_slice(),
            28,
        ),
        (["--kv", "h2o", "--budget", "8"].as_slice(), 8),
    ] {
        for cmd in ["generate", "compare"] {
            let mut args = vec![
                cmd,
                "--random-weights",
                "--prompt-len",
                "24",
                "--max-new-tokens",
                "4",
            ];
            args.extend_from_slice(kv);
            if cmd == "generate" {
                args.push("--json");
                let report = json(&args);
                assert_eq!(
                    report["generated_ids"].as_array().unwrap().len(),
                    4,
                    "{report}"
                );
                let per_token = 30 * 2 * 3 * 64 * 4;
                assert_eq!(report["kv_cache_bytes"], reserved * per_token, "{report}");
                // What the last token's attention read: the window, 8 positions.
                assert_eq!(report["kv_cache_bytes_used"], 8 * per_token, "{report}");
            } else {
                ok(&args, "");
            }
        }
    }
}

/// `--cache paged|prefix --kv window` keeps the ring's positions in blocks: the same
/// tokens as `--cache preallocated --kv window` for any block size, never more bytes
/// than the window's; the engine refuses the window with the reason.
#[test]
fn a_window_in_paged_blocks_generates_the_rings_tokens() {
    let run = |cache: &str, block_size: &str| {
        let report = json(&[
            "generate",
            "--random-weights",
            "--prompt-len",
            "30",
            "--max-new-tokens",
            "12",
            "--kv",
            "window",
            "--window",
            "10",
            "--sinks",
            "3",
            "--cache",
            cache,
            "--block-size",
            block_size,
            "--json",
        ]);
        report["generated_ids"].clone()
    };
    let ring = run("preallocated", "16");
    assert_eq!(ring.as_array().unwrap().len(), 12);
    for cache in ["paged", "prefix"] {
        for block_size in ["1", "3", "4", "16"] {
            assert_eq!(
                run(cache, block_size),
                ring,
                "--cache {cache} --block-size {block_size}"
            );
        }
    }
    fails_with(
        &[
            "bench-batch",
            "--random-weights",
            "--concurrency",
            "1",
            "--kv",
            "window",
            "--window",
            "8",
        ],
        "--kv window evicts once per forward pass",
    );
}
