//! The command-line half of the malformed-input corpus (issue 13): sizes a user can
//! type (0, usize::MAX, 10^10, 2^62), values that do not make sense, paths that are
//! not what the flag wants, and a stdout closed before kvlab writes. Each case runs
//! the real binary through `tests/malformed/runner.rs` (4 GiB address space, 30 s) and
//! must exit with its documented code (1 bad input, 2 usage, 141 closed stdout),
//! without a panic, an abort or a kill, with the message that names the problem.
//! Together with `tests/malformed.rs` the corpus holds more than 100 cases.

#[path = "malformed/fixtures.rs"]
mod fixtures;
#[path = "malformed/runner.rs"]
mod runner;

use fixtures::*;
use runner::{kvlab, kvlab_with, Stdout};
use serde_json::json;
use std::path::Path;

const MAX: &str = "18446744073709551615"; // usize::MAX
const TWO_62: &str = "4611686018427387904";

/// One command line: `setup` gets a valid tiny model folder `m` (it may break it) and
/// returns kvlab's arguments.
struct Case {
    name: &'static str,
    setup: fn(&Path) -> Vec<String>,
    stdin: &'static str,
    stdout: Stdout,
    code: i32,
    /// A substring of stderr; for a closed stdout, stderr must instead hold no error
    /// (progress lines, which go to stderr, may be there).
    expect: &'static str,
}

/// Bad input: exit 1 and `expect` on stderr.
fn bad(name: &'static str, setup: fn(&Path) -> Vec<String>, expect: &'static str) -> Case {
    Case {
        name,
        setup,
        stdin: "",
        stdout: Stdout::Captured,
        code: 1,
        expect,
    }
}

/// `kvlab chat` with `stdin` as the user's messages.
fn chat(
    name: &'static str,
    setup: fn(&Path) -> Vec<String>,
    stdin: &'static str,
    expect: &'static str,
) -> Case {
    Case {
        stdin,
        ..bad(name, setup, expect)
    }
}

/// A usage error clap reports: exit 2.
fn usage(name: &'static str, setup: fn(&Path) -> Vec<String>, expect: &'static str) -> Case {
    Case {
        code: 2,
        ..bad(name, setup, expect)
    }
}

/// stdout closed before the first write: exit 141, no error on stderr.
fn closed(name: &'static str, setup: fn(&Path) -> Vec<String>, stdin: &'static str) -> Case {
    Case {
        name,
        setup,
        stdin,
        stdout: Stdout::Closed,
        code: 141,
        expect: "",
    }
}

fn s(p: impl AsRef<Path>) -> String {
    p.as_ref().display().to_string()
}

