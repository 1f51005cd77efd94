//! `kvlab eval` and `--kv` on the command line: every bad input is one clear line (exit 1),
//! never a panic: an unknown policy, a group that does not divide head_dim, an empty,
//! non-UTF-8 or too short text file, a policy with another layout (quantized or evicting).

mod common;

use common::cli::{fails_with, json};
use common::{real_model_present, MODEL_DIR};

fn fixture() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/eval/apache-2.0-head.txt"
    )
    .into()
}

#[test]
fn unknown_policy_is_named_with_the_known_ones() {
    let text = fixture();
    fails_with(
        &["eval", "--text-file", &text, "--kv", "int3"],
        "unknown KV policy `int3`: use one of full, int8, int4, int4-per-token, window, sliding, int8+sliding, int4-per-token+sliding, h2o",
    );
    fails_with(
        &["generate", "--prompt", "hi", "--kv", "fp8"],
        "unknown KV policy `fp8`",
    );
}

#[test]
fn empty_and_non_utf8_text_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    fails_with(
        &["eval", "--text-file", empty.to_str().unwrap()],
        "the text file is empty",
    );
    let binary = dir.path().join("binary.txt");
    std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
    fails_with(
        &["eval", "--text-file", binary.to_str().unwrap()],
        "is not UTF-8 text",
    );
    fails_with(
        &["eval", "--text-file", "/no/such/file.txt"],
        "/no/such/file.txt",
    );
}

#[test]
fn model_dependent_refusals() {
    if !real_model_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one.txt");
    std::fs::write(&one, "a").unwrap();
    let one = one.to_str().unwrap();
    fails_with(
        &["eval", "--model", MODEL_DIR, "--text-file", one],
        "the text is 1 token(s) long: perplexity needs at least 2",
    );
    let text = fixture();
    let base = [
        "eval",
        "--model",
        MODEL_DIR,
        "--text-file",
        &text,
        "--max-tokens",
        "8",
    ];
    fails_with(
        &[&base[..], &["--kv", "int4", "--group", "48"]].concat(),
        "--group 48 does not divide head_dim 64",
    );
    // (--kv window in paged blocks runs: tests/eviction_cli.rs. H2O's single-row
    // evictions do not fit blocks.)
    fails_with(
        &[
            "generate", "--model", MODEL_DIR, "--prompt", "hi", "--kv", "h2o", "--budget", "8",
            "--cache", "paged",
        ],
        "a block of --cache paged goes back to the pool only when all its rows have gone",
    );
    fails_with(
        &[
            "generate", "--model", MODEL_DIR, "--prompt", "hi", "--kv", "int4", "--cache", "paged",
        ],
        "--kv int4 (KIVI) quantizes keys per channel over groups of positions",
    );
    fails_with(
        &[
            "generate", "--model", MODEL_DIR, "--prompt", "hi", "--kv", "int8", "--cache",
            "growable",
        ],
        "--cache growable doubles one f32 buffer and --kv int8 needs a cache of its own",
    );
}

/// `--cache paged` and `--cache prefix` with `--kv int8` and `--kv int4-per-token`: pools
/// of quantized blocks, whose tokens are those of the contiguous quantized cache.
#[test]
fn paged_quantized_caches_give_the_contiguous_tokens() {
    if !real_model_present() {
        return;
    }
    let run = |extra: &[&str]| {
        let base = [
            "generate",
            "--model",
            MODEL_DIR,
            "--prompt",
            "The three primary colors are",
            "--max-new-tokens",
            "16",
            "--json",
        ];
        common::ids(&json(&[&base[..], extra].concat())["generated_ids"])
    };
    for kv in ["int8", "int4-per-token"] {
        let contiguous = run(&["--kv", kv]);
        assert_eq!(contiguous.len(), 16);
        for layout in [
            ["--cache", "paged", "--block-size", "5"],
            ["--cache", "prefix", "--block-size", "16"],
        ] {
            assert_eq!(
                run(&[&["--kv", kv][..], &layout[..]].concat()),
                contiguous,
                "--kv {kv} {layout:?}"
            );
        }
    }
}

/// A short run of the quantized policies through the binary: the JSON has the fields the
/// figures read, and int4 per token keeps less than int8, which keeps less than f32 (KIVI's
/// int4 also holds a fixed f32 residual of 32 rows per layer: more than int8 at 24 tokens).
#[test]
fn eval_json_has_the_fields() {
    if !real_model_present() {
        return;
    }
    let text = fixture();
    let run = |kv: &str| {
        json(&[
            "eval",
            "--model",
            MODEL_DIR,
            "--text-file",
            &text,
            "--max-tokens",
            "24",
            "--kv",
            kv,
            "--json",
        ])
    };
    let (full, int8, int4) = (run("full"), run("int8"), run("int4-per-token"));
    for r in [&full, &int8, &int4] {
        for field in [
            "perplexity",
            "n_tokens",
            "kv_cache_bytes",
            "top1_agreement",
            "mean_kl",
        ] {
            assert!(r.get(field).is_some(), "{field} missing in {r}");
        }
        assert_eq!(r["n_tokens"], 24);
    }
    let bytes = |r: &serde_json::Value| r["kv_cache_bytes"].as_u64().unwrap();
    assert!(bytes(&int4) < bytes(&int8) && bytes(&int8) < bytes(&full));
    assert_eq!(full["mean_kl"], 0.0);
}

/// `kvlab eval --dtype D`: a weight format against f32 on the same text. bf16 rounds the
/// weights, int8 rounds them more coarsely, w8a8 rounds the activations as well: each
/// costs agreement and KL, never all of it; bf16a (bf16 activations too) costs more than
/// bf16 and less than w8a8; and f32 against itself is exact.
#[test]
fn eval_dtype_scores_weight_formats_against_f32() {
    let text = fixture();
    fails_with(
        &[
            "eval",
            "--text-file",
            &text,
            "--dtype",
            "w8a8",
            "--kv",
            "int8",
        ],
        "--dtype compares weight formats on the full cache: drop --kv and --model-window",
    );
    if !real_model_present() {
        return;
    }
    let score = |dtype: &str| {
        json(&[
            "eval",
            "--model",
            MODEL_DIR,
            "--text-file",
            &text,
            "--max-tokens",
            "96",
            "--dtype",
            dtype,
            "--json",
        ])
    };
    let same = score("f32");
    assert_eq!(same["top1_agreement"], 1.0);
    assert_eq!(same["mean_kl"], 0.0);
    assert_eq!(same["perplexity"], same["f32_perplexity"]);
    let kl = |dtype: &str| {
        let r = score(dtype);
        assert_eq!(r["dtype"], dtype);
        assert_eq!(r["n_tokens"], 96);
        assert_eq!(r["f32_perplexity"], same["f32_perplexity"]);
        let (top1, kl) = (
            r["top1_agreement"].as_f64().unwrap(),
            r["mean_kl"].as_f64().unwrap(),
        );
        assert!(
            (0.85..1.0).contains(&top1) || dtype == "bf16",
            "{dtype}: top-1 {top1}"
        );
        assert!(kl > 0.0 && kl < 0.05, "{dtype}: mean KL {kl}");
        kl
    };
    let (bf16, int8, w8a8, bf16a) = (kl("bf16"), kl("int8"), kl("w8a8"), kl("bf16a"));
    assert!(
        bf16 < int8 && int8 < w8a8 && bf16 < bf16a && bf16a < w8a8,
        "KL bf16 {bf16}, int8 {int8}, w8a8 {w8a8}, bf16a {bf16a}"
    );
}
