//! The cache-layout commands: `generate/compare --cache`, `trace`, `capacity`, `prefix`,
//! `chat` (fed from stdin, as a learner's script would) and `bench-cache`.

mod common;

use common::cli::*;
use common::MODEL_DIR;
use serde_json::Value;

/// SmolLM2's shape in f32: 30 layers x 3 KV heads x 64 x 2 (K, V) x 4 bytes.
const PER_TOKEN: u64 = 30 * 3 * 64 * 2 * 4;

#[test]
fn generate_with_every_layout_gives_the_same_tokens() {
    let run = |cache: &str| {
        json(&[
            "generate",
            "--random-weights",
            "--prompt-len",
            "20",
            "--max-new-tokens",
            "6",
            "--cache",
            cache,
            "--block-size",
            "8",
            "--json",
        ])
    };
    let base = run("preallocated");
    assert_eq!(base["kv_cache_bytes"], 26 * PER_TOKEN);
    for cache in ["growable", "paged", "prefix"] {
        let r = run(cache);
        assert_eq!(r["generated_ids"], base["generated_ids"], "{cache}");
        // 25 positions at the end (the last token is never fed back).
        assert_eq!(r["kv_cache_bytes_used"], 25 * PER_TOKEN, "{cache}");
        let reserved = r["kv_cache_bytes"].as_u64().unwrap();
        match cache {
            "growable" => assert_eq!(reserved, 32 * PER_TOKEN), // 16, doubled to 32
            _ => assert_eq!(reserved, 32 * PER_TOKEN),          // 4 blocks of 8
        }
        let steps = r["token_kv_bytes_reserved"].as_array().unwrap().len();
        assert_eq!(steps, 6);
    }
    let c = json(&[
        "compare",
        "--random-weights",
        "--prompt-len",
        "10",
        "--max-new-tokens",
        "3",
        "--cache",
        "paged",
        "--json",
    ]);
    assert_eq!(c["identical"], true);
}

