//! The `kvlab` binary: JSON reports carry the promised fields, bad input exits
//! non-zero with a message (never a panic).

mod common;

use common::cli::*;
use serde_json::Value;

#[test]
fn kv_size_reproduces_the_seed() {
    let base = [
        "kv-size",
        "--layers",
        "32",
        "--kv-heads",
        "32",
        "--head-dim",
        "128",
        "--dtype",
        "bf16",
        "--json",
    ];
    let r = json(&[&base[..], &["--seq-len", "2048"]].concat());
    assert_eq!(r["bytes"], 1_073_741_824u64);
    assert_eq!(r["bytes_per_token"], 524_288);
    let r = json(&[&base[..], &["--seq-len", "32768"]].concat());
    assert_eq!(r["bytes"], 17_179_869_184u64);
    let r = json(&[&base[..], &["--seq-len", "2048", "--batch", "8"]].concat());
    assert_eq!(r["bytes"], 8 * 1_073_741_824u64);
}

#[test]
fn generate_json_has_the_figures() {
    let r = json(&[
        "generate",
        "--random-weights",
        "--prompt-len",
        "12",
        "--max-new-tokens",
        "5",
        "--json",
    ]);
    for key in [
        "prompt_ids",
        "generated_ids",
        "text",
        "ttft_ms",
        "tpot_ms",
        "prefill_tok_s",
        "decode_tok_s",
        "kv_cache_bytes",
        "token_ms",
    ] {
        assert!(!r[key].is_null(), "missing {key}");
    }
    assert_eq!(r["prompt_ids"].as_array().unwrap().len(), 12);
    assert_eq!(r["generated_ids"].as_array().unwrap().len(), 5);
    // TTFT with the cache's reservation timed too (book: cache-layouts.md, §3.3).
    let (alloc, ttft) = (
        r["alloc_ms"].as_f64().unwrap(),
        r["ttft_ms"].as_f64().unwrap(),
    );
    assert!(alloc > 0.0, "building the decoder was not timed: {alloc}");
    // (serde_json's default float parser may be one ulp off: compare to 1e-9 ms.)
    let with_alloc = r["ttft_with_alloc_ms"].as_f64().unwrap();
    assert!(
        (with_alloc - (alloc + ttft)).abs() < 1e-9,
        "{with_alloc} != {alloc} + {ttft}"
    );
    // SmolLM2 shape, f32: 30 layers x 3 KV heads x 64 x 2 (K,V) x 4 bytes per position, 17 positions reserved.
    assert_eq!(r["kv_cache_bytes"], 17 * 30 * 3 * 64 * 2 * 4);
}

