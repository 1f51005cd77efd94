//! A corpus of malformed inputs, each run through the real `kvlab` binary as a
//! subprocess under a 4 GiB address-space limit and a timeout: every case must exit
//! with kvlab's error code (not a panic's 101, an abort's SIGABRT or a kill), print
//! the message that names its problem, and do so within the time limit.
//!
//! Each case starts from a valid tiny model (`tests/malformed/fixtures.rs`) and
//! breaks one thing: a truncated or absurd file, a wrong type, a path that escapes
//! the model folder, `/dev/zero` where a file should be, NaN weights, a chat
//! template that never ends.

#[path = "malformed/fixtures.rs"]
mod fixtures;
#[path = "malformed/runner.rs"]
mod runner;

use fixtures::*;
use runner::kvlab;
use serde_json::json;
use std::path::Path;

/// A malformed input: `setup` breaks the valid tiny model in `m` (or writes files
/// next to it) and returns kvlab's arguments; stderr must contain `expect`.
struct Case {
    name: &'static str,
    setup: fn(&Path) -> Vec<String>,
    expect: &'static str,
}

fn s(p: impl AsRef<Path>) -> String {
    p.as_ref().display().to_string()
}

fn generate_args(m: &Path) -> Vec<String> {
    ["generate", "--model", &s(m), "--prompt", "hi there"]
        .into_iter()
        .chain(["--max-new-tokens", "1"])
        .map(String::from)
        .collect()
}

fn chat_args(m: &Path) -> Vec<String> {
    let mut args = generate_args(m);
    args.push("--chat".into());
    args
}

