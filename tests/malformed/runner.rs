//! Runs the real `kvlab` binary as a subprocess under a 4 GiB address-space limit and a
//! timeout, for the malformed-input corpora (`tests/malformed.rs`: files;
//! `tests/malformed_cli.rs`: the command line).
#![allow(dead_code)]

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Address space the subprocess may map (the tiny model needs ~100 MB; random
/// weights of SmolLM2's shape ~600 MB).
pub const MEMORY_LIMIT_BYTES: u64 = 4 << 30;
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// What one run of kvlab did.
pub struct Run {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    pub timed_out: bool,
}

/// Where kvlab's stdout goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Stdout {
    /// A file, read back into [`Run::stdout`].
    Captured,
    /// A pipe whose reader is gone before kvlab writes (`kvlab ... | true`): every
    /// write fails with EPIPE.
    Closed,
}

/// Runs kvlab with `args`, stdin empty, stdout captured.
pub fn kvlab(args: &[String], scratch: &Path) -> Run {
    kvlab_with(args, scratch, b"", Stdout::Captured)
}

/// Runs kvlab with `args` under the memory limit and the timeout, `stdin` as its input.
pub fn kvlab_with(args: &[String], scratch: &Path, stdin: &[u8], stdout: Stdout) -> Run {
    let in_path = scratch.join("stdin.txt");
    let out_path = scratch.join("stdout.txt");
    let err_path = scratch.join("stderr.txt");
    std::fs::write(&in_path, stdin).unwrap();
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!(
            "ulimit -v {} && exec \"$0\" \"$@\"",
            MEMORY_LIMIT_BYTES / 1024
        ))
        .arg(env!("CARGO_BIN_EXE_kvlab"))
        .args(args)
        .stdin(std::fs::File::open(&in_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    match stdout {
        Stdout::Captured => {
            command.stdout(std::fs::File::create(&out_path).unwrap());
        }
        Stdout::Closed => {
            // The reading end is closed before kvlab starts, so its first write fails
            // with EPIPE every time (closing it after spawning would race with a fast
            // command filling the pipe's buffer and exiting).
            let (reader, writer) = std::io::pipe().unwrap();
            drop(reader);
            command.stdout(writer);
        }
    }
    let mut child = command.spawn().expect("sh runs");
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > TIMEOUT {
            timed_out = true;
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Run {
        code: status.code(),
        signal: status.signal(),
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
        elapsed: start.elapsed(),
        timed_out,
    }
}