#[test]
fn compare_json_says_identical_with_a_speedup() {
    let r = json(&[
        "compare",
        "--random-weights",
        "--prompt-len",
        "24",
        "--max-new-tokens",
        "4",
        "--ttft-rounds",
        "3",
        "--json",
    ]);
    assert_eq!(r["identical"], true);
    assert!(r["speedup"].as_f64().unwrap() > 0.0);
    // TTFT: a warm-up round, then 3 counted ones, the paths alternating.
    assert_eq!(r["ttft"]["rounds"], 3);
    let order: Vec<String> = r["ttft"]["order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|round| round[0].as_str().unwrap().to_string())
        .collect();
    assert_eq!(order, ["cached", "naive", "cached", "naive"]);
    for path in ["cached", "naive"] {
        let samples = &r["ttft"][path];
        assert_eq!(samples["ttft_ms"].as_array().unwrap().len(), 3, "{path}");
        assert!(samples["median_ttft_with_alloc_ms"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(r["naive"]["generated_ids"], r["cached"]["generated_ids"]);
    assert_eq!(r["naive"]["kv_cache_bytes"], 0);
    assert!(!r["checkpoints"].as_array().unwrap().is_empty());
}

#[test]
fn compare_impl_textbook_gives_the_engines_tokens() {
    // The reference core (src/textbook.rs) through the CLI: its own two paths agree, and
    // their tokens are the engine's (its logits are the engine's bits: tests/textbook.rs).
    let run = |implementation: &str| {
        json(&[
            "compare",
            "--random-weights",
            "--prompt-len",
            "8",
            "--max-new-tokens",
            "3",
            "--ttft-rounds",
            "1",
            "--impl",
            implementation,
            "--json",
        ])
    };
    let (textbook, engine) = (run("textbook"), run("engine"));
    assert_eq!(textbook["identical"], true);
    assert_eq!(
        textbook["cached"]["generated_ids"],
        engine["cached"]["generated_ids"]
    );
    // ... and compare says so itself, checking against the engine.
    let against = &textbook["against_engine"];
    assert_eq!(against["identical_tokens"], true);
    assert_eq!(against["first_logits_bitwise"], true);
    assert_eq!(against["engine_ids"], engine["cached"]["generated_ids"]);
    assert!(engine.get("against_engine").is_none());
}

#[test]
fn compare_impl_learner_judges_each_exercise_or_the_whole_run() {
    // `--impl learner` compiles the exercise files as they stand (src/learner.rs): in this
    // repository the unfinished ones, on a learner's machine theirs. Either a function is
    // named, the first the kernel table shows WRONG, in one line, or every
    // function passed and the run gave the engine's tokens.
    let out = kvlab(&[
        "compare",
        "--random-weights",
        "--prompt-len",
        "8",
        "--max-new-tokens",
        "3",
        "--ttft-rounds",
        "1",
        "--impl",
        "learner",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked at src/"), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    if out.status.success() {
        let against = &report["against_engine"];
        assert_eq!(against["identical_tokens"], true, "{stdout}");
        let kernels = against["kernels"].as_array().unwrap();
        assert_eq!(kernels.len(), 7);
        assert!(kernels.iter().all(|k| k["ok"] == true), "{stdout}");
    } else {
        let kernels = report.as_array().unwrap();
        let first_wrong = kernels.iter().position(|k| k["ok"] == false).unwrap();
        let k = &kernels[first_wrong];
        let named = format!(
            "exercise {} ({}) does not give kvlab's numbers in the engine",
            k["exercise"].as_str().unwrap(),
            k["function"].as_str().unwrap()
        );
        assert!(stderr.contains(&named), "{stderr}");
        assert!(stderr.trim_end().lines().count() <= 2, "{stderr}");
    }
}

#[test]
fn bench_json_reports_dtype_threads_and_roof_fractions() {
    // SmolLM2 shape: 134,479,872 matrix weights (7 per layer x 30 layers, plus the tied
    // LM head), at 2 bytes in bf16 and at 576 bytes per int8 block of 512 (1.125).
    for (dtype, matrix_bytes) in [
        ("bf16", 2 * 134_479_872u64),
        ("int8", 134_479_872 / 512 * 576),
    ] {
        bench_json_for(dtype, matrix_bytes);
    }
}

fn bench_json_for(dtype: &str, matrix_bytes: u64) {
    let context = 8u64;
    let r = json(&[
        "bench",
        "--random-weights",
        "--dtype",
        dtype,
        "--threads",
        "1",
        "--prefill",
        "8",
        "--contexts",
        "8",
        "--reps",
        "1",
        "--json",
    ]);
    assert_eq!(r["dtype"], dtype);
    assert_eq!(r["threads"], 1);
    assert_eq!(r["n_params"], 134_515_008);
    // The matrices in their format; 35,136 f32 norm weights, one f32 embedding row (576)
    // and the f32 K and V of `context` positions (30 x 3 x 64 x 2 x 4 = 46,080 each).
    let bytes = (matrix_bytes + 4 * (35_136 + 576) + 46_080 * context) as f64;
    assert_eq!(r["decode_bytes_per_token"].as_f64(), Some(bytes), "{dtype}");
    let positive = |v: &Value| v.as_f64().is_some_and(|x| x.is_finite() && x > 0.0);
    let prefill = &r["prefill"][0];
    assert!(positive(&prefill["fraction_of_fma_peak"]), "{prefill}");
    let peak = r["fma_peak_gflop_s"].as_f64().unwrap();
    let f = prefill["gflop_s"].as_f64().unwrap() / peak;
    assert!((prefill["fraction_of_fma_peak"].as_f64().unwrap() - f).abs() < 1e-9 * f);
    let step = &r["steps"][0];
    assert_eq!(step["cached_bytes_per_token"].as_f64(), Some(bytes));
    assert!(positive(&step["fraction_of_bandwidth_roof"]), "{step}");
    // The roof's tokens/s is the measured bandwidth over the bytes per token.
    let roof = r["memory_gb_s"].as_f64().unwrap() * 1e9 / bytes;
    let roof_tok_s = step["roof_tok_s"].as_f64().unwrap();
    assert!(
        (roof_tok_s - roof).abs() < 1e-9 * roof,
        "{roof_tok_s} vs {roof}"
    );
}

#[test]
fn compare_in_bf16_and_int8_keeps_the_paths_identical() {
    for dtype in ["bf16", "int8"] {
        let r = json(&[
            "compare",
            "--random-weights",
            "--dtype",
            dtype,
            "--prompt-len",
            "24",
            "--max-new-tokens",
            "4",
            "--json",
        ]);
        assert_eq!(r["identical"], true, "{dtype}");
        assert_eq!(r["naive"]["generated_ids"], r["cached"]["generated_ids"]);
    }
}

#[test]
fn bad_input_exits_with_a_message() {
    fails_with(
        &["generate", "--model", "/no/such/dir", "--prompt", "hi"],
        "fetch-smollm2.sh",
    );
    fails_with(
        &["generate", "--random-weights", "--prompt", "hi"],
        "--prompt-len",
    );
    fails_with(
        &["generate", "--random-weights", "--prompt-len", "0"],
        "--prompt-len 0 is out of range",
    );
    fails_with(
        &["generate", "--random-weights", "--prompt-len", "9000"],
        "context is 8192",
    );
    fails_with(
        &[
            "generate",
            "--random-weights",
            "--prompt-len",
            "10",
            "--max-new-tokens",
            "8190",
        ],
        "at most 8182",
    );
    fails_with(
        &["kv-size", "--layers", "2", "--seq-len", "10"],
        "--kv-heads",
    );
    // --dtype is the CPU's weight format; the GPU's is --gpu-dtype.
    fails_with(
        &[
            "generate",
            "--random-weights",
            "--prompt-len",
            "4",
            "--device",
            "cuda",
            "--dtype",
            "bf16",
        ],
        "--gpu-dtype",
    );
    let dir = tempfile::tempdir().unwrap();
    let not_gguf = dir.path().join("model.gguf");
    std::fs::write(&not_gguf, "this is a text file, not a model").unwrap();
    let out = dir.path().join("out");
    fails_with(
        &[
            "import-gguf",
            not_gguf.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
        "GGUF",
    );
    fails_with(
        &[
            "generate",
            "--random-weights",
            "--prompt-len",
            "4",
            "--device",
            "cuda",
        ],
        "CUDA",
    );
}

#[test]
fn serve_refuses_limits_that_would_not_limit_in_one_line() {
    // Checked before the model loads: each fails at once, naming its flag.
    for (flag, needle) in [
        ("--max-connections=0", "--max-connections 0 is out of range"),
        ("--header-timeout-s=0", "--header-timeout-s 0 is not a time"),
        ("--stream-stall-s=NaN", "--stream-stall-s NaN is not a time"),
        (
            "--body-timeout-s=100000",
            "--body-timeout-s 100000 is not a time",
        ),
        ("--drain-timeout-s=-1", "--drain-timeout-s -1 is not a time"),
        (
            "--drain-timeout-s=inf",
            "--drain-timeout-s inf is not a time",
        ),
        ("--api-key=", "--api-key (or KVLAB_API_KEY) is empty"),
    ] {
        fails_with(&["serve", "--model", "/nonexistent", flag], needle);
    }
}
