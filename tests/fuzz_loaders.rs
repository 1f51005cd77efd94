//! Structured fuzzing of every loader with proptest: the GGUF reader and importer,
//! the safetensors reader, config.json, tokenizer.json, and tokenizer_config.json
//! with its chat template. Valid tiny files (tests/malformed/fixtures.rs) are
//! truncated, bit-flipped, spliced, given huge counts and lengths, wrong types and
//! deep JSON. The invariant: each load returns `Ok` or a typed `Error` — never a
//! panic — within a time bound, and the whole run stays within a memory bound.
//!
//! `cargo test` runs a few dozen cases per loader (a few seconds); `scripts/fuzz.sh
//! SECONDS` runs batches with fresh seeds until the time is up (`PROPTEST_CASES`
//! sets the batch size).

#[path = "malformed/fixtures.rs"]
mod fixtures;

use fixtures::*;
use kvlab::tokenizer::{Message, Tokenizer};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// The longest one load may take (the slowest valid one takes milliseconds).
const CASE_TIME_LIMIT: Duration = Duration::from_secs(5);
/// Peak resident memory of the whole test process (the fixtures are kilobytes).
const PEAK_RSS_LIMIT_KB: u64 = 2 << 20;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Peak resident set size of this process, from /proc (Linux).
fn peak_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Runs `load`, which must not panic (proptest reports a panic as a failure), and
/// checks the time and memory bounds. Returns whether it succeeded.
fn bounded<T>(what: &str, load: impl FnOnce() -> kvlab::Result<T>) -> bool {
    let start = Instant::now();
    let result = load();
    let elapsed = start.elapsed();
    assert!(
        elapsed < CASE_TIME_LIMIT,
        "{what} took {elapsed:?} ({:?})",
        result.as_ref().err().map(|e| e.to_string())
    );
    let rss = peak_rss_kb();
    assert!(rss < PEAK_RSS_LIMIT_KB, "{what}: peak RSS {rss} kB");
    if let Err(e) = &result {
        // A typed error renders to a non-empty one-line message.
        let msg = e.to_string();
        assert!(!msg.is_empty() && !msg.contains('\n'), "{what}: {msg:?}");
    }
    result.is_ok()
}

/// One edit to a byte string.
#[derive(Debug, Clone)]
enum Mutation {
    Truncate(f64),
    Flip(usize, u8),
    /// Overwrites 8 bytes at a position with an interesting u64 (counts, lengths).
    SetU64(usize, u64),
    /// Replaces a range with other bytes.
    Splice(usize, usize, Vec<u8>),
    /// Copies a range of the input to another position (duplicated structure).
    Duplicate(usize, usize, usize),
}

fn interesting_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(255),
        Just(1 << 31),
        Just(u32::MAX as u64),
        Just(1 << 40),
        Just(1 << 62),
        Just(i64::MAX as u64),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0.0..1.0f64).prop_map(Mutation::Truncate),
        (any::<usize>(), 0u8..8).prop_map(|(p, b)| Mutation::Flip(p, b)),
        (any::<usize>(), interesting_u64()).prop_map(|(p, v)| Mutation::SetU64(p, v)),
        (
            any::<usize>(),
            0usize..16,
            prop::collection::vec(any::<u8>(), 0..16)
        )
            .prop_map(|(p, n, b)| Mutation::Splice(p, n, b)),
        (any::<usize>(), 1usize..64, any::<usize>())
            .prop_map(|(a, n, b)| Mutation::Duplicate(a, n, b)),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = bytes.len().max(1);
        match m {
            Mutation::Truncate(f) => bytes.truncate((bytes.len() as f64 * f) as usize),
            Mutation::Flip(p, bit) => {
                if !bytes.is_empty() {
                    bytes[p % len] ^= 1 << bit;
                }
            }
            Mutation::SetU64(p, v) => {
                if bytes.len() >= 8 {
                    let at = p % (bytes.len() - 7);
                    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
            Mutation::Splice(p, n, new) => {
                let at = p % len.min(bytes.len() + 1).max(1);
                let at = at.min(bytes.len());
                let end = (at + n).min(bytes.len());
                bytes.splice(at..end, new.iter().copied());
            }
            Mutation::Duplicate(a, n, b) => {
                if !bytes.is_empty() {
                    let from = a % bytes.len();
                    let end = (from + n).min(bytes.len());
                    let chunk = bytes[from..end].to_vec();
                    let to = b % (bytes.len() + 1);
                    bytes.splice(to..to, chunk);
                }
            }
        }
    }
    bytes
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..4)
}