/// `kvlab CMD --model m EXTRA...`.
fn on(cmd: &str, m: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec![cmd.to_string(), "--model".into(), s(m)];
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// `kvlab ARGS...`, no model folder.
fn plain(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// `kvlab generate` on the tiny model, one new token, then `extra`.
fn generate(m: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = on(
        "generate",
        m,
        &["--prompt", "hi there", "--max-new-tokens", "1"],
    );
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// A config.json of `2^62` layers (the divide-by-zero in the paged cache).
fn huge_layers(m: &Path) -> &Path {
    edit_json(&m.join("config.json"), |c| {
        c["num_hidden_layers"] = json!(1u64 << 62)
    });
    m
}

fn no_chat_template(m: &Path) -> &Path {
    edit_json(&m.join("tokenizer_config.json"), |c| {
        c.as_object_mut().unwrap().remove("chat_template");
    });
    m
}

fn kv(extra: &[&str]) -> Vec<String> {
    let mut args = plain(&[
        "kv-size",
        "--layers",
        "32",
        "--kv-heads",
        "32",
        "--head-dim",
        "128",
    ]);
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

fn cases() -> Vec<Case> {
    let over_context = "lower --max-new-tokens to at most";
    vec![
        // ---- generate: sizes ----
        bad("generate --max-new-tokens usize::MAX", |m| on("generate", m, &["--prompt", "hi", "--max-new-tokens", MAX]), over_context),
        bad("generate --max-new-tokens 0", |m| on("generate", m, &["--prompt", "hi", "--max-new-tokens", "0"]), "max_new_tokens must be at least 1"),
        bad("generate --prompt-len 10^10 (40 GB of ids)", |m| on("generate", m, &["--prompt-len", "10000000000"]), "--prompt-len 10000000000 is out of range"),
        bad("generate --prompt-len usize::MAX", |m| on("generate", m, &["--prompt-len", MAX]), "give --prompt-len between 1 and 256"),
        bad("generate --prompt-len 0", |m| on("generate", m, &["--prompt-len", "0"]), "--prompt-len 0 is out of range"),
        bad("generate: a prompt that fills the context", |m| on("generate", m, &["--prompt-len", "256"]), "the prompt alone fills the context: shorten the prompt"),
        bad("random weights: --prompt-len 10^10", |_| plain(&["generate", "--random-weights", "--prompt-len", "10000000000"]), "give --prompt-len between 1 and 8192"),
        bad("random weights: --max-new-tokens usize::MAX", |_| plain(&["generate", "--random-weights", "--prompt-len", "4", "--max-new-tokens", MAX]), "lower --max-new-tokens to at most 8188"),
        // ---- generate: values ----
        bad("--temperature -1 (a negative number as a value)", |m| generate(m, &["--temperature", "-1"]), "--temperature -1: give a finite number >= 0"),
        bad("--top-p -0.5", |m| generate(m, &["--top-p", "-0.5"]), "--top-p -0.5: give a number in (0, 1]"),
        bad("--top-p 0", |m| generate(m, &["--top-p", "0"]), "--top-p 0: give a number in (0, 1]"),
        bad("--top-p 1.5", |m| generate(m, &["--top-p", "1.5"]), "--top-p 1.5: give a number in (0, 1]"),
        bad("--chat on a model without a chat template", |m| generate(no_chat_template(m), &["--chat"]), "drop --chat, or point --model at an instruct model"),
        // ---- generate: paths ----
        bad("--model is a file", |m| generate(&m.join("config.json"), &[]), "is a file, not a model folder: point --model at the folder"),
        bad("--model does not exist", |m| generate(&m.join("nope"), &[]), "not found"),
        bad("--prompt-file /dev/zero", |m| on("generate", m, &["--prompt-file", "/dev/zero"]), "is not a regular file"),
        bad("--prompt-file is a folder", |m| on("generate", m, &["--prompt-file", &s(m)]), "is a folder, but the prompt file must be a file"),
        bad("--prompt-file larger than the cap (sparse)", |m| {
            let f = std::fs::File::create(m.join("big.txt")).unwrap();
            f.set_len(kvlab::limits::MAX_PROMPT_BYTES + 1).unwrap();
            on("generate", m, &["--prompt-file", &s(m.join("big.txt"))])
        }, "is more than kvlab accepts for the prompt file"),
        bad("--prompt-file not UTF-8", |m| {
            std::fs::write(m.join("bin.txt"), [0x68, 0x69, 0xff, 0xfe]).unwrap();
            on("generate", m, &["--prompt-file", &s(m.join("bin.txt"))])
        }, "the prompt file is not UTF-8 text"),
        bad("--prompt-file missing", |m| on("generate", m, &["--prompt-file", &s(m.join("nope.txt"))]), "nope.txt"),
        bad("kv-size --params 0", |_| plain(&["kv-size", "--layers", "2", "--kv-heads", "2", "--head-dim", "8", "--seq-len", "4", "--params", "0"]), "--params 0 is too small"),
        bad("kv-size --params u64::MAX", |_| plain(&["kv-size", "--layers", "2", "--kv-heads", "2", "--head-dim", "8", "--seq-len", "4", "--params", MAX]), "overflows a 64-bit byte count: give the real parameter count"),
        bad("kv-size --measure without a model", |_| plain(&["kv-size", "--layers", "2", "--kv-heads", "2", "--head-dim", "8", "--seq-len", "4", "--measure"]), "--measure fills the cache kvlab builds for a model: give --model DIR"),
        bad("kv-size --measure past its bound", |m| on("kv-size", m, &["--seq-len", "100000000", "--measure"]), "give a smaller --seq-len"),
        bad("gqa --sweep with one context", |_| plain(&["gqa", "--sweep", "512"]), "give at least two contexts between 1 and 8191"),
        bad("gqa --sweep past the context", |_| plain(&["gqa", "--sweep", "1,9000"]), "give at least two contexts between 1 and 8191"),
        // ---- compare, trace, demo ----
        bad("compare --max-new-tokens usize::MAX", |m| on("compare", m, &["--prompt", "hi", "--max-new-tokens", MAX]), over_context),
        bad("compare --prompt-len usize::MAX", |m| on("compare", m, &["--prompt-len", MAX]), "--prompt-len 18446744073709551615 is out of range"),
        bad("compare --impl textbook --device cuda", |m| on("compare", m, &["--prompt", "hi", "--impl", "textbook", "--device", "cuda"]), "--impl textbook and --impl learner run the f32 weights as loaded, on the CPU: drop --device, --dtype and --layout"),
        bad("generate --impl textbook --cache paged", |m| on("generate", m, &["--prompt", "hi", "--impl", "textbook", "--cache", "paged"]), "--impl textbook keeps the textbook's plain cache"),
        bad("generate --impl learner --kv int8", |m| on("generate", m, &["--prompt", "hi", "--impl", "learner", "--kv", "int8"]), "--impl learner runs your own caches: exercise 10's (the default) or, with --cache paged"),
        bad("generate --impl textbook --speculative ngram", |m| on("generate", m, &["--prompt", "hi", "--impl", "textbook", "--speculative", "ngram"]), "--speculative runs on the engine only: drop --impl textbook"),
        bad("compare --ttft-rounds 0", |m| on("compare", m, &["--prompt", "hi", "--max-new-tokens", "2", "--ttft-rounds", "0"]), "--ttft-rounds 0: give 1 to 100"),
        bad("compare --ttft-rounds usize::MAX", |m| on("compare", m, &["--prompt", "hi", "--max-new-tokens", "2", "--ttft-rounds", MAX]), "--ttft-rounds 18446744073709551615: give 1 to 100"),
        bad("compare --temperature -1", |m| on("compare", m, &["--prompt", "hi", "--max-new-tokens", "2", "--temperature", "-1"]), "--temperature -1"),
        bad("trace --max-new-tokens usize::MAX", |m| on("trace", m, &["--prompt", "hi", "--max-new-tokens", MAX, "--out", &s(m.join("t"))]), over_context),
        bad("trace --prompt-len 10^10", |m| on("trace", m, &["--prompt-len", "10000000000", "--out", &s(m.join("t"))]), "--prompt-len 10000000000 is out of range"),
        bad("demo --max-new-tokens usize::MAX", |m| on("demo", m, &["--max-new-tokens", MAX]), over_context),
        bad("demo --max-new-tokens 0", |m| on("demo", m, &["--max-new-tokens", "0"]), "max_new_tokens must be at least 1"),
        // ---- bench ----
        bad("bench --contexts usize::MAX", |m| on("bench", m, &["--prefill", "4", "--contexts", MAX]), "--contexts 18446744073709551615: every length must be between 1 and 255"),
        bad("bench --contexts 0 (not 'the prompt is empty')", |m| on("bench", m, &["--prefill", "4", "--contexts", "0"]), "--contexts 0: every length must be between 1 and 255"),
        bad("bench --prefill usize::MAX", |m| on("bench", m, &["--prefill", MAX, "--contexts", "4"]), "--prefill 18446744073709551615: every length"),
        bad("bench --prefill 0", |m| on("bench", m, &["--prefill", "0", "--contexts", "4"]), "--prefill 0: every length"),
        bad("bench --reps 0", |m| on("bench", m, &["--reps", "0"]), "give --reps between 1 and 1000"),
        bad("bench --reps usize::MAX", |m| on("bench", m, &["--reps", MAX]), "give --reps between 1 and 1000"),
        // ---- bench-cache ----
        bad("bench-cache --contexts usize::MAX", |m| on("bench-cache", m, &["--contexts", MAX, "--shared-len", "0"]), "contexts must be between 1 and 255"),
        bad("bench-cache --shared-len usize::MAX", |m| on("bench-cache", m, &["--contexts", "4", "--shared-len", MAX]), "--shared-len + --suffix-len must fit the context"),
        bad("bench-cache --suffix-len usize::MAX", |m| on("bench-cache", m, &["--contexts", "4", "--shared-len", "4", "--suffix-len", MAX]), "--shared-len + --suffix-len must fit the context"),
        bad("bench-cache --reps 0", |m| on("bench-cache", m, &["--reps", "0"]), "give --reps between 1 and 1000"),
        // ---- prefix ----
        bad("prefix --shared-len usize::MAX", |m| on("prefix", m, &["--shared-len", MAX]), "--shared-len 18446744073709551615 + --suffix-len 16 add up to more than a 64-bit count"),
        bad("prefix --suffix-len usize::MAX", |m| on("prefix", m, &["--shared-len", "4", "--suffix-len", MAX]), "add up to more than a 64-bit count"),
        bad("prefix --requests usize::MAX", |m| on("prefix", m, &["--requests", MAX, "--shared-len", "4"]), "give --requests between 1 and 1024"),
        bad("prefix --requests 0", |m| on("prefix", m, &["--requests", "0", "--shared-len", "4"]), "give --requests between 1 and 1024"),
        bad("prefix: shared + suffix over the context (not 'at most 0')", |m| on("prefix", m, &["--shared-len", "300"]), "lower --shared-len or --suffix-len"),
        bad("prefix --max-new-tokens usize::MAX", |m| on("prefix", m, &["--shared-len", "4", "--max-new-tokens", MAX]), over_context),
        bad("prefix --max-new-tokens 0", |m| on("prefix", m, &["--shared-len", "4", "--max-new-tokens", "0"]), "--max-new-tokens 0 is too small"),
        // ---- chat ----
        bad("chat --model is a file", |m| on("chat", &m.join("config.json"), &[]), "is a file, not a model folder"),
        bad("chat on a model without a chat template (no 'drop --chat')", |m| on("chat", no_chat_template(m), &[]), "kvlab chat renders every turn with it: point --model at an instruct model"),
        chat("chat --max-new-tokens usize::MAX", |m| on("chat", m, &["--max-new-tokens", MAX]), "hi\n", "lower --max-new-tokens or start a new chat"),
        chat("chat --max-context over the turn", |m| on("chat", m, &["--max-context", "8", "--max-new-tokens", "4"]), "hi there\n", "raise --max-context (the model takes 256)"),
        bad("chat --max-context 1", |m| on("chat", m, &["--max-context", "1"]), "--max-context 1 is too small"),
        bad("chat --max-new-tokens 0", |m| on("chat", m, &["--max-new-tokens", "0"]), "--max-new-tokens 0 is too small"),
        chat("chat --temperature -1", |m| on("chat", m, &["--temperature", "-1"]), "hi\n", "--temperature -1"),
        // ---- kv-size ----
        bad("kv-size --seq-len 2^62 (was '0 bytes')", |_| kv(&["--seq-len", TWO_62]), "overflows a 64-bit byte count"),
        bad("kv-size --batch usize::MAX (was a wrapped number)", |_| kv(&["--seq-len", "10", "--batch", MAX]), "overflows a 64-bit byte count"),
        bad("kv-size --batch 0", |_| kv(&["--seq-len", "10", "--batch", "0"]), "--batch 0 is too small"),
        bad("kv-size --seq-len 0", |_| kv(&["--seq-len", "0"]), "--seq-len 0 is too small"),
        bad("kv-size --layers 0", |_| plain(&["kv-size", "--layers", "0", "--kv-heads", "2", "--head-dim", "64", "--seq-len", "1"]), "--layers 0 is out of range"),
        bad("kv-size --layers usize::MAX", |_| plain(&["kv-size", "--layers", MAX, "--kv-heads", "2", "--head-dim", "64", "--seq-len", "1"]), "give --layers between 1 and 1024"),
        bad("kv-size --kv-heads 2^62", |_| plain(&["kv-size", "--layers", "2", "--kv-heads", TWO_62, "--head-dim", "64", "--seq-len", "1"]), "give --kv-heads between 1 and 1024"),
        bad("kv-size --head-dim 0", |_| plain(&["kv-size", "--layers", "2", "--kv-heads", "2", "--head-dim", "0", "--seq-len", "1"]), "give --head-dim between 1 and 1024"),
        bad("kv-size --model with 2^62 layers", |m| on("kv-size", huge_layers(m), &["--seq-len", "10"]), "num_hidden_layers is 4611686018427387904"),
        bad("kv-size without a shape", |_| plain(&["kv-size", "--seq-len", "10"]), "missing --layers"),
        // ---- capacity ----
        bad("capacity --requests 10^10", |_| plain(&["capacity", "--budget", "1GiB", "--requests", "10000000000"]), "give --requests between 1 and 1000000"),
        bad("capacity --requests 0", |_| plain(&["capacity", "--budget", "1GiB", "--requests", "0"]), "give --requests between 1 and 1000000"),
        bad("capacity --max-new-tokens 10^12", |_| plain(&["capacity", "--budget", "1GiB", "--max-new-tokens", "1000000000000"]), "is longer than the model's context of 8192: lower --max-prompt or --max-new-tokens"),
        bad("capacity --max-new-tokens 0", |_| plain(&["capacity", "--budget", "1GiB", "--max-new-tokens", "0"]), "--max-new-tokens 0 is too small"),
        bad("capacity --max-prompt usize::MAX", |_| plain(&["capacity", "--budget", "1GiB", "--max-prompt", MAX]), "add up to more than a 64-bit count"),
        bad("capacity --max-prompt 1", |_| plain(&["capacity", "--budget", "1GiB", "--max-prompt", "1"]), "--max-prompt 1 is too small"),
        bad("capacity --budget 2^50 --block-size 1", |_| plain(&["capacity", "--budget", "1125899906842624", "--block-size", "1"]), "raise --block-size or lower --budget"),
        bad("capacity --budget 0", |_| plain(&["capacity", "--budget", "0"]), "is not a byte count"),
        bad("capacity --budget 1e300", |_| plain(&["capacity", "--budget", "1e300"]), "is not a byte count"),
        bad("capacity --budget under one block", |_| plain(&["capacity", "--budget", "1000"]), "raise --budget or lower --block-size"),
        bad("capacity --model with 2^62 layers", |m| plain(&["capacity", "--budget", "1GiB", "--model", &s(huge_layers(m))]), "num_hidden_layers is 4611686018427387904"),
        // ---- attention-map ----
        bad("attention-map --layer usize::MAX", |m| on("attention-map", m, &["--prompt", "hi there", "--layer", MAX]), "this model has layers 0..1"),
        bad("attention-map --head usize::MAX", |m| on("attention-map", m, &["--prompt", "hi there", "--head", MAX]), "heads 0..4"),
        bad("attention-map with an empty prompt", |m| on("attention-map", m, &["--prompt", ""]), "the prompt is empty"),
        // ---- usage errors: clap's, exit 2 ----
        usage("--max-new-tokens -1", |m| on("generate", m, &["--prompt", "hi", "--max-new-tokens", "-1"]), "unexpected argument '-1'"),
        usage("--block-size 0", |m| generate(m, &["--block-size", "0"]), "0 is not in 1..=4096"),
        usage("--prompt-len 2^64 (does not parse)", |m| on("generate", m, &["--prompt-len", "18446744073709551616"]), "invalid value"),
        usage("an unknown flag", |m| generate(m, &["--kv-bytes", "1GiB"]), "unexpected argument '--kv-bytes'"),
        // ---- a closed stdout (`kvlab ... | true`): quiet, exit 141 ----
        closed("generate | true", |m| on("generate", m, &["--prompt", "hi there", "--max-new-tokens", "4"]), ""),
        closed("generate --json | true", |m| on("generate", m, &["--prompt", "hi", "--max-new-tokens", "2", "--json"]), ""),
        closed("compare --json | true", |m| on("compare", m, &["--prompt", "hi", "--max-new-tokens", "2", "--json"]), ""),
        closed("compare | true", |m| on("compare", m, &["--prompt", "hi", "--max-new-tokens", "2"]), ""),
        closed("chat --json | true", |m| on("chat", m, &["--max-new-tokens", "2", "--json"]), "hi\nhi there\n"),
        closed("chat | true", |m| on("chat", m, &["--max-new-tokens", "2"]), "hi\n"),
        closed("kv-size | true", |_| kv(&["--seq-len", "10"]), ""),
        closed("capacity | true", |_| plain(&["capacity", "--budget", "64MiB", "--requests", "100"]), ""),
        closed("attention-map | true", |m| on("attention-map", m, &["--prompt", "hi there"]), ""),
    ]
}

#[test]
fn every_malformed_command_line_is_a_clean_error() {
    let cases = cases();
    assert!(cases.len() >= 80, "{} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let root = tempfile::tempdir().unwrap();
        let m = root.path().join("m");
        tiny_model_dir(&m);
        let args = (case.setup)(&m);
        let run = kvlab_with(&args, root.path(), case.stdin.as_bytes(), case.stdout);
        let clean = run.code == Some(case.code)
            && run.signal.is_none()
            && !run.timed_out
            && !run.stderr.contains("panicked");
        let message_ok = if case.stdout == Stdout::Closed {
            !run.stderr.contains("error") && !run.stderr.contains("Broken pipe")
        } else {
            run.stderr.contains(case.expect)
        };
        // kvlab's own errors are one line: `error: <problem>: <fix>`.
        let one_line = case.code != 1
            || (run
                .stderr
                .lines()
                .filter(|l| l.starts_with("error: "))
                .count()
                == 1
                && run
                    .stderr
                    .lines()
                    .last()
                    .is_some_and(|l| l.starts_with("error: ")));
        if !clean || !message_ok || !one_line {
            failures.push(format!(
                "{}: exit {:?} (want {}) signal {:?} timed out {} after {:.1?}\n  args: {}\n  expected stderr to contain: {:?}\n  stderr: {}",
                case.name,
                run.code,
                case.code,
                run.signal,
                run.timed_out,
                run.elapsed,
                args.join(" "),
                case.expect,
                run.stderr.trim(),
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

/// The neighbours of the cases above succeed: the corpus fails for the right reason.
#[test]
fn the_valid_neighbours_succeed() {
    let root = tempfile::tempdir().unwrap();
    let m = root.path().join("m");
    tiny_model_dir(&m);
    let ok = |args: Vec<String>, stdin: &str| {
        let run = kvlab_with(&args, root.path(), stdin.as_bytes(), Stdout::Captured);
        assert_eq!(run.code, Some(0), "{}: {}", args.join(" "), run.stderr);
        run.stdout
    };
    ok(
        on(
            "generate",
            &m,
            &[
                "--prompt-len",
                "255",
                "--max-new-tokens",
                "1",
                "--temperature",
                "0.5",
                "--top-p",
                "0.9",
            ],
        ),
        "",
    );
    ok(
        on(
            "prefix",
            &m,
            &[
                "--shared-len",
                "200",
                "--suffix-len",
                "8",
                "--max-new-tokens",
                "2",
                "--requests",
                "2",
            ],
        ),
        "",
    );
    ok(
        on(
            "bench",
            &m,
            &["--prefill", "255", "--contexts", "255", "--reps", "1"],
        ),
        "",
    );
    ok(
        on("chat", &m, &["--max-new-tokens", "2", "--json"]),
        "hi\nhi there\n",
    );
    let text = ok(kv(&["--seq-len", "2048", "--batch", "4"]), "");
    // 2 x 32 x 32 x 128 x 2 bytes = 512 KiB a token; x 2048 x 4 = 4 GiB.
    assert!(text.contains("= 4294967296 bytes"), "{text}");
    std::fs::write(m.join("prompt.txt"), "hi there").unwrap();
    ok(
        on(
            "generate",
            &m,
            &[
                "--prompt-file",
                &s(m.join("prompt.txt")),
                "--max-new-tokens",
                "1",
            ],
        ),
        "",
    );
    ok(
        plain(&["capacity", "--budget", "64MiB", "--requests", "100"]),
        "",
    );
    let help = kvlab(&plain(&["--help"]), root.path());
    assert!(
        help.stdout.contains("141  stdout was closed"),
        "{}",
        help.stdout
    );
}
