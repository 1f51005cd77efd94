//! What every figure reads: the data folder's JSON reports, and the fields inside them
//! (each missing piece an error that names it).

use super::chart::DrawResult;
use serde_json::Value;
use std::path::PathBuf;

/// The data folder, read on demand.
pub struct Data {
    pub dir: PathBuf,
}

impl Data {
    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    fn text(&self, file: &str) -> DrawResult<String> {
        let path = self.path(file);
        std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "cannot read {}: {e} (run bash scripts/figures.sh)",
                path.display()
            )
            .into()
        })
    }

    /// `file` as one JSON value.
    pub fn json(&self, file: &str) -> DrawResult<Value> {
        serde_json::from_str(&self.text(file)?)
            .map_err(|e| format!("{}: not JSON: {e}", self.path(file).display()).into())
    }

    /// `file` as JSON lines (one value per non-empty line).
    pub fn jsonl(&self, file: &str) -> DrawResult<Vec<Value>> {
        self.text(file)?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l).map_err(|e| {
                    format!("{}: a line is not JSON: {e}", self.path(file).display()).into()
                })
            })
            .collect()
    }

    /// The exact command(s) that produced `file` (`NAME.cmd` beside `NAME.json`).
    pub fn cmd(&self, file: &str) -> DrawResult<String> {
        let stem = file.split('.').next().unwrap_or(file);
        let text = self.text(&format!("{stem}.cmd"))?;
        let cmds: Vec<String> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| format!("`{}`", l.trim()))
            .collect();
        Ok(cmds.join("; "))
    }
}

/// A field of a JSON report, or an error naming it.
pub fn field<'a>(v: &'a Value, key: &str) -> DrawResult<&'a Value> {
    v.get(key)
        .ok_or_else(|| format!("the report has no field {key:?} (regenerate the data)").into())
}

pub fn num(v: &Value, key: &str) -> DrawResult<f64> {
    field(v, key)?
        .as_f64()
        .ok_or_else(|| format!("field {key:?} is not a number").into())
}

pub fn array<'a>(v: &'a Value, key: &str) -> DrawResult<&'a Vec<Value>> {
    field(v, key)?
        .as_array()
        .ok_or_else(|| format!("field {key:?} is not a list").into())
}

pub fn nums(v: &Value, key: &str) -> DrawResult<Vec<f64>> {
    array(v, key)?
        .iter()
        .map(|x| {
            x.as_f64()
                .ok_or_else(|| format!("field {key:?} holds a non-number").into())
        })
        .collect()
}

/// `x` with thousands separators: 4,884,480.
pub fn thousands(x: usize) -> String {
    let s = x.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
