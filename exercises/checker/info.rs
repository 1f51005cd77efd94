//! The checker's two data files: `info.toml` (the exercises, in order, with their hints)
//! and `mutants.toml` (planted wrong answers that `verify` proves the tests catch).
//!
//! Both are read by a small hand-written parser so that the checker needs no crates. It
//! reads a subset of TOML: `# comments`, `[[table]]` headers, and `key = value` where the
//! value is a `"basic string"`, a `"""multi-line basic string"""` (escapes `\n \t \" \\`)
//! or a `'''multi-line literal string'''` (no escapes: the form for Rust code). As in
//! TOML, a newline right after the opening quotes is dropped.

use std::fs;
use std::path::PathBuf;

use crate::exercises_dir;

pub struct Exercise {
    /// 1-based position in info.toml; the directory must start with the same `NN_`.
    pub number: usize,
    pub name: String,
    /// Relative to `exercises/`, e.g. `04_softmax/softmax.rs`.
    pub path: String,
    /// Hint levels: `hints[0]` is the first nudge (`hint N`), `hints[1]` the stronger
    /// one (`hint N 2`), if the exercise has one.
    pub hints: Vec<String>,
}

impl Exercise {
    /// The tracked stub, `NN_topic/name.rs` under `exercises/` (what `verify` checks).
    pub fn stub(&self) -> PathBuf {
        exercises_dir().join(&self.path)
    }
    /// The learner's copy, the same path under `exercises/mine/` (what they edit).
    pub fn yours(&self) -> PathBuf {
        exercises_dir().join("mine").join(&self.path)
    }
    /// The learner's copy as the messages name it.
    pub fn yours_shown(&self) -> String {
        format!("exercises/mine/{}", self.path)
    }
    pub fn solution(&self) -> PathBuf {
        exercises_dir().join("solutions").join(&self.path)
    }
    pub fn label(&self) -> String {
        format!("{:02} {}", self.number, self.name)
    }
}

/// One planted wrong answer: the solution with `find` replaced by `replace`.
pub struct Mutant {
    /// The exercise's `name` in info.toml.
    pub exercise: String,
    /// What the learner got wrong, in words ("shifts by x[0] instead of the max").
    pub wrong: String,
    pub find: String,
    pub replace: String,
}

/// One `[[kind]]` table: its header's line number and its `(key, value)` pairs.
struct Table {
    kind: String,
    line: usize,
    entries: Vec<(String, String)>,
}

impl Table {
    fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

fn read(file: &str) -> Result<String, String> {
    let path = exercises_dir().join(file);
    fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

pub fn load_exercises() -> Result<Vec<Exercise>, String> {
    let mut list: Vec<Exercise> = Vec::new();
    for t in parse_tables(&read("info.toml")?, "info.toml")? {
        let at = format!("info.toml line {}", t.line);
        if t.kind != "exercises" {
            return Err(format!("{at}: unknown table [[{}]]", t.kind));
        }
        for (key, _) in &t.entries {
            if !["name", "path", "hint", "hint2"].contains(&key.as_str()) {
                return Err(format!(
                    "{at}: unknown key `{key}` (expected name, path, hint, hint2)"
                ));
            }
        }
        let (Some(name), Some(path), Some(hint)) = (t.get("name"), t.get("path"), t.get("hint"))
        else {
            return Err(format!("{at}: an exercise needs a name, a path and a hint"));
        };
        let mut hints = vec![hint.trim().to_string()];
        hints.extend(t.get("hint2").map(|h| h.trim().to_string()));
        if hints.iter().any(String::is_empty) {
            return Err(format!("{at}: empty hint"));
        }
        list.push(Exercise {
            number: list.len() + 1,
            name: name.to_string(),
            path: path.to_string(),
            hints,
        });
    }
    if list.is_empty() {
        return Err("info.toml lists no [[exercises]]".into());
    }
    Ok(list)
}

pub fn load_mutants() -> Result<Vec<Mutant>, String> {
    let mut list = Vec::new();
    for t in parse_tables(&read("mutants.toml")?, "mutants.toml")? {
        let at = format!("mutants.toml line {}", t.line);
        if t.kind != "mutants" {
            return Err(format!("{at}: unknown table [[{}]]", t.kind));
        }
        let field = |key: &str| {
            t.get(key)
                .map(|v| v.trim_end().to_string())
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| format!("{at}: a mutant needs a non-empty `{key}`"))
        };
        list.push(Mutant {
            exercise: field("exercise")?,
            wrong: field("wrong")?,
            find: field("find")?,
            // An empty replacement (delete the line) is a legal mutant.
            replace: t
                .get("replace")
                .map(|v| v.trim_end().to_string())
                .ok_or_else(|| format!("{at}: a mutant needs `replace`"))?,
        });
        for (key, _) in &t.entries {
            if !["exercise", "wrong", "find", "replace"].contains(&key.as_str()) {
                return Err(format!("{at}: unknown key `{key}`"));
            }
        }
    }
    Ok(list)
}

fn parse_tables(text: &str, file: &str) -> Result<Vec<Table>, String> {
    let mut tables: Vec<Table> = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, raw)) = lines.next() {
        let at = |msg: &str| format!("{file} line {}: {msg}", i + 1);
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(kind) = line
            .strip_prefix("[[")
            .and_then(|rest| rest.strip_suffix("]]"))
        {
            tables.push(Table {
                kind: kind.trim().to_string(),
                line: i + 1,
                entries: Vec::new(),
            });
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| at("expected `key = value`"))?;
        let (key, value) = (key.trim(), value.trim());
        let multi = if value.starts_with("\"\"\"") {
            Some(("\"\"\"", true))
        } else if value.starts_with("'''") {
            Some(("'''", false))
        } else {
            None
        };
        let value = if let Some((quotes, escapes)) = multi {
            let rest = &value[3..];
            let mut s = String::new();
            if let Some(end) = rest.find(quotes) {
                s.push_str(&rest[..end]);
            } else {
                if !rest.is_empty() {
                    s.push_str(rest);
                    s.push('\n');
                }
                loop {
                    let (_, l) = lines
                        .next()
                        .ok_or_else(|| at(&format!("unterminated {quotes} string")))?;
                    if let Some(end) = l.find(quotes) {
                        s.push_str(&l[..end]);
                        break;
                    }
                    s.push_str(l);
                    s.push('\n');
                }
            }
            if escapes {
                unescape(&s)
            } else {
                s
            }
        } else if value.len() >= 2 && value.starts_with('"') && value.ends_with('"') {
            unescape(&value[1..value.len() - 1])
        } else {
            return Err(at(
                "values must be \"strings\", \"\"\"multi-line strings\"\"\" or '''literal strings'''",
            ));
        };
        let table = tables
            .last_mut()
            .ok_or_else(|| at("key outside a [[table]]"))?;
        if table.get(key).is_some() {
            return Err(at(&format!("`{key}` given twice")));
        }
        table.entries.push((key.to_string(), value));
    }
    Ok(tables)
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(other) => out.push(other), // \" and \\ (and anything else, literally)
            None => out.push('\\'),
        }
    }
    out
}

/// `3`, `03` or `rope` -> the exercise.
pub fn find_exercise<'a>(list: &'a [Exercise], key: &str) -> Result<&'a Exercise, String> {
    let found = match key.parse::<usize>() {
        Ok(n) => list.iter().find(|e| e.number == n),
        Err(_) => list.iter().find(|e| e.name == key),
    };
    found.ok_or_else(|| {
        let names: Vec<String> = list.iter().map(Exercise::label).collect();
        format!("no exercise `{key}`; there are: {}", names.join(", "))
    })
}
