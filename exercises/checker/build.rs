//! Compiling one exercise file with `rustc --test` and running its tests, with a timeout;
//! and running many of those on all cores. Used by every subcommand of the checker.

use std::env;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use crate::exercises_dir;

/// A learner's infinite loop must not hang the checker; real exercise tests take milliseconds.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How many lines of compiler or test output `check` shows for the next exercise.
const EXCERPT_LINES: usize = 40;

pub enum Outcome {
    Pass,
    /// Compiled, but at least one test failed (the captured test output).
    TestsFail(String),
    /// rustc refused the file (the captured compiler output).
    CompileError(String),
    TimedOut,
}

impl Outcome {
    /// The progress box `check` and `list` print: `[x]` for a pass.
    pub fn mark(&self) -> &'static str {
        if matches!(self, Outcome::Pass) {
            "[x]"
        } else {
            "[ ]"
        }
    }
    pub fn short(&self) -> &'static str {
        match self {
            Outcome::Pass => "done",
            Outcome::TestsFail(_) => "tests fail",
            Outcome::CompileError(_) => "does not compile",
            Outcome::TimedOut => "timed out",
        }
    }
}

pub fn rustc() -> String {
    env::var("RUSTC").unwrap_or_else(|_| "rustc".into())
}

/// `rustc --edition 2021 --test SRC -o BIN`.
pub fn rustc_test(src: &Path, bin: &Path) -> Command {
    let mut cmd = Command::new(rustc());
    cmd.args(["--edition", "2021", "--test", "-C", "debuginfo=0"]);
    source_arg(&mut cmd, src);
    cmd.arg("-o").arg(bin);
    cmd
}

/// Passes `src` relative to the repository root and runs from there, so that compiler
/// errors and test panics name `exercises/04_softmax/softmax.rs:12:5`, not an absolute path.
pub fn source_arg(cmd: &mut Command, src: &Path) {
    let repo = exercises_dir().parent().map(Path::to_path_buf);
    match repo
        .as_deref()
        .and_then(|r| Some((r, src.strip_prefix(r).ok()?)))
    {
        Some((repo, rel)) => cmd.current_dir(repo).arg(rel),
        None => cmd.arg(src),
    };
}

/// Where the test binary for `src` goes.
pub fn test_binary(src: &Path, out_dir: &Path) -> PathBuf {
    out_dir.join(src.file_stem().unwrap_or_default())
}

/// `rustc --edition 2021 --test SRC -o BIN`, then runs BIN (the libtest harness).
pub fn build_and_test(src: &Path, out_dir: &Path, extra_flags: &[&str]) -> io::Result<Outcome> {
    fs::create_dir_all(out_dir)?;
    let bin = test_binary(src, out_dir);
    let compiled = rustc_test(src, &bin)
        .args(["--color", "never"])
        .args(extra_flags)
        .output()?;
    if !compiled.status.success() {
        return Ok(Outcome::CompileError(
            String::from_utf8_lossy(&compiled.stderr).into_owned(),
        ));
    }
    // stdout and stderr into one file: no pipes to drain, so a chatty test cannot deadlock us.
    let log_path = bin.with_extension("log");
    let log = File::create(&log_path)?;
    let mut child = Command::new(&bin)
        .args(["--color", "never"])
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()?;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if start.elapsed() > TEST_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Outcome::TimedOut);
        }
        thread::sleep(Duration::from_millis(10));
    };
    if status.success() {
        Ok(Outcome::Pass)
    } else {
        Ok(Outcome::TestsFail(
            fs::read_to_string(&log_path).unwrap_or_default(),
        ))
    }
}

/// `Progress: k/n exercises pass.`, as `check` and `list` end.
pub fn progress(outcomes: &[Outcome]) -> String {
    let done = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Pass))
        .count();
    format!("Progress: {done}/{} exercises pass.", outcomes.len())
}

/// Runs `f` on every item on all cores; results come back in the items' order.
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let workers = thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(items.len())
        .max(1);
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                *slots[i].lock().unwrap() = Some(r);
            });
        }
    });
    slots
        .into_iter()
        .map(|m| m.into_inner().unwrap().expect("every slot filled"))
        .collect()
}

/// The part of the output a learner needs: the compiler's errors (not its warnings about a
/// half-written stub), or the test failures and their panic messages.
pub fn excerpt(outcome: &Outcome) -> String {
    let lines: Vec<&str> = match outcome {
        Outcome::CompileError(out) => out
            .split("\n\n")
            .filter(|block| block.trim_start().starts_with("error"))
            .flat_map(|block| block.lines().chain(std::iter::once("")))
            .collect(),
        Outcome::TestsFail(out) => {
            let all: Vec<&str> = out.lines().collect();
            let start = all.iter().position(|l| *l == "failures:").unwrap_or(0);
            let end = all
                .iter()
                .rposition(|l| l.starts_with("test result:"))
                .map_or(all.len(), |e| e + 1);
            // libtest's advice about backtraces is noise here.
            let hide = "note: run with `RUST_BACKTRACE";
            all[start..end.max(start)]
                .iter()
                .copied()
                .filter(|l| !l.starts_with(hide))
                .collect()
        }
        Outcome::TimedOut => vec!["the tests ran for more than 30 s: is there an infinite loop?"],
        Outcome::Pass => vec![],
    };
    let mut text: Vec<&str> = lines.iter().take(EXCERPT_LINES).copied().collect();
    if lines.len() > EXCERPT_LINES {
        text.push("... (more: use `run N` to see everything)");
    }
    text.join("\n")
}
