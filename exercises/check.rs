//! kvlab-exercises: the checker for kvlab's rustlings-style exercises.
//!
//! Every exercise is one standalone file, `NN_topic/name.rs`, with its own `#[test]`s, and
//! its worked solution sits at the same path under `solutions/`. The checker compiles each
//! file with plain `rustc --edition 2021 --test` and runs the resulting test binary: no
//! crates and no Cargo project per exercise, so a full run takes seconds on a fresh machine.
//! The list of exercises, in order, and their hints live in `info.toml`; the planted wrong
//! answers that `verify` proves the tests catch live in `mutants.toml` (see
//! `checker/mutants.rs`).
//!
//! Usage (from the repository root):
//!
//! ```text
//! cargo run --manifest-path exercises/Cargo.toml -- check     # learner: what passes, what is next
//! cargo run --manifest-path exercises/Cargo.toml -- run 3     # compile + test one exercise, full output
//! cargo run --manifest-path exercises/Cargo.toml -- hint 3    # a nudge for exercise 3 (no N: the next one)
//! cargo run --manifest-path exercises/Cargo.toml -- hint 3 2  # a stronger nudge, where there is one
//! cargo run --manifest-path exercises/Cargo.toml -- list      # every exercise and its chapter
//! cargo run --manifest-path exercises/Cargo.toml -- watch     # re-check on every save
//! cargo run --manifest-path exercises/Cargo.toml -- solution 3 # the worked solution, once yours passes
//! cargo run --manifest-path exercises/Cargo.toml -- reset 3   # back to the stub (yours kept aside)
//! cargo run --manifest-path exercises/Cargo.toml -- engine    # your code in kvlab, on the real model
//! cargo run --manifest-path exercises/Cargo.toml -- verify    # CI: stubs fail, solutions pass, mutants fail
//! ```
//!
//! A hint is shown only when asked for, and it points at the idea, the formula or the
//! failure mode, never at the line to type: working it out is the exercise.

#[path = "checker/build.rs"]
mod build;
#[path = "checker/commands.rs"]
mod commands;
#[path = "checker/copies.rs"]
mod copies;
#[path = "checker/info.rs"]
mod info;
#[path = "checker/mutants.rs"]
mod mutants;

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use build::{
    build_and_test, excerpt, par_map, rustc_test, source_arg, test_binary, Outcome, TEST_TIMEOUT,
};
use info::{find_exercise, load_exercises, load_mutants, Exercise};
use mutants::{verify_mutant, MutantVerdict};

pub(crate) const CMD: &str = "cargo run --manifest-path exercises/Cargo.toml --";
/// A stub's parameters are unused until the learner writes the body; a screen of
/// "unused variable" warnings would bury the test results, so learner builds allow them.
/// (`verify` compiles stubs with the default lints and solutions with `-D warnings`.)
pub(crate) const LEARNER_FLAGS: &[&str] = &["-A", "unused_variables"];

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let arg1 = args.get(1).map(String::as_str);
    let arg2 = args.get(2).map(String::as_str);
    let result = match args.first().map(String::as_str) {
        None | Some("check") => cmd_check(),
        Some("run") => cmd_run(arg1),
        Some("hint") => cmd_hint(arg1, arg2),
        Some("verify") => cmd_verify(),
        Some("watch") => commands::cmd_watch(),
        Some("list") => commands::cmd_list(),
        Some("solution") => commands::cmd_solution(arg1, arg2 == Some("--anyway")),
        Some("reset") => commands::cmd_reset(arg1),
        Some("engine") => commands::cmd_engine(),
        Some("help" | "-h" | "--help") => {
            print_usage();
            Ok(true)
        }
        Some(other) => Err(format!("unknown subcommand `{other}`")),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(msg) => {
            eprintln!("error: {msg}");
            eprintln!();
            print_usage();
            ExitCode::from(2)
        }
    }
}

fn print_usage() {
    eprintln!("usage: {CMD} <subcommand>");
    eprintln!(
        "  check      compile and test your copy of every exercise (exercises/mine/); show the first unfinished one (default)"
    );
    eprintln!("  run N      compile and test exercise N (its number or name) with full output");
    eprintln!("  hint [N]   a nudge for exercise N; without N, for the first unfinished one");
    eprintln!("  hint N 2   a stronger nudge for exercise N, where it has one");
    eprintln!("  list       every exercise, its file and the chapter that assigns it");
    eprintln!("  watch      re-check the next unfinished exercise every time you save a file");
    eprintln!("  solution N the worked solution of exercise N, once yours passes");
    eprintln!("  reset N    your copy of exercise N back to the stub (yours is kept in exercises/target/reset/)");
    eprintln!(
        "  engine     your RMSNorm, RoPE and attention inside kvlab, on SmolLM2 (`--impl learner`)"
    );
    eprintln!(
        "  verify     CI mode: every stub must compile and FAIL its tests, every solution PASS,"
    );
    eprintln!(
        "             every mutant (mutants.toml: a planted wrong answer) FAIL; solutions must"
    );
    eprintln!("             be rustfmt- and clippy-clean and keep the stub's tests");
}

