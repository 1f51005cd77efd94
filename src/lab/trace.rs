//! `kvlab trace`: watch the cache's memory token by token, in every layout (book: cache-layouts.md).
//!
//! The same request runs once per layout. After each token the trace records what the
//! cache reserves, what holds live positions, and how long the step took. Drawn side by
//! side, the three shapes of the book's cache-layouts.md appear:
//! - preallocated: one big reservation before the first token, filled slowly;
//! - growable: steps that double, each paid for with a copy of everything stored;
//! - paged: a staircase of blocks that hugs the used line, never more than a block above.

use super::svg::{self, Panel, Series};
use super::timing::ms_since;
use crate::cache::{bytes_per_token, new_store, CacheKind, KvBytes, KvStore};
use crate::error::Result;
use crate::generate::{generate_with, Cached, Decoder, GenerateOptions};
use crate::model::Model;
use serde::Serialize;
use std::time::Instant;

/// One point of the trace: the state after a step.
#[derive(Debug, Clone, Serialize)]
pub struct TraceRow {
    pub layout: CacheKind,
    /// 0: before the prefill; 1: after the prefill (the first token); n: after token n.
    pub step: usize,
    /// Positions in the cache.
    pub positions: usize,
    pub bytes_reserved: usize,
    pub bytes_used: usize,
    /// Bytes the cache has copied so far to grow (growable) or to copy on write (paged).
    pub bytes_copied: usize,
    /// Time of this step's forward pass (the prefill for step 1).
    pub step_ms: f64,
}

/// The cached decoder, writing down the cache's state after every forward pass.
struct Recording<'a> {
    inner: Cached<'a, Box<dyn KvStore>>,
    layout: CacheKind,
    per_token: usize,
    rows: Vec<TraceRow>,
}

impl Recording<'_> {
    fn record(&mut self, step_ms: f64) {
        let cache = &self.inner.cache;
        self.rows.push(TraceRow {
            layout: self.layout,
            step: self.rows.len(),
            positions: cache.len(),
            bytes_reserved: cache.bytes_reserved(),
            bytes_used: cache.bytes_used(),
            bytes_copied: cache.bytes_copied(),
            step_ms,
        });
        debug_assert_eq!(cache.bytes_used(), cache.len() * self.per_token);
    }
}

impl Decoder for Recording<'_> {
    fn prefill(&mut self, prompt: &[u32]) -> Result<Vec<f32>> {
        let t = Instant::now();
        let logits = self.inner.prefill(prompt)?;
        self.record(ms_since(t));
        Ok(logits)
    }
    fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        let t = Instant::now();
        let logits = self.inner.step(token)?;
        self.record(ms_since(t));
        Ok(logits)
    }
    fn kv_bytes(&self) -> KvBytes {
        self.inner.kv_bytes()
    }
}

/// Runs `prompt` with each layout in `layouts` and records every step.
pub fn trace(
    model: &Model,
    prompt: &[u32],
    layouts: &[CacheKind],
    opts: &GenerateOptions,
    block_size: usize,
) -> Result<Vec<TraceRow>> {
    let mut rows = Vec::new();
    for &layout in layouts {
        let capacity = prompt.len() + opts.max_new_tokens;
        let mut decoder = Recording {
            inner: Cached {
                model,
                cache: new_store(&model.config, layout, capacity, block_size)?,
            },
            layout,
            per_token: bytes_per_token(&model.config),
            rows: Vec::new(),
        };
        decoder.record(0.0); // step 0: what the cache holds before the first token
        generate_with(&mut decoder, prompt, opts, |_| {})?;
        rows.append(&mut decoder.rows);
    }
    Ok(rows)
}

/// `layout,step,positions,bytes_reserved,bytes_used,bytes_copied,step_ms`, one line per row.
pub fn to_csv(rows: &[TraceRow]) -> String {
    let mut s =
        String::from("layout,step,positions,bytes_reserved,bytes_used,bytes_copied,step_ms\n");
    for r in rows {
        s.push_str(&format!(
            "{},{},{},{},{},{},{:.3}\n",
            r.layout.name(),
            r.step,
            r.positions,
            r.bytes_reserved,
            r.bytes_used,
            r.bytes_copied,
            r.step_ms
        ));
    }
    s
}

/// One column per layout: memory (MiB) on top, decode step latency (ms) below, with
/// the same y axis across each row so the layouts compare at a glance.
pub fn to_svg(rows: &[TraceRow], title: &str) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let mut layouts: Vec<CacheKind> = rows.iter().map(|r| r.layout).collect();
    layouts.dedup();
    let mem_max = rows.iter().map(|r| r.bytes_reserved).max().unwrap_or(1) as f64 / MIB;
    // Decode steps only: the prefill (step 1) takes as long as many decode steps.
    let ms_max = rows
        .iter()
        .filter(|r| r.step >= 2)
        .map(|r| r.step_ms)
        .fold(1e-3, f64::max);
    let column = |layout: CacheKind| -> (Panel, Panel) {
        let mine: Vec<&TraceRow> = rows.iter().filter(|r| r.layout == layout).collect();
        let points = |f: &dyn Fn(&TraceRow) -> f64| -> Vec<(f64, f64)> {
            mine.iter().map(|r| (r.step as f64, f(r))).collect()
        };
        let memory = Panel {
            title: format!("{} — memory", layout.name()),
            x_label: "step (0 = before prefill, 1 = prefill)".into(),
            y_label: "KV cache MiB".into(),
            series: vec![
                Series {
                    name: "reserved".into(),
                    color: "#d62728",
                    points: points(&|r| r.bytes_reserved as f64 / MIB),
                    step: true,
                },
                Series {
                    name: "used (live tokens)".into(),
                    color: "#1f77b4",
                    points: points(&|r| r.bytes_used as f64 / MIB),
                    step: true,
                },
            ],
            y_max: mem_max * 1.3,
        };
        let latency = Panel {
            title: format!("{} — decode step time", layout.name()),
            x_label: "step".into(),
            y_label: "ms".into(),
            series: vec![Series {
                name: "step latency".into(),
                color: "#2ca02c",
                points: mine
                    .iter()
                    .filter(|r| r.step >= 2)
                    .map(|r| (r.step as f64, r.step_ms))
                    .collect(),
                step: false,
            }],
            y_max: ms_max * 1.3,
        };
        (memory, latency)
    };
    let (top, bottom): (Vec<Panel>, Vec<Panel>) = layouts.into_iter().map(column).unzip();
    svg::render(title, &[top, bottom])
}
