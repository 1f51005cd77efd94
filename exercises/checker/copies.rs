//! The learner's own copies of the exercises, in `exercises/mine/` (git-ignored).
//!
//! The stubs under `exercises/NN_*/` are tracked: `verify` (CI) checks them, and `git pull`
//! updates them. So the learner never edits them. On first use every learner command
//! copies each stub to `exercises/mine/NN_*/` (once; an existing copy is never
//! overwritten), and from then on `check`, `run`, `watch`, `solution` and kvlab's
//! `--impl learner` (through its `build.rs`) read the copies. `git status` stays clean
//! and `reset N` is a copy of the stub, with no git involved.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::exercises_dir;
use crate::info::Exercise;

/// Copies every stub that has no copy in `exercises/mine/` yet, and says so once. Also
/// names tracked stubs that were edited in place (the way this course worked before
/// `mine/`): the copy was made from the edited stub, so the work carries over.
pub fn ensure_copies(list: &[Exercise]) -> Result<(), String> {
    let mut made = 0;
    for ex in list {
        let yours = ex.yours();
        if yours.exists() {
            continue;
        }
        if let Some(dir) = yours.parent() {
            fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        fs::copy(ex.stub(), &yours).map_err(|e| {
            format!(
                "cannot copy exercises/{} to exercises/mine/{}: {e}",
                ex.path, ex.path
            )
        })?;
        made += 1;
    }
    if made > 0 {
        println!(
            "Made your copies of {made} exercise(s) in exercises/mine/: edit those. git ignores \
             them, and the stubs under exercises/NN_*/ stay as they are.\n"
        );
        for stub in edited_stubs() {
            println!(
                "note: {stub} (a tracked stub) has your edits; your copy in exercises/mine/ \
                 starts from them. `git checkout {stub}` puts the stub back."
            );
        }
    }
    Ok(())
}

/// The tracked stubs with uncommitted edits, as `git status` names them (empty without git).
fn edited_stubs() -> Vec<String> {
    let Some(repo) = exercises_dir().parent().map(Path::to_path_buf) else {
        return Vec::new();
    };
    let Ok(out) = Command::new("git")
        .args(["status", "--porcelain", "--", "exercises"])
        .current_dir(repo)
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.strip_prefix(" M ").or(line.strip_prefix("M  ")))
        .filter(|path| {
            let mut parts = path.split('/');
            parts.next() == Some("exercises")
                && parts.next().is_some_and(|dir| {
                    dir.len() > 3 && dir.as_bytes()[..2].iter().all(u8::is_ascii_digit)
                })
        })
        .map(str::to_string)
        .collect()
}
