//! `kvlab trace`: watch the cache's memory token by token, in every layout (book: cache-layouts.md).
//!
//! The same request runs once per layout. After each token the trace records what the
//! cache reserves, what holds live positions, and how long the step took. Drawn side by
//! side, the three shapes of the book's cache-layouts.md appear:
//! - preallocated: one big reservation before the first token, filled slowly;
//! - growable: steps that double, each paid for with a copy of everything stored;
//! - paged: a staircase of blocks that hugs the used line, never more than a block above.
//!
//! The drawing is the binary's (`kvlab trace` and `kvlab plot` draw these rows with plotters).

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