/// A JSON value a file could hold where a size or a flag should be.
fn evil_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        interesting_u64().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just(f64::MAX),
            Just(-0.0),
            Just(1e-300),
            Just(-1.0),
            any::<f64>()
        ]
        .prop_map(|f| json!(f)),
        "[a-z<>|/. ]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// `depth` nested arrays: deeper than serde_json's recursion limit when large.
fn deep(depth: usize) -> String {
    "[".repeat(depth) + &"]".repeat(depth)
}

/// A fresh tiny model folder (in a temp dir that lives as long as the guard).
fn model_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let m = root.path().join("m");
    tiny_model_dir(&m);
    (root, m)
}

const CONFIG_KEYS: [&str; 14] = [
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "tie_word_embeddings",
    "model_type",
    "architectures",
    "eos_token_id",
];

/// Loads the model folder and, when that works, runs one token through it.
fn load_and_run(m: &Path) -> kvlab::Result<()> {
    let model = kvlab::loader::load_model(m)?;
    let opts = kvlab::generate::GenerateOptions {
        max_new_tokens: 1,
        path: kvlab::generate::PathKind::Cached,
        sampler: Default::default(),
        eos_ids: vec![],
    };
    kvlab::backend::generate(&model, &[1, 2], &opts, |_| {}).map(drop)
}

/// Loads the tokenizer and renders a short conversation with its template.
fn tokenize_and_render(m: &Path) -> kvlab::Result<()> {
    let tokenizer = Tokenizer::from_dir(m)?;
    let text = tokenizer.apply_chat_template(&[Message::new("user", "hi there")])?;
    tokenizer.encode(&text).map(drop)
}

/// Pieces of Jinja that real templates use, and ones that loop, grow or recurse.
const TEMPLATE_PIECES: [&str; 22] = [
    "{% for m in messages %}",
    "{% endfor %}",
    "{% for i in range(100000) %}",
    "{% if add_generation_prompt %}",
    "{% endif %}",
    "{{ m['content'] }}",
    "{{ m.role }}",
    "<|im_start|>",
    "{% set ns = namespace(s='ab') %}",
    "{% set ns.s = ns.s ~ ns.s %}",
    "{{ ns.s }}",
    "{{ 'x' * 1000000 }}",
    "{{ messages | tojson }}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}",
    "{{ f(0) }}",
    "{{ raise_exception('bad') }}",
    "{{ bos_token }}",
    "{% set x = messages[0]['content'] %}",
    "{{ x * 100000 }}",
    "{{ (messages * 100000) | length }}",
    "{% for",
    "}}",
];

