//! Running the `kvlab` binary from a test, as a learner would from a shell: the
//! integration tests of the CLI (`cli.rs`, `cache_cli.rs`, `speculative_cli.rs`) share
//! these helpers.

use serde_json::Value;
use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `kvlab ARGS` from the repository root with `stdin` fed to it.
pub fn kvlab_with_stdin(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvlab"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the kvlab binary runs");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(stdin.as_bytes())
        .expect("kvlab reads its stdin");
    child.wait_with_output().expect("kvlab finishes")
}

/// Runs `kvlab ARGS` with an empty stdin.
pub fn kvlab(args: &[&str]) -> Output {
    kvlab_with_stdin(args, "")
}

/// Runs `kvlab ARGS`, which must succeed; returns its stdout.
pub fn ok(args: &[&str], stdin: &str) -> String {
    let out = kvlab_with_stdin(args, stdin);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

/// Runs `kvlab ARGS` (with `--json`), which must succeed and print one JSON object.
pub fn json(args: &[&str]) -> Value {
    serde_json::from_str(&ok(args, "")).expect("stdout is one JSON object")
}

/// Runs `kvlab ARGS`, which must fail with exit code 1 and `needle` on stderr.
pub fn fails_with(args: &[&str], needle: &str) {
    fails_with_code(args, needle, 1)
}

/// [`fails_with`] with another exit code (2 is clap's, for a value it rejects before
/// kvlab runs). Never a panic.
pub fn fails_with_code(args: &[&str], needle: &str, code: i32) {
    let out = kvlab(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(
        stderr.contains(needle),
        "{args:?}: expected {needle:?} in {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