#[test]
fn trace_writes_csv_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let text = ok(
        &[
            "trace",
            "--random-weights",
            "--prompt-len",
            "10",
            "--max-new-tokens",
            "12",
            "--block-size",
            "4",
            "--out",
            out,
        ],
        "",
    );
    assert!(text.contains("trace.svg"), "{text}");
    let csv = std::fs::read_to_string(dir.path().join("trace.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("layout,step,positions,bytes_reserved,bytes_used,bytes_copied,step_ms")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    // Step 0 (before the prefill), then one row per token: 13 rows per layout.
    assert_eq!(rows.len(), 3 * 13);
    let reserved = |layout: &str| -> Vec<u64> {
        rows.iter()
            .filter(|r| r[0] == layout)
            .map(|r| r[3].parse().unwrap())
            .collect()
    };
    // Preallocated: everything before the first token. Paged: whole blocks, on demand.
    assert!(reserved("preallocated")
        .iter()
        .all(|&b| b == 22 * PER_TOKEN));
    let paged = reserved("paged");
    assert_eq!(paged[0], 0);
    assert!(paged.iter().all(|b| b % (4 * PER_TOKEN) == 0));
    assert_eq!(*paged.last().unwrap(), 24 * PER_TOKEN); // 21 positions in 6 blocks
    let svg = std::fs::read_to_string(dir.path().join("trace.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("growable"));
}

#[test]
fn capacity_fits_more_requests_when_paged() {
    let r = json(&["capacity", "--budget", "512MiB", "--json"]);
    let (pre, paged) = (&r["preallocated"], &r["paged"]);
    let n = |f: &Value| f["requests"].as_u64().unwrap();
    assert!(n(pre) > 0 && n(paged) > n(pre), "{r}");
    assert!(paged["waste"].as_f64().unwrap() < 0.05);
    assert!(pre["waste"].as_f64().unwrap() > 0.2);
    assert!(paged["bytes_reserved"].as_u64().unwrap() <= 512 << 20);
    fails_with(&["capacity", "--budget", "lots"], "not a byte count");
    fails_with(&["capacity", "--budget", "1000"], "less than one block");
}

#[test]
fn prefix_reuses_the_shared_prompt_and_keeps_the_tokens() {
    let r = json(&[
        "prefix",
        "--random-weights",
        "--requests",
        "3",
        "--shared-len",
        "40",
        "--suffix-len",
        "4",
        "--max-new-tokens",
        "3",
        "--block-size",
        "8",
        "--json",
    ]);
    assert_eq!(r["identical_tokens"], true);
    let with = &r["with"]["requests"];
    assert_eq!(with[0]["reused"], 0);
    assert_eq!(with[1]["reused"], 40);
    assert_eq!(with[2]["computed"], 4);
    assert!(r["without"]["requests"]
        .as_array()
        .unwrap()
        .iter()
        .all(|q| q["reused"] == 0));
    // 3 x 6 blocks unshared; shared: 5 blocks once + 1 own block each.
    let block = 8 * PER_TOKEN;
    assert_eq!(r["without"]["kv_bytes"], 18 * block);
    assert_eq!(r["with"]["kv_bytes"], (5 + 3) * block);
}

#[test]
fn bench_cache_reports_every_layout() {
    let r = json(&[
        "bench-cache",
        "--random-weights",
        "--contexts",
        "8",
        "--reps",
        "1",
        "--shared-len",
        "32",
        "--suffix-len",
        "4",
        "--json",
    ]);
    let layouts: Vec<&str> = r["decode"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["layout"].as_str().unwrap())
        .collect();
    assert_eq!(layouts, ["preallocated", "growable", "paged", "prefix"]);
    assert_eq!(r["prefix"]["reused"], 32);
    fails_with(
        &["bench-cache", "--random-weights", "--contexts", "0"],
        "contexts must be",
    );
}

#[test]
fn cache_flags_reject_bad_values() {
    fails_with_code(
        &[
            "generate",
            "--random-weights",
            "--prompt-len",
            "4",
            "--block-size",
            "0",
        ],
        "block-size",
        2,
    );
    fails_with(
        &[
            "generate",
            "--random-weights",
            "--prompt-len",
            "4",
            "--cache",
            "paged",
            "--device",
            "cuda",
        ],
        "CUDA",
    );
}

/// `kvlab chat` on the real model, from stdin: turn 2 reuses turn 1's cache and
/// answers exactly as when the whole conversation is recomputed.
#[test]
fn chat_keeps_its_cache_between_turns() {
    if !common::real_model_present() {
        return;
    }
    let questions = "What is the capital of France?\n\nAnd of Germany?\n";
    let turns = |extra: &[&str]| -> Vec<Value> {
        let args = [
            &[
                "chat",
                "--model",
                MODEL_DIR,
                "--max-new-tokens",
                "12",
                "--json",
            ],
            extra,
        ]
        .concat();
        ok(&args, questions)
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per turn"))
            .collect()
    };
    let kept = turns(&[]);
    assert_eq!(kept.len(), 2, "the empty line is skipped");
    assert_eq!(kept[0]["reused"], 0);
    let (reused, computed) = (
        kept[1]["reused"].as_u64().unwrap(),
        kept[1]["computed"].as_u64().unwrap(),
    );
    assert!(
        reused >= kept[0]["prompt_tokens"].as_u64().unwrap(),
        "{kept:?}"
    );
    assert_eq!(
        reused + computed,
        kept[1]["prompt_tokens"].as_u64().unwrap()
    );
    assert!(
        kept[0]["reply"].as_str().unwrap().contains("Paris"),
        "{kept:?}"
    );
    let fresh = turns(&["--no-reuse"]);
    assert_eq!(fresh[1]["reused"], 0);
    assert_eq!(fresh[1]["reply"], kept[1]["reply"]);
    let paged = turns(&["--cache", "prefix", "--block-size", "4"]);
    assert_eq!(paged[1]["reply"], kept[1]["reply"]);
    assert_eq!(paged[1]["reused"], kept[1]["reused"]);
}

/// Random weights are asked for one way: `--random-weights`. Without it the experiments
/// load `--model`, and a missing folder is an error that names it (no silent fallback).
#[test]
fn experiments_need_random_weights_asked_for() {
    for command in ["prefix", "bench-cache", "bench"] {
        fails_with(
            &[command, "--model", "/nonexistent/kvlab-model"],
            "not found",
        );
    }
}

/// `kvlab generate` prints the answer without the end-of-turn token's text; the JSON
/// keeps every generated id.
#[test]
fn generate_prints_text_without_special_tokens() {
    if !common::real_model_present() {
        return;
    }
    let args = [
        "generate",
        "--model",
        MODEL_DIR,
        "--chat",
        "--prompt",
        "Say hi.",
        "--max-new-tokens",
        "48",
    ];
    let text = ok(&args, "");
    assert!(!text.contains("<|im_end|>"), "{text}");
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let g = json(&with_json);
    let ids = g["generated_ids"].as_array().unwrap();
    assert_eq!(
        g["stop_reason"], "eos",
        "the answer should end with <|im_end|>: {g}"
    );
    assert!(!ids.is_empty());
    assert!(!g["text"].as_str().unwrap().contains("<|im_end|>"));
}