proptest! {
    #![proptest_config(config())]

    #[test]
    fn gguf_reader_and_importer(edits in mutations()) {
        let bytes = mutate(tiny_gguf().to_bytes(), &edits);
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("f.gguf");
        std::fs::write(&file, &bytes).unwrap();
        bounded("GgufFile::from_bytes", || kvlab::gguf::GgufFile::from_bytes(&file, bytes.clone()));
        let out = root.path().join("out");
        let imported = bounded("import_gguf", || {
            kvlab::gguf::import_gguf(&file, &out, kvlab::gguf::OutDtype::F32)
        });
        if imported {
            bounded("load imported", || load_and_run(&out));
            bounded("imported tokenizer", || tokenize_and_render(&out));
        }
    }

    #[test]
    fn gguf_metadata_values(key in prop::sample::select(vec![
        "llama.block_count", "llama.embedding_length", "llama.attention.head_count",
        "llama.attention.head_count_kv", "llama.feed_forward_length", "llama.context_length",
        "llama.rope.dimension_count", "llama.attention.key_length", "llama.vocab_size",
        "tokenizer.ggml.bos_token_id", "tokenizer.chat_template", "general.alignment",
    ]), ty in prop_oneof![Just(4u32), Just(5), Just(6), Just(8), Just(10), Just(11)], value in interesting_u64()) {
        let mut g = tiny_gguf();
        let raw = match ty {
            4..=6 => (value as u32).to_le_bytes().to_vec(),
            8 => gguf_string(&value.to_string()),
            _ => value.to_le_bytes().to_vec(),
        };
        g.raw(key, ty, raw);
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("f.gguf");
        std::fs::write(&file, g.to_bytes()).unwrap();
        let out = root.path().join("out");
        if bounded("import_gguf", || kvlab::gguf::import_gguf(&file, &out, kvlab::gguf::OutDtype::F32)) {
            bounded("load imported", || load_and_run(&out));
        }
    }

    #[test]
    fn safetensors_files(edits in mutations(), header_only in any::<bool>()) {
        let (_root, m) = model_dir();
        let path = m.join("model.safetensors");
        let bytes = std::fs::read(&path).unwrap();
        // Mostly mutate the header (where the structure is); sometimes anywhere.
        let header_end = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let mutated = if header_only {
            let mut head = mutate(bytes[..header_end].to_vec(), &edits);
            head.extend_from_slice(&bytes[header_end..]);
            head
        } else {
            mutate(bytes, &edits)
        };
        std::fs::write(&path, mutated).unwrap();
        bounded("load_model", || load_and_run(&m));
    }

    #[test]
    fn config_json_values(values in prop::collection::vec((prop::sample::select(CONFIG_KEYS.to_vec()), evil_json()), 1..4)) {
        let (_root, m) = model_dir();
        edit_json(&m.join("config.json"), |c| {
            for (key, value) in values {
                c[key] = value;
            }
        });
        bounded("load_model", || load_and_run(&m));
    }

    #[test]
    fn config_json_bytes(edits in mutations(), depth in prop_oneof![Just(0usize), 1usize..200_000]) {
        let (_root, m) = model_dir();
        let path = m.join("config.json");
        let mut bytes = mutate(std::fs::read(&path).unwrap(), &edits);
        if depth > 0 {
            bytes = format!("{{\"hidden_size\": {}}}", deep(depth)).into_bytes();
        }
        std::fs::write(&path, bytes).unwrap();
        bounded("load_model", || load_and_run(&m));
    }

    #[test]
    fn tokenizer_json(edits in mutations(), model in evil_json(), use_model in any::<bool>()) {
        let (_root, m) = model_dir();
        let path = m.join("tokenizer.json");
        if use_model {
            edit_json(&path, |t| t["model"]["vocab"] = model);
        } else {
            let bytes = mutate(std::fs::read(&path).unwrap(), &edits);
            std::fs::write(&path, bytes).unwrap();
        }
        bounded("tokenizer", || tokenize_and_render(&m));
    }

    #[test]
    fn tokenizer_config_and_template(
        pieces in prop::collection::vec(prop::sample::select(TEMPLATE_PIECES.to_vec()), 0..10),
        key in prop::sample::select(vec!["add_bos_token", "bos_token", "eos_token", "chat_template"]),
        value in evil_json(),
        set_value in any::<bool>(),
    ) {
        let (_root, m) = model_dir();
        edit_json(&m.join("tokenizer_config.json"), |c| {
            c["chat_template"] = json!(pieces.concat());
            if set_value {
                c[key] = value;
            }
        });
        bounded("chat template", || tokenize_and_render(&m));
    }
}

/// The fuel and the output cap leave room for real conversations: SmolLM2's own
/// template renders 200 messages of 4 KB each.
#[test]
fn the_real_template_renders_long_conversations() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/smollm2-135m-instruct");
    let tokenizer = Tokenizer::from_dir(&dir).expect("run scripts/fetch-smollm2.sh");
    let long = "word ".repeat(800);
    let messages: Vec<Message> = (0..200)
        .map(|i| Message::new(if i % 2 == 0 { "user" } else { "assistant" }, &long))
        .collect();
    let text = tokenizer.apply_chat_template(&messages).unwrap();
    assert!(text.len() > 200 * long.len(), "{}", text.len());
    assert!(text.ends_with("<|im_start|>assistant\n"), "{text:.100}");
}

/// The valid fixtures load: the mutations above start from working files.
#[test]
fn the_fixtures_load() {
    let (_root, m) = model_dir();
    load_and_run(&m).unwrap();
    tokenize_and_render(&m).unwrap();
}
