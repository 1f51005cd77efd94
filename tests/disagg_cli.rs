//! `kvlab bench-disagg`: bad input is one line; the JSON report has both modes, the same
//! tokens in each, and exactly the bytes the wire format says moved.

mod common;

use common::cli::{fails_with, json};

#[test]
fn bench_disagg_refuses_bad_input_in_one_line() {
    let base = ["bench-disagg", "--random-weights"];
    let with = |extra: &[&'static str]| [&base[..], extra].concat();
    fails_with(&with(&["--requests", "0"]), "--requests");
    fails_with(&with(&["--rate", "0"]), "--rate");
    fails_with(&with(&["--prompt-mix", "huge:1"]), "huge");
    // A window evicts per pass: a shared pool cannot hold it (the engine's one line).
    fails_with(&with(&["--kv", "window", "--window", "64"]), "--kv window");
    // A window per query gives prompt blocks back while it prefills: nothing to ship.
    fails_with(
        &with(&["--kv", "sliding", "--window", "64"]),
        "a KV transfer carries every prompt row",
    );
}

#[test]
fn bench_disagg_json_moves_the_bytes_the_format_says() {
    // f32 rows, then int8 codes and scales: each pool ships its own bytes per position.
    // SmolLM2's shape: 30 layers, 3 KV heads of 64.
    let f32_row = 2 * 3 * 64 * 4;
    let int8_row = 2 * (3 * 64 + 3 * 4); // codes, one f32 scale per head
    for (kv, name, per_layer) in [("full", "full", f32_row), ("int8", "int8", int8_row)] {
        let r = json(&[
            "bench-disagg",
            "--random-weights",
            "--requests",
            "3",
            "--rate",
            "50",
            "--prompt-mix",
            "short:1",
            "--dtype",
            "bf16",
            "--block-size",
            "8",
            "--kv",
            kv,
            "--json",
        ]);
        assert_eq!(r["tokens_identical"], true, "{r}");
        assert_eq!(r["weights"], "bf16 in panels");
        assert_eq!(r["options"]["block_size"], 8);
        assert_eq!(r["kv"], name);
        assert_eq!(r["kv_bytes_per_prompt_token"], 30 * per_layer);
        let prompt_tokens = r["prompt_tokens"].as_u64().unwrap();
        let per_token = r["kv_bytes_per_prompt_token"].as_u64().unwrap();
        // Per request: a 16-byte frame header, the 48-byte transfer header and the
        // element's name; per prompt token: its id (4 bytes) and its stored K and V rows.
        let expected = 3 * (16 + 48 + name.len() as u64) + prompt_tokens * (4 + per_token);
        assert_eq!(r["disaggregated"]["bytes_moved"], expected, "--kv {kv}");
        assert_eq!(r["colocated"]["bytes_moved"], 0);
        for mode in ["colocated", "disaggregated"] {
            let m = &r[mode];
            assert_eq!(m["ttft_ms"]["samples"], 3, "{mode}");
            assert!(m["output_tokens_per_s"].as_f64().unwrap() > 0.0, "{mode}");
        }
        assert!(r["machine"].as_str().unwrap().contains("threads"));
    }
}
