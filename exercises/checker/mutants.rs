//! Mutants: `verify`'s proof that each exercise's tests catch the wrong answers a learner
//! is likely to write.
//!
//! A stub that fails its tests proves little about the tests: a placeholder `0` fails
//! almost anything. The real question is whether a *nearly right* answer passes, e.g.
//! softmax shifted by `x[0]` instead of the max, or a causal mask that hides the
//! diagonal. `mutants.toml` plants such answers: each is the worked solution with one
//! piece of text replaced. `verify` applies each one, compiles it with the exercise's own
//! tests (they come from the solution, so they cannot drift), and requires it to compile
//! and FAIL. A mutant that passes is a test gap; one that no longer applies (its `find`
//! text left the solution) or no longer compiles is a stale mutant. Either fails CI.
//!
//! The applied files are kept under `exercises/target/exercises/mutants/` so that any one
//! can be run by hand with `rustc --edition 2021 --test`.

use std::fs;
use std::path::{Path, PathBuf};

use crate::build::{build_and_test, excerpt, Outcome};
use crate::exercises_dir;
use crate::info::{Exercise, Mutant};

/// What became of one mutant.
pub struct MutantVerdict {
    /// The exercise's number and the mutant's description.
    pub number: usize,
    pub wrong: String,
    /// Ok: the tests that failed (the mutant was caught). Err: why this is a problem.
    pub result: Result<Vec<String>, String>,
}

/// The solution's text with the mutant's replacement made, in the code only (never in the
/// `#[cfg(test)]` module: a mutant that edits the tests would prove nothing).
pub fn apply(solution: &str, m: &Mutant) -> Result<String, String> {
    let split = solution
        .find("\n#[cfg(test)]")
        .ok_or("the solution has no `#[cfg(test)]` module")?;
    let (code, tests) = solution.split_at(split);
    match code.matches(m.find.as_str()).count() {
        1 => {}
        0 => return Err(
            "its `find` text is not in the solution's code (before `#[cfg(test)]`): a stale mutant"
                .into(),
        ),
        n => {
            return Err(format!(
                "its `find` text occurs {n} times in the solution; make it unique"
            ))
        }
    }
    if m.find == m.replace {
        return Err("`find` and `replace` are the same text".into());
    }
    Ok(code.replacen(m.find.as_str(), &m.replace, 1) + tests)
}

/// Where mutant number `k` (1-based, within its exercise) is written.
fn mutant_path(ex: &Exercise, k: usize) -> PathBuf {
    let rel = Path::new(&ex.path);
    let stem = rel.file_stem().unwrap_or_default().to_string_lossy();
    exercises_dir()
        .join("target/exercises/mutants")
        .join(rel.parent().unwrap_or(Path::new("")))
        .join(format!("{stem}_mutant{k}.rs"))
}

/// Applies, compiles and tests one mutant. Must be called with `k` counting the mutants
/// of `ex` in file order, so that every mutant gets its own file and binary.
pub fn verify_mutant(ex: &Exercise, m: &Mutant, k: usize) -> MutantVerdict {
    let verdict = |result| MutantVerdict {
        number: ex.number,
        wrong: m.wrong.clone(),
        result,
    };
    let solution = match fs::read_to_string(ex.solution()) {
        Ok(s) => s,
        Err(e) => return verdict(Err(format!("cannot read the solution: {e}"))),
    };
    let text = match apply(&solution, m) {
        Ok(t) => t,
        Err(e) => return verdict(Err(e)),
    };
    let path = mutant_path(ex, k);
    let out_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    if let Err(e) = fs::create_dir_all(&out_dir).and_then(|()| fs::write(&path, text)) {
        return verdict(Err(format!("cannot write {}: {e}", path.display())));
    }
    // Warnings are allowed: a wrong answer often leaves a variable unused.
    let outcome = build_and_test(&path, &out_dir, &["-A", "warnings"])
        .unwrap_or_else(|e| Outcome::CompileError(e.to_string()));
    let shown = path
        .strip_prefix(exercises_dir().parent().unwrap_or(Path::new("")))
        .unwrap_or(&path)
        .display()
        .to_string();
    verdict(match outcome {
        Outcome::TestsFail(log) => Ok(failed_tests(&log)),
        Outcome::Pass => Err(format!(
            "NOT CAUGHT: every test passes with this wrong answer ({shown})"
        )),
        Outcome::CompileError(out) => Err(format!(
            "the mutant does not compile, so it proves nothing about the tests ({shown})\n{}",
            excerpt(&Outcome::CompileError(out))
        )),
        Outcome::TimedOut => Err(format!("the mutant's tests hang ({shown})")),
    })
}

/// The names of the failed tests in libtest's output (`test name ... FAILED`).
fn failed_tests(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.strip_prefix("test ")?.strip_suffix(" ... FAILED"))
        .map(|name| name.trim_end_matches(" - should panic").to_string())
        .collect()
}
