//! The learner's conveniences around `check`: `watch` (re-check on every save),
//! `solution` (the worked solution, once yours passes), `reset` (your copy back to the
//! stub, yours kept aside), `list` and `engine` (your code inside kvlab, on the real
//! model). All of them work on the learner's copies in `exercises/mine/` (`copies.rs`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, SystemTime};

use crate::build::{build_and_test, Outcome};
use crate::copies::ensure_copies;
use crate::info::{find_exercise, load_exercises, Exercise};
use crate::{build_dir, exercises_dir, run_all_yours, CMD, LEARNER_FLAGS};

/// `solution N`: prints exercise N's worked solution, only once the learner's file passes
/// (reading it before is reading the answer; `--anyway` is there for the stuck).
pub fn cmd_solution(key: Option<&str>, anyway: bool) -> Result<bool, String> {
    let list = load_exercises()?;
    let ex = find_exercise(
        &list,
        key.ok_or("`solution` needs an exercise number or name")?,
    )?;
    ensure_copies(&list)?;
    if !anyway && !passes(ex) {
        println!(
            "{} does not pass yet: the solution is shown once it does (`{CMD} run {}`).\n\
             Stuck past both hints? `{CMD} solution {} --anyway`",
            ex.label(),
            ex.number,
            ex.number
        );
        return Ok(false);
    }
    let text = fs::read_to_string(ex.solution()).map_err(|e| e.to_string())?;
    println!(
        "== worked solution of {}  (exercises/solutions/{})\n",
        ex.label(),
        ex.path
    );
    // The tests are the same as yours, byte for byte: only the code above them differs.
    let code = text.split("#[cfg(test)]").next().unwrap_or(&text);
    println!("{}", code.trim_end());
    println!(
        "\n(its tests are yours, unchanged. Side by side: diff {} exercises/solutions/{})",
        ex.yours_shown(),
        ex.path
    );
    Ok(true)
}

/// `reset N`: your copy back to the tracked stub, with yours kept in
/// `exercises/target/reset/`, so a reset is never a loss.
pub fn cmd_reset(key: Option<&str>) -> Result<bool, String> {
    let list = load_exercises()?;
    let ex = find_exercise(
        &list,
        key.ok_or("`reset` needs an exercise number or name")?,
    )?;
    let repo = repo_dir()?;
    let yours = ex.yours();
    if yours.exists() {
        let kept = exercises_dir().join("target").join("reset").join(&ex.path);
        fs::create_dir_all(kept.parent().unwrap_or(Path::new("."))).map_err(|e| e.to_string())?;
        fs::copy(&yours, &kept).map_err(|e| e.to_string())?;
        println!(
            "Your version: {}",
            kept.strip_prefix(&repo).unwrap_or(&kept).display()
        );
    } else if let Some(dir) = yours.parent() {
        fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    fs::copy(ex.stub(), &yours).map_err(|e| e.to_string())?;
    println!("{} is its stub again: {}", ex.label(), ex.yours_shown());
    Ok(true)
}

/// `watch`: re-runs the first unfinished exercise every time an exercise file is saved,
/// until every one passes (Ctrl-C to stop). Polls modification times once a second: no
/// file-watching crate, so the checker keeps no dependencies.
pub fn cmd_watch() -> Result<bool, String> {
    let list = load_exercises()?;
    ensure_copies(&list)?;
    let mut seen: Option<SystemTime> = None;
    loop {
        let newest = list
            .iter()
            .filter_map(|ex| fs::metadata(ex.yours()).and_then(|m| m.modified()).ok())
            .max();
        if newest != seen {
            seen = newest;
            // One build of every exercise, on all cores, as `check` does.
            let outcomes = run_all_yours(&list);
            match outcomes.iter().position(|o| !matches!(o, Outcome::Pass)) {
                None => {
                    println!("All {} exercises pass. Next: {CMD} engine", list.len());
                    return Ok(true);
                }
                Some(i) => {
                    let (ex, outcome) = (&list[i], &outcomes[i]);
                    println!(
                        "\n== {}  ({}): {}",
                        ex.label(),
                        ex.yours_shown(),
                        outcome.short()
                    );
                    println!("{}", crate::build::excerpt(outcome));
                    println!("(watching exercises/mine/ for changes; Ctrl-C to stop; `{CMD} hint {}` for a nudge)", ex.number);
                }
            }
        }
        thread::sleep(Duration::from_secs(1));
    }
}

/// `engine`: builds kvlab with your RMSNorm, RoPE and attention exercises compiled in
/// (`src/learner.rs`) and runs them on SmolLM2: each function against kvlab's, then your
/// naive path against your cached one, then your tokens against the engine's.
pub fn cmd_engine() -> Result<bool, String> {
    // kvlab's build.rs compiles your copies where they exist: make sure they do.
    ensure_copies(&load_exercises()?)?;
    let repo = repo_dir()?;
    let args = [
        "run",
        "--release",
        "--quiet",
        "--",
        "compare",
        "--impl",
        "learner",
        "--chat",
        "--prompt",
        "What is the capital of France?",
        "--max-new-tokens",
        "8",
        "--ttft-rounds",
        "1",
    ];
    println!("$ cargo {}", args.join(" "));
    let status = Command::new(env_cargo())
        .args(args)
        .current_dir(&repo)
        .status()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    Ok(status.success())
}

/// The repository root: the folder holding `exercises/`.
fn repo_dir() -> Result<PathBuf, String> {
    exercises_dir()
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| "exercises/ has no parent directory".to_string())
}