fn with(mut args: Vec<String>, extra: &[&str]) -> Vec<String> {
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

fn config(m: &Path, key: &str, value: serde_json::Value) -> Vec<String> {
    edit_json(&m.join("config.json"), |c| c[key] = value);
    generate_args(m)
}

fn tok_config(m: &Path, key: &str, value: serde_json::Value) -> Vec<String> {
    edit_json(&m.join("tokenizer_config.json"), |c| c[key] = value);
    chat_args(m)
}

fn template(m: &Path, t: &str) -> Vec<String> {
    tok_config(m, "chat_template", json!(t))
}

/// Replaces model.safetensors with a sharded index whose weight_map names `shard`.
fn index(m: &Path, weight_map: serde_json::Value) -> Vec<String> {
    std::fs::rename(
        m.join("model.safetensors"),
        m.join("model-00001-of-00001.safetensors"),
    )
    .unwrap();
    write_json(
        &m.join("model.safetensors.index.json"),
        &json!({ "metadata": {}, "weight_map": weight_map }),
    );
    generate_args(m)
}

fn truncate(path: &Path, keep: f64) {
    let bytes = std::fs::read(path).unwrap();
    std::fs::write(path, &bytes[..(bytes.len() as f64 * keep) as usize]).unwrap();
}

fn import(m: &Path, g: &Gguf) -> Vec<String> {
    let file = m.join("tiny.gguf");
    std::fs::write(&file, g.to_bytes()).unwrap();
    import_file(&file, m)
}

fn import_file(file: &Path, m: &Path) -> Vec<String> {
    vec![
        "import-gguf".into(),
        s(file),
        s(m.parent().unwrap().join("imported")),
    ]
}

fn deep_json(depth: usize) -> String {
    "[".repeat(depth) + &"]".repeat(depth)
}

const NESTED_LOOPS: &str =
    "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}";
const DOUBLING: &str = "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}";

fn cases() -> Vec<Case> {
    vec![
        // ---- config.json ----
        Case {
            name: "config truncated",
            setup: |m| {
                truncate(&m.join("config.json"), 0.5);
                generate_args(m)
            },
            expect: "not a valid config.json",
        },
        Case {
            name: "config not an object",
            setup: |m| {
                std::fs::write(m.join("config.json"), "[1, 2]").unwrap();
                generate_args(m)
            },
            expect: "expected a JSON object",
        },
        Case {
            name: "config 2^40 layers",
            setup: |m| config(m, "num_hidden_layers", json!(1u64 << 40)),
            expect: "num_hidden_layers is 1099511627776, above kvlab's limit",
        },
        Case {
            name: "config 2^62 layers",
            setup: |m| config(m, "num_hidden_layers", json!(1u64 << 62)),
            expect: "num_hidden_layers is 4611686018427387904",
        },
        Case {
            name: "config 2^40 hidden",
            setup: |m| config(m, "hidden_size", json!(1u64 << 40)),
            expect: "hidden_size is 1099511627776",
        },
        Case {
            name: "config 2^40 vocab",
            setup: |m| config(m, "vocab_size", json!(1u64 << 40)),
            expect: "vocab_size is 1099511627776",
        },
        Case {
            name: "config 2^40 context",
            setup: |m| config(m, "max_position_embeddings", json!(1u64 << 40)),
            expect: "max_position_embeddings is 1099511627776",
        },
        Case {
            name: "config 2^40 FFN",
            setup: |m| config(m, "intermediate_size", json!(1u64 << 40)),
            expect: "intermediate_size is 1099511627776",
        },
        Case {
            name: "config 2^30 head_dim",
            setup: |m| config(m, "head_dim", json!(1u64 << 30)),
            expect: "head_dim is 1073741824",
        },
        Case {
            name: "config zero heads",
            setup: |m| config(m, "num_attention_heads", json!(0)),
            expect: "num_attention_heads is 0",
        },
        Case {
            name: "config layers as a string",
            setup: |m| config(m, "num_hidden_layers", json!("1")),
            expect: "invalid type: string",
        },
        Case {
            name: "config negative layers",
            setup: |m| config(m, "num_hidden_layers", json!(-1)),
            expect: "invalid value: integer `-1`",
        },
        Case {
            name: "config NaN-ish eps",
            setup: |m| config(m, "rms_norm_eps", json!(-1.0)),
            expect: "rms_norm_eps and rope_theta must be positive",
        },
        Case {
            name: "config model_type mamba",
            setup: |m| config(m, "model_type", json!("mamba")),
            expect: "model_type is `mamba`; kvlab runs Llama-family models and Gemma 3 only",
        },
        Case {
            name: "config architectures mamba",
            setup: |m| config(m, "architectures", json!(["MambaForCausalLM"])),
            expect: "architectures names `MambaForCausalLM`",
        },
        Case {
            name: "config more layers than the weights hold",
            setup: |m| config(m, "num_hidden_layers", json!(64)),
            expect: "but the weight files hold",
        },
        Case {
            name: "config deep JSON",
            setup: |m| {
                std::fs::write(m.join("config.json"), deep_json(100_000)).unwrap();
                generate_args(m)
            },
            expect: "recursion limit exceeded",
        },
        Case {
            name: "config is /dev/zero",
            setup: |m| {
                symlink("/dev/zero", &m.join("config.json"));
                generate_args(m)
            },
            expect: "is not a regular file",
        },
        Case {
            name: "config larger than its cap",
            setup: |m| {
                std::fs::File::options()
                    .write(true)
                    .open(m.join("config.json"))
                    .unwrap()
                    .set_len(17 << 20)
                    .unwrap();
                generate_args(m)
            },
            expect: "is more than kvlab accepts for the config.json",
        },
        Case {
            name: "config shape disagrees with the weights",
            setup: |m| config(m, "intermediate_size", json!(48)),
            expect: "has shape [96, 32], but config.json implies [48, 32]",
        },
        // ---- model.safetensors ----
        Case {
            name: "weights truncated",
            setup: |m| {
                truncate(&m.join("model.safetensors"), 0.7);
                generate_args(m)
            },
            expect: "the header declares",
        },
        Case {
            name: "weights header length 2^60",
            setup: |m| {
                let p = m.join("model.safetensors");
                let mut b = std::fs::read(&p).unwrap();
                b[..8].copy_from_slice(&(1u64 << 60).to_le_bytes());
                std::fs::write(&p, b).unwrap();
                generate_args(m)
            },
            expect: "the header claims 1152921504606846976 bytes",
        },
        Case {
            name: "weights header not JSON",
            setup: |m| {
                let p = m.join("model.safetensors");
                let mut b = std::fs::read(&p).unwrap();
                b[8] = b'#';
                std::fs::write(&p, b).unwrap();
                generate_args(m)
            },
            expect: "the header is not valid JSON",
        },
        Case {
            name: "weights empty file",
            setup: |m| {
                std::fs::write(m.join("model.safetensors"), b"").unwrap();
                generate_args(m)
            },
            expect: "0 bytes is too short for the 8-byte header length",
        },
        Case {
            name: "weights are /dev/zero",
            setup: |m| {
                symlink("/dev/zero", &m.join("model.safetensors"));
                generate_args(m)
            },
            expect: "is not a regular file",
        },
        Case {
            name: "weights are a folder",
            setup: |m| {
                std::fs::remove_file(m.join("model.safetensors")).unwrap();
                std::fs::create_dir(m.join("model.safetensors")).unwrap();
                generate_args(m)
            },
            expect: "is a folder, but the weights must be a file",
        },
        Case {
            name: "NaN weight",
            setup: |m| {
                edit_weights(m, |t| {
                    poke_f32(t, "model.layers.0.mlp.up_proj.weight", 5, f32::NAN)
                });
                generate_args(m)
            },
            expect: "tensor `model.layers.0.mlp.up_proj.weight` holds NaN at index 5",
        },
        Case {
            name: "inf weight",
            setup: |m| {
                edit_weights(m, |t| {
                    poke_f32(t, "model.norm.weight", 3, f32::NEG_INFINITY)
                });
                generate_args(m)
            },
            expect: "tensor `model.norm.weight` holds -inf at index 3",
        },
        Case {
            name: "integer weight dtype",
            setup: |m| {
                edit_weights(m, |t| {
                    let x = t.iter_mut().find(|x| x.0 == "model.norm.weight").unwrap();
                    x.1 = safetensors::Dtype::I32;
                });
                generate_args(m)
            },
            expect: "is stored as I32",
        },
        Case {
            name: "missing tensor",
            setup: |m| {
                edit_weights(m, |t| {
                    t.retain(|x| x.0 != "model.layers.0.self_attn.o_proj.weight")
                });
                generate_args(m)
            },
            expect: "tensor `model.layers.0.self_attn.o_proj.weight` is missing",
        },
        Case {
            name: "no weights at all",
            setup: |m| {
                std::fs::remove_file(m.join("model.safetensors")).unwrap();
                generate_args(m)
            },
            expect: "no model.safetensors",
        },
        // ---- model.safetensors.index.json ----
        Case {
            name: "shard path escapes with ..",
            setup: |m| index(m, json!({ "model.norm.weight": "../../../../etc/passwd" })),
            expect: "names `../../../../etc/passwd`, outside the model folder",
        },
        Case {
            name: "shard path is absolute /dev/zero",
            setup: |m| index(m, json!({ "model.norm.weight": "/dev/zero" })),
            expect: "names `/dev/zero`, outside the model folder",
        },
        Case {
            name: "shard name not a string",
            setup: |m| index(m, json!({ "model.norm.weight": 7 })),
            expect: "is 7, not a file name",
        },
        Case {
            name: "shard is a /dev/zero symlink",
            setup: |m| {
                let args = index(m, json!({ "model.norm.weight": "zero.safetensors" }));
                symlink("/dev/zero", &m.join("zero.safetensors"));
                args
            },
            expect: "zero.safetensors: is not a regular file",
        },
        Case {
            name: "index not JSON",
            setup: |m| {
                let args = index(m, json!({}));
                std::fs::write(m.join("model.safetensors.index.json"), "{").unwrap();
                args
            },
            expect: "not a valid safetensors index (JSON)",
        },
        Case {
            name: "index without weight_map",
            setup: |m| {
                let args = index(m, json!({}));
                write_json(
                    &m.join("model.safetensors.index.json"),
                    &json!({"metadata": {}}),
                );
                args
            },
            expect: "no `weight_map` object",
        },
        Case {
            name: "index with an empty weight_map",
            setup: |m| index(m, json!({})),
            expect: "`weight_map` is empty",
        },
        // ---- tokenizer.json ----
        Case {
            name: "tokenizer truncated",
            setup: |m| {
                truncate(&m.join("tokenizer.json"), 0.5);
                generate_args(m)
            },
            expect: "tokenizer.json: not valid JSON: EOF while parsing",
        },
        Case {
            name: "tokenizer is /dev/zero",
            setup: |m| {
                symlink("/dev/zero", &m.join("tokenizer.json"));
                generate_args(m)
            },
            expect: "tokenizer.json: is not a regular file",
        },
        Case {
            name: "tokenizer deep JSON",
            setup: |m| {
                let text = format!(
                    "{{\"version\": \"1.0\", \"normalizer\": {}}}",
                    deep_json(100_000)
                );
                std::fs::write(m.join("tokenizer.json"), text).unwrap();
                generate_args(m)
            },
            expect: "tokenizer.json: ",
        },
        Case {
            name: "tokenizer decoder JSON broken (the tokenizers crate panicked here)",
            setup: |m| {
                let text = serde_json::to_string_pretty(&tokenizer_json())
                    .unwrap()
                    .replace("\"decoder\": null", "\"decoder\": nulm");
                std::fs::write(m.join("tokenizer.json"), text).unwrap();
                generate_args(m)
            },
            expect: "tokenizer.json: not valid JSON: expected ident",
        },
        Case {
            name: "tokenizer top level not an object",
            setup: |m| {
                std::fs::write(m.join("tokenizer.json"), deep_json(3)).unwrap();
                generate_args(m)
            },
            expect: "expected struct Tokenizer",
        },
        Case {
            name: "tokenizer model of a wrong type",
            setup: |m| {
                edit_json(&m.join("tokenizer.json"), |t| t["model"] = json!(12));
                generate_args(m)
            },
            expect: "tokenizer.json",
        },
        Case {
            name: "tokenizer not UTF-8",
            setup: |m| {
                std::fs::write(m.join("tokenizer.json"), [0xff, 0xfe, 0x00]).unwrap();
                generate_args(m)
            },
            expect: "tokenizer.json",
        },
        // ---- tokenizer_config.json and its chat template ----
        Case {
            name: "tokenizer_config truncated",
            setup: |m| {
                truncate(&m.join("tokenizer_config.json"), 0.5);
                generate_args(m)
            },
            expect: "not a valid tokenizer_config.json",
        },
        Case {
            name: "tokenizer_config is /dev/zero",
            setup: |m| {
                symlink("/dev/zero", &m.join("tokenizer_config.json"));
                generate_args(m)
            },
            expect: "tokenizer_config.json: is not a regular file",
        },
        Case {
            name: "add_bos_token with an unknown bos_token",
            setup: |m| {
                edit_json(&m.join("tokenizer_config.json"), |c| {
                    c["add_bos_token"] = json!(true);
                    c["bos_token"] = json!("<nope>");
                });
                generate_args(m)
            },
            expect: "bos_token `<nope>` is not in tokenizer.json's vocabulary",
        },
        Case {
            name: "add_bos_token not a bool",
            setup: |m| tok_config(m, "add_bos_token", json!("yes")),
            expect: "`add_bos_token` is \"yes\", not true or false",
        },
        Case {
            name: "template with nested range(100000) loops",
            setup: |m| template(m, NESTED_LOOPS),
            expect: "the template ran out of fuel",
        },
        Case {
            name: "template doubling a string 64 times",
            setup: |m| template(m, DOUBLING),
            expect: "the template ran out of fuel",
        },
        Case {
            name: "template with endless recursion",
            setup: |m| template(m, "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
            expect: "chat template:",
        },
        Case {
            name: "template that does not parse",
            setup: |m| template(m, "{% for %}"),
            expect: "chat template: syntax error",
        },
        Case {
            name: "template raising an exception",
            setup: |m| template(m, "{{ raise_exception('no system role') }}"),
            expect: "no system role",
        },
        Case {
            name: "template list without a default",
            setup: |m| {
                tok_config(
                    m,
                    "chat_template",
                    json!([{"name": "tool_use", "template": "x"}]),
                )
            },
            expect: "without one named \"default\"",
        },
        Case {
            name: "template list entry malformed",
            setup: |m| tok_config(m, "chat_template", json!([{"name": 3}])),
            expect: "is not a {\"name\": ..., \"template\": ...} object",
        },
        Case {
            name: "template not a string",
            setup: |m| tok_config(m, "chat_template", json!(42)),
            expect: "chat_template is 42, not a template string",
        },
        // ---- the request ----
        Case {
            name: "negative temperature",
            setup: |m| with(generate_args(m), &["--temperature=-1"]),
            expect: "give a finite number >= 0",
        },
        Case {
            name: "NaN temperature",
            setup: |m| with(generate_args(m), &["--temperature", "NaN"]),
            expect: "give a finite number >= 0",
        },
        Case {
            name: "infinite temperature",
            setup: |m| with(generate_args(m), &["--temperature", "inf"]),
            expect: "give a finite number >= 0",
        },
        Case {
            name: "max_new_tokens = usize::MAX",
            setup: |m| {
                let mut a = generate_args(m);
                a.pop();
                a.push(usize::MAX.to_string());
                a
            },
            expect: "exceeds the model's context of 256 tokens",
        },
        // ---- GGUF ----
        Case {
            name: "gguf text file",
            setup: |m| {
                std::fs::write(m.join("x.gguf"), "hello").unwrap();
                import_file(&m.join("x.gguf"), m)
            },
            expect: "bad magic",
        },
        Case {
            name: "gguf truncated",
            setup: |m| {
                let b = tiny_gguf().to_bytes();
                std::fs::write(m.join("t.gguf"), &b[..b.len() / 3]).unwrap();
                import_file(&m.join("t.gguf"), m)
            },
            expect: "truncated",
        },
        Case {
            name: "gguf is /dev/zero",
            setup: |m| import_file(Path::new("/dev/zero"), m),
            expect: "is not a regular file",
        },
        Case {
            name: "gguf 2^40 blocks",
            setup: |m| import(m, tiny_gguf().u64("llama.block_count", 1 << 40)),
            expect: "num_hidden_layers is 1099511627776",
        },
        Case {
            name: "gguf zero heads",
            setup: |m| import(m, tiny_gguf().u32("llama.attention.head_count", 0)),
            expect: "num_attention_heads is 0",
        },
        Case {
            name: "gguf 2^40 embedding",
            setup: |m| import(m, tiny_gguf().u64("llama.embedding_length", 1 << 40)),
            expect: "hidden_size is 1099511627776",
        },
        Case {
            name: "gguf block_count as a string",
            setup: |m| import(m, tiny_gguf().str("llama.block_count", "1")),
            expect: "not a non-negative integer",
        },
        Case {
            name: "gguf architecture mamba",
            setup: |m| import(m, tiny_gguf().str("general.architecture", "mamba")),
            expect: "kvlab imports `llama` and `gemma3` models only",
        },
        Case {
            name: "gguf overlapping tensors",
            setup: |m| {
                let mut g = tiny_gguf();
                let n = g.tensors.len();
                let mut o: Vec<u64> = vec![0; n];
                let mut at = 0;
                for (i, t) in g.tensors.iter().enumerate() {
                    o[i] = at;
                    at = (at + t.3.len() as u64).div_ceil(32) * 32;
                }
                o[5] = o[4];
                g.offsets = Some(o);
                import(m, &g)
            },
            expect: "overlap in the data section",
        },
        Case {
            name: "gguf chat template not a string",
            setup: |m| import(m, tiny_gguf().u32("tokenizer.chat_template", 7)),
            expect: "`tokenizer.chat_template` holds a",
        },
        Case {
            name: "gguf NaN weight",
            setup: |m| import(m, tiny_gguf().poke("blk.0.ffn_up.weight", 9, f32::NAN)),
            expect: "tensor `blk.0.ffn_up.weight` holds NaN at index 9",
        },
        Case {
            name: "gguf 2^60 tensors claimed",
            setup: |m| {
                let mut b = tiny_gguf().to_bytes();
                b[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
                std::fs::write(m.join("c.gguf"), b).unwrap();
                import_file(&m.join("c.gguf"), m)
            },
            expect: "cannot fit",
        },
        Case {
            name: "gguf evil template reaches --chat",
            setup: |m| {
                let mut g = tiny_gguf();
                g.str("tokenizer.chat_template", NESTED_LOOPS);
                std::fs::write(m.join("e.gguf"), g.to_bytes()).unwrap();
                let out = m.join("evil");
                kvlab::gguf::import_gguf(&m.join("e.gguf"), &out, kvlab::gguf::OutDtype::F32)
                    .unwrap();
                chat_args(&out)
            },
            expect: "the template ran out of fuel",
        },
    ]
}

#[test]
fn every_malformed_input_is_a_clean_error() {
    let cases = cases();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let root = tempfile::tempdir().unwrap();
        let m = root.path().join("m");
        tiny_model_dir(&m);
        let args = (case.setup)(&m);
        let run = kvlab(&args, root.path());
        let clean_exit = run.code == Some(1) && run.signal.is_none() && !run.timed_out;
        if !clean_exit || !run.stderr.contains(case.expect) {
            failures.push(format!(
                "{}: exit {:?} signal {:?} timed out {} after {:.1?}\n  expected stderr to contain: {}\n  stderr: {}\n  stdout: {}",
                case.name,
                run.code,
                run.signal,
                run.timed_out,
                run.elapsed,
                case.expect,
                run.stderr.trim(),
                run.stdout.chars().take(300).collect::<String>()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// The fixtures themselves are valid: without this, every case above could pass
/// for the wrong reason.
#[test]
fn the_unbroken_fixtures_work() {
    let root = tempfile::tempdir().unwrap();
    let m = root.path().join("m");
    tiny_model_dir(&m);
    for args in [generate_args(&m), chat_args(&m)] {
        let run = kvlab(&args, root.path());
        assert_eq!(run.code, Some(0), "{}", run.stderr);
    }
    let file = root.path().join("ok.gguf");
    std::fs::write(&file, tiny_gguf().to_bytes()).unwrap();
    let run = kvlab(&import_file(&file, &m), root.path());
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let imported = root.path().join("imported");
    let run = kvlab(
        &[
            "generate",
            "--model",
            &s(&imported),
            "--prompt",
            "ab a",
            "--max-new-tokens",
            "2",
        ]
        .map(String::from),
        root.path(),
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
}

/// `--temperature 1e-38` used to overflow `logits / T` to inf, give NaN
/// probabilities and return the *least* likely token. Now a tiny temperature is
/// the greedy limit: the same tokens as `--temperature 0`.
#[test]
fn a_tiny_temperature_is_greedy() {
    let root = tempfile::tempdir().unwrap();
    let m = root.path().join("m");
    tiny_model_dir(&m);
    let ids = |temperature: &str| -> serde_json::Value {
        let mut args = generate_args(&m);
        args.pop();
        args.extend(["8", "--json", "--temperature", temperature, "--seed", "3"].map(String::from));
        let run = kvlab(&args, root.path());
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        serde_json::from_str::<serde_json::Value>(&run.stdout).unwrap()["generated_ids"].clone()
    };
    let greedy = ids("0");
    assert_eq!(ids("1e-38"), greedy);
    assert_eq!(ids("1e-30"), greedy);
}