// ---------------------------------------------------------------------------------------
// Where things are
// ---------------------------------------------------------------------------------------

/// The directory holding this crate, so the checker works from any cwd. `cargo run` sets
/// CARGO_MANIFEST_DIR at run time too; the compile-time value covers running the binary
/// directly.
fn exercises_dir() -> PathBuf {
    env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// Build products go under `exercises/target/` (git-ignored), next to Cargo's own.
pub(crate) fn build_dir(kind: &str, ex: &Exercise) -> PathBuf {
    let dir = Path::new(&ex.path).parent().unwrap_or(Path::new(""));
    exercises_dir()
        .join("target")
        .join("exercises")
        .join(kind)
        .join(dir)
}

/// Compiles and tests the learner's copy of every exercise.
pub(crate) fn run_all_yours(list: &[Exercise]) -> Vec<Outcome> {
    par_map(list, |ex| {
        build_and_test(&ex.yours(), &build_dir("learner", ex), LEARNER_FLAGS)
            .unwrap_or_else(|e| Outcome::CompileError(format!("error: could not run rustc: {e}")))
    })
}

// ---------------------------------------------------------------------------------------
// Learner mode
// ---------------------------------------------------------------------------------------

fn cmd_check() -> Result<bool, String> {
    let list = load_exercises()?;
    copies::ensure_copies(&list)?;
    println!(
        "kvlab exercises: compiling and testing your {} files in exercises/mine/ ...\n",
        list.len()
    );
    let outcomes = run_all_yours(&list);

    let width = list.iter().map(|e| e.name.len()).max().unwrap_or(8).max(8);
    println!("   #  {:width$}  status", "exercise");
    for (ex, outcome) in list.iter().zip(&outcomes) {
        println!(
            "  {:02}  {:width$}  {} {}",
            ex.number,
            ex.name,
            outcome.mark(),
            outcome.short()
        );
    }
    println!("\n{}", build::progress(&outcomes));

    let Some(i) = outcomes.iter().position(|o| !matches!(o, Outcome::Pass)) else {
        println!("\nAll exercises pass. Compare your code with exercises/solutions/, then read");
        println!("kvlab's own src/: it is built from exactly these pieces.");
        return Ok(true);
    };
    let ex = &list[i];
    println!("\nNext up: {}  ->  {}", ex.label(), ex.yours_shown());
    println!("{}", "-".repeat(72));
    println!("{}", excerpt(&outcomes[i]));
    println!("{}", "-".repeat(72));
    println!("Read the file's header and its TODO questions first.");
    println!(
        "Stuck?       {CMD} hint {}   (a nudge, not the answer)",
        ex.number
    );
    println!("Full output: {CMD} run {}", ex.number);
    println!("Solved it?   {CMD} check");
    // A learner with unfinished exercises is the normal state, not an error: exit 0.
    Ok(true)
}

fn cmd_run(key: Option<&str>) -> Result<bool, String> {
    let list = load_exercises()?;
    let ex = find_exercise(&list, key.ok_or("`run` needs an exercise number or name")?)?;
    copies::ensure_copies(&list)?;
    println!("== {}  ({})", ex.label(), ex.yours_shown());
    let out_dir = build_dir("learner", ex);
    fs::create_dir_all(&out_dir).map_err(|e| e.to_string())?;
    let bin = test_binary(&ex.yours(), &out_dir);
    // Inherit the terminal here so the learner sees rustc's and libtest's full, coloured output.
    let compiled = rustc_test(&ex.yours(), &bin)
        .args(LEARNER_FLAGS)
        .status()
        .map_err(|e| format!("could not run rustc: {e}"))?;
    if !compiled.success() {
        println!(
            "\n{} does not compile yet. Stuck? {CMD} hint {}",
            ex.label(),
            ex.number
        );
        return Ok(false);
    }
    let tested = Command::new(&bin)
        .env("RUST_BACKTRACE", "0")
        .status()
        .map_err(|e| e.to_string())?;
    if tested.success() {
        println!("{} passes. Next: {CMD} check", ex.label());
    } else {
        println!(
            "{} does not pass yet. Stuck? {CMD} hint {}",
            ex.label(),
            ex.number
        );
    }
    Ok(tested.success())
}

fn cmd_hint(key: Option<&str>, level: Option<&str>) -> Result<bool, String> {
    let list = load_exercises()?;
    let ex = match key {
        Some(key) => find_exercise(&list, key)?,
        None => {
            copies::ensure_copies(&list)?;
            let outcomes = run_all_yours(&list);
            match outcomes.iter().position(|o| !matches!(o, Outcome::Pass)) {
                Some(i) => &list[i],
                None => {
                    println!("All exercises pass: no hint needed.");
                    return Ok(true);
                }
            }
        }
    };
    let n_levels = ex.hints.len();
    let level = match level {
        None => 1,
        Some(l) => match l.parse::<usize>() {
            Ok(l) if (1..=n_levels).contains(&l) => l,
            _ => {
                let levels: Vec<String> = (1..=n_levels)
                    .map(|l| format!("`hint {} {l}`", ex.number))
                    .collect();
                return Err(format!(
                    "{} has {n_levels} hint level(s): {}",
                    ex.label(),
                    levels.join(", ")
                ));
            }
        },
    };
    println!(
        "Hint {level}/{n_levels} for {}  ({}):\n\n{}\n",
        ex.label(),
        ex.yours_shown(),
        indent(&ex.hints[level - 1])
    );
    if level < n_levels {
        println!(
            "Still stuck after trying? {CMD} hint {} {}",
            ex.number,
            level + 1
        );
    }
    Ok(true)
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("  {l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------------------
// CI mode
// ---------------------------------------------------------------------------------------

struct Verdict {
    stub: Outcome,
    solution: Outcome,
    /// None: clippy-driver is not installed, so clippy was skipped.
    clippy: Option<Result<(), String>>,
    problems: Vec<String>,
}

fn cmd_verify() -> Result<bool, String> {
    let list = load_exercises()?;
    let mutant_list = load_mutants()?;
    let has_clippy = Command::new("clippy-driver")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    println!(
        "verify: {} exercises, {} mutants. Every stub must compile and FAIL its tests; every",
        list.len(),
        mutant_list.len()
    );
    println!(
        "solution must compile warning-free and PASS, be rustfmt-clean{}, and keep the stub's",
        if has_clippy { " and clippy-clean" } else { "" }
    );
    println!("tests; every mutant (a planted wrong answer) must compile and FAIL them.\n");

    let mut problems = check_layout(&list);
    // Each mutant with its exercise and its 1-based number within that exercise.
    let mut jobs: Vec<(&Exercise, &info::Mutant, usize)> = Vec::new();
    for m in &mutant_list {
        match list.iter().find(|e| e.name == m.exercise) {
            Some(ex) => {
                let k = 1 + jobs.iter().filter(|j| j.0.number == ex.number).count();
                jobs.push((ex, m, k));
            }
            None => problems.push(format!(
                "mutants.toml: `{}` names no exercise in info.toml",
                m.exercise
            )),
        }
    }
    for ex in &list {
        if !jobs.iter().any(|j| j.0.number == ex.number) {
            problems.push(format!(
                "{}: no mutant in mutants.toml; plant at least one plausible wrong answer the tests must catch",
                ex.label()
            ));
        }
    }
    let verdicts = par_map(&list, |ex| verify_one(ex, has_clippy));
    let mutant_verdicts = par_map(&jobs, |(ex, m, k)| verify_mutant(ex, m, *k));

    let width = list.iter().map(|e| e.name.len()).max().unwrap_or(8).max(8);
    println!(
        "   #  {:width$}  {:22} {:22} {:20} clippy",
        "exercise", "stub (must fail)", "solution (must pass)", "mutants (must fail)"
    );
    for (ex, v) in list.iter().zip(&verdicts) {
        let stub = match &v.stub {
            Outcome::TestsFail(_) => "fails: ok".to_string(),
            other => format!("{} <- BAD", other.short()),
        };
        let solution = match &v.solution {
            Outcome::Pass => "passes: ok".to_string(),
            other => format!("{} <- BAD", other.short()),
        };
        let mine: Vec<&MutantVerdict> = mutant_verdicts
            .iter()
            .filter(|m| m.number == ex.number)
            .collect();
        let caught = mine.iter().filter(|m| m.result.is_ok()).count();
        let mutants = if caught == mine.len() && caught > 0 {
            format!("{caught}/{} caught: ok", mine.len())
        } else {
            format!("{caught}/{} caught <- BAD", mine.len())
        };
        let clippy = match &v.clippy {
            None => "skipped",
            Some(Ok(())) => "ok",
            Some(Err(_)) => "BAD",
        };
        println!(
            "  {:02}  {:width$}  {stub:22} {solution:22} {mutants:20} {clippy}",
            ex.number, ex.name
        );
        problems.extend(v.problems.iter().cloned());
    }

    println!("\nmutants: the wrong answer, and the tests that caught it");
    for (ex, m) in jobs.iter().map(|j| j.0).zip(&mutant_verdicts) {
        match &m.result {
            Ok(tests) => println!(
                "  {:02} caught   {}\n              by {}",
                ex.number,
                m.wrong,
                tests.join(", ")
            ),
            Err(why) => {
                println!("  {:02} BAD      {}", ex.number, m.wrong);
                problems.push(format!("{}: mutant \"{}\": {why}", ex.label(), m.wrong));
            }
        }
    }

    // rustfmt: stubs too, since they are what the learner reads first.
    let files: Vec<PathBuf> = list
        .iter()
        .flat_map(|e| [e.stub(), e.solution()])
        .filter(|p| p.exists())
        .chain(
            [
                "check.rs",
                "checker/build.rs",
                "checker/info.rs",
                "checker/mutants.rs",
            ]
            .map(|f| exercises_dir().join(f)),
        )
        .collect();
    let fmt = Command::new("rustfmt")
        .args(["--check", "--edition", "2021"])
        .args(&files)
        .output();
    match fmt {
        Ok(out) if out.status.success() => println!(
            "\nrustfmt --check --edition 2021: ok ({} files)",
            files.len()
        ),
        Ok(out) => {
            println!("\nrustfmt --check --edition 2021: BAD");
            // The diff on stdout; a file that does not parse is reported on stderr.
            let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
            let shown: Vec<&str> = text.lines().take(60).collect();
            println!("{}", shown.join("\n"));
            problems.push(
                "rustfmt: some files are not formatted (run `rustfmt --edition 2021` on them)"
                    .into(),
            );
        }
        Err(e) => problems.push(format!(
            "rustfmt could not be run ({e}); install it: rustup component add rustfmt"
        )),
    }
    if !has_clippy {
        println!("clippy-driver not found: clippy skipped (rustup component add clippy)");
    }

    if problems.is_empty() {
        println!(
            "\nverify: OK. All {} stubs fail, all {} solutions pass, all {} mutants are caught.",
            list.len(),
            list.len(),
            mutant_verdicts.len()
        );
        Ok(true)
    } else {
        println!("\nverify: FAILED, {} problem(s):", problems.len());
        for p in &problems {
            println!("  - {}", p.replace('\n', "\n    "));
        }
        Ok(false)
    }
}

fn verify_one(ex: &Exercise, has_clippy: bool) -> Verdict {
    let mut problems = Vec::new();
    let label = ex.label();
    let missing = |p: &Path| Outcome::CompileError(format!("error: {} is missing", p.display()));
    let stub_src = fs::read_to_string(ex.stub()).unwrap_or_default();
    let sol_src = fs::read_to_string(ex.solution()).unwrap_or_default();

    let stub = if ex.stub().exists() {
        build_and_test(&ex.stub(), &build_dir("verify-stub", ex), &[])
            .unwrap_or_else(|e| Outcome::CompileError(e.to_string()))
    } else {
        missing(&ex.stub())
    };
    match &stub {
        Outcome::TestsFail(_) => {}
        Outcome::Pass => problems.push(format!(
            "{label}: the stub PASSES its tests before the learner has done anything; the tests do not check the TODO"
        )),
        Outcome::CompileError(out) => problems.push(format!(
            "{label}: the stub does not compile; it must compile and fail its tests\n{}",
            excerpt(&Outcome::CompileError(out.clone()))
        )),
        Outcome::TimedOut => problems.push(format!("{label}: the stub's tests hang (over {TEST_TIMEOUT:?})")),
    }

    // Solutions are held to a higher bar than stubs: no warnings at all.
    let solution = if ex.solution().exists() {
        build_and_test(
            &ex.solution(),
            &build_dir("verify-solution", ex),
            &["-D", "warnings"],
        )
        .unwrap_or_else(|e| Outcome::CompileError(e.to_string()))
    } else {
        missing(&ex.solution())
    };
    if !matches!(solution, Outcome::Pass) {
        problems.push(format!(
            "{label}: the solution does not pass ({})\n{}",
            solution.short(),
            excerpt(&solution)
        ));
    }

    // Only a solution that compiles and passes is worth linting; otherwise clippy would
    // repeat the compiler's errors.
    let clippy = (has_clippy && matches!(solution, Outcome::Pass)).then(|| {
        let out_dir = build_dir("clippy", ex);
        let _ = fs::create_dir_all(&out_dir);
        let mut cmd = Command::new("clippy-driver");
        cmd.args([
            "--edition",
            "2021",
            "--test",
            "--color",
            "never",
            "--emit=metadata",
        ]);
        cmd.args(["-D", "warnings"]);
        source_arg(&mut cmd, &ex.solution());
        let out = cmd
            .arg("-o")
            .arg(out_dir.join(format!("{}.rmeta", ex.name)))
            .output();
        match out {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(String::from_utf8_lossy(&o.stderr).into_owned()),
            Err(e) => Err(e.to_string()),
        }
    });
    if let Some(Err(out)) = &clippy {
        problems.push(format!(
            "{label}: clippy warnings in the solution\n{}",
            excerpt(&Outcome::CompileError(out.clone()))
        ));
    }

    // The learner must be graded by exactly the tests CI checks the solution against.
    if !stub_src.is_empty() && !sol_src.is_empty() {
        match (tests_section(&stub_src), tests_section(&sol_src)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(_), Some(_)) => problems.push(format!(
                "{label}: the `#[cfg(test)]` module differs between stub and solution; they must be identical"
            )),
            _ => problems.push(format!("{label}: stub and solution both need a `#[cfg(test)]` module")),
        }
        if !stub_src.contains("// TODO") {
            problems.push(format!(
                "{label}: the stub has no `// TODO` telling the learner what to do"
            ));
        }
        if sol_src.contains("// TODO") {
            problems.push(format!("{label}: the solution still contains a `// TODO`"));
        }
        // A hint nudges; it must not hand over a line of the solution.
        for line in solution_lines(&sol_src, &stub_src) {
            for (level, hint) in ex.hints.iter().enumerate() {
                if squash(hint).contains(&squash(line)) {
                    problems.push(format!(
                        "{label}: hint {} quotes the solution's code `{}`; nudge instead",
                        level + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    Verdict {
        stub,
        solution,
        clippy,
        problems,
    }
}

/// The solution's lines of code (no comments, no tests) that the stub does not have, and
/// that are long enough to be an answer rather than a bracket or a `let out = ...;`.
fn solution_lines<'a>(solution: &'a str, stub: &str) -> Vec<&'a str> {
    let code = tests_section(solution).map_or(solution, |t| &solution[..solution.len() - t.len()]);
    let stub_lines: Vec<&str> = stub.lines().map(str::trim).collect();
    code.lines()
        .filter(|l| {
            let t = l.trim();
            !t.starts_with("//") && squash(t).len() >= 20 && !stub_lines.contains(&t)
        })
        .collect()
}

/// Without whitespace, so a hint cannot dodge the check by re-wrapping a line.
fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Everything from the `#[cfg(test)]` line to the end of the file.
fn tests_section(src: &str) -> Option<&str> {
    let start = src.find("\n#[cfg(test)]")?;
    Some(&src[start..])
}

/// info.toml and the directories agree: numbered in order, no unlisted or missing files.
fn check_layout(list: &[Exercise]) -> Vec<String> {
    let mut problems = Vec::new();
    for ex in list {
        let prefix = format!("{:02}_", ex.number);
        if !ex.path.starts_with(&prefix) {
            problems.push(format!(
                "info.toml: exercise #{} `{}` should live in a `{prefix}*` directory, not {}",
                ex.number, ex.name, ex.path
            ));
        }
        if list.iter().filter(|e| e.name == ex.name).count() > 1 {
            problems.push(format!("info.toml: the name `{}` is used twice", ex.name));
        }
    }
    // Every .rs file in a numbered directory (stubs and solutions) must be listed.
    for (base, shown) in [
        (exercises_dir(), "exercises"),
        (exercises_dir().join("solutions"), "exercises/solutions"),
    ] {
        let Ok(dirs) = fs::read_dir(&base) else {
            problems.push(format!("cannot read {}", base.display()));
            continue;
        };
        for dir in dirs.flatten() {
            let dir_name = dir.file_name().to_string_lossy().into_owned();
            if !dir.path().is_dir() || !dir_name.chars().next().is_some_and(|c| c.is_ascii_digit())
            {
                continue;
            }
            for file in fs::read_dir(dir.path()).into_iter().flatten().flatten() {
                let rel = format!("{dir_name}/{}", file.file_name().to_string_lossy());
                if rel.ends_with(".rs") && !list.iter().any(|e| e.path == rel) {
                    problems.push(format!("{shown}/{rel} is not listed in info.toml"));
                }
            }
        }
    }
    problems
}