fn env_cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn passes(ex: &Exercise) -> bool {
    matches!(
        build_and_test(&ex.yours(), &build_dir("learner", ex), LEARNER_FLAGS),
        Ok(Outcome::Pass)
    )
}

/// `list`: every exercise with your progress (your copy compiled and tested, on all cores)
/// and the chapter that assigns it: the first page of `book/src/`, in SUMMARY.md's order,
/// whose `## Exercise` section names its file (else the first page that names it at all).
pub fn cmd_list() -> Result<bool, String> {
    let list = load_exercises()?;
    ensure_copies(&list)?;
    let outcomes = run_all_yours(&list);
    let book = exercises_dir().join("..").join("book").join("src");
    let summary = fs::read_to_string(book.join("SUMMARY.md")).unwrap_or_default();
    // `[Title](page.md)` links, in reading order.
    let chapters: Vec<(String, String)> = summary
        .lines()
        .filter_map(|line| {
            let (title, rest) = line.split_once('[')?.1.split_once("](")?;
            let page = rest.split_once(')')?.0;
            Some((title.to_string(), page.to_string()))
        })
        .collect();
    let pages: Vec<(String, String)> = chapters
        .iter()
        .map(|(title, page)| {
            let text = fs::read_to_string(book.join(page)).unwrap_or_default();
            (title.clone(), text)
        })
        .collect();
    let width = list.iter().map(|e| e.name.len()).max().unwrap_or(8).max(8);
    println!(
        "   #  {:width$}  {:16}  {:49}  chapter",
        "exercise", "status", "your file"
    );
    for (ex, outcome) in list.iter().zip(&outcomes) {
        // The book names the exercise by its stub's path.
        let needle = format!("exercises/{}", ex.path);
        let assigns = |text: &str| {
            text.split_once("\n## Exercise")
                .is_some_and(|(_, section)| section.contains(&needle))
        };
        let chapter = pages
            .iter()
            .find(|(_, text)| assigns(text))
            .or_else(|| pages.iter().find(|(_, text)| text.contains(&needle)))
            .map_or("-", |(title, _)| title.as_str());
        println!(
            "  {:02}  {:width$}  {} {:12}  {:49}  {chapter}",
            ex.number,
            ex.name,
            outcome.mark(),
            outcome.short(),
            ex.yours_shown()
        );
    }
    println!("\n{}", crate::build::progress(&outcomes));
    println!("`{CMD} run N` runs one with full output; `{CMD} watch` re-checks on every save.");
    Ok(true)
}
