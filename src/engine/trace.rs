//! Recordings: the engine's snapshots written as a Chrome trace (book: live-view.md).
//!
//! Chrome's trace event format (a JSON array of events with `ph`, `ts` in microseconds,
//! `pid`/`tid`) is what Perfetto and `chrome://tracing` open, so an engineer sees a run
//! in the tool they know: one slice per iteration (its snapshot in the slice's `args`),
//! counter tracks for the pool and the queue, one async slice per request from the
//! iteration it was first seen to the one it left, and an instant for each preemption.
//! kvlab's own page replays the same file from the snapshots in the slices' `args`.
//!
//! Written as it goes, one line per event. The format lets the closing `]` be missing
//! (a server killed mid-run leaves a file both readers still open); [`TraceWriter::finish`]
//! writes it when the run ends cleanly.

use super::snapshot::{RowKind, Snapshot};
use crate::error::{Error, Result};
use serde_json::json;
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Writes snapshots to a trace file as they come.
pub struct TraceWriter {
    out: BufWriter<File>,
    path: PathBuf,
    /// Requests whose async slice is open.
    open: BTreeSet<u64>,
    events: usize,
}

/// The trace's one process, and its threads (tracks).
const PID: u32 = 1;
const TID_ENGINE: u32 = 1;

impl TraceWriter {
    /// Creates (or truncates) `path` and writes the trace's header.
    pub fn create(path: &Path) -> Result<TraceWriter> {
        let file = File::create(path).map_err(|e| {
            Error::InvalidArgument(format!(
                "cannot write the recording {}: {e} (give --record a path in a folder you can write)",
                path.display()
            ))
        })?;
        let mut writer = TraceWriter {
            out: BufWriter::new(file),
            path: path.to_path_buf(),
            open: BTreeSet::new(),
            events: 0,
        };
        writer.raw("[\n")?;
        writer.event(json!({"name": "process_name", "ph": "M", "pid": PID,
            "args": {"name": "kvlab engine"}}))?;
        writer.event(
            json!({"name": "thread_name", "ph": "M", "pid": PID, "tid": TID_ENGINE,
            "args": {"name": "iterations"}}),
        )?;
        Ok(writer)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Events written so far (metadata included).
    pub fn events(&self) -> usize {
        self.events
    }

    // ANCHOR: write_snapshot
    /// The events of one snapshot: its iteration slice, the counters, requests that
    /// arrived or left, preemptions. Flushed, so a reader sees it at once.
    pub fn write(&mut self, snap: &Snapshot) -> Result<()> {
        let dur = (snap.seconds * 1e6).round() as u64;
        let ts = snap.t_us.saturating_sub(dur);
        let rows = |kind| -> usize {
            let of_kind = snap.batch.iter().filter(|b| b.kind == kind);
            of_kind.map(|b| b.rows).sum()
        };
        let (decode, prefill) = (rows(RowKind::Decode), rows(RowKind::Prefill));
        let seen: BTreeSet<u64> = snap.requests.iter().map(|r| r.id).collect();
        for id in seen.difference(&self.open.clone()) {
            self.event(
                json!({"name": format!("request {id}"), "cat": "request", "ph": "b",
                "id": id, "ts": ts, "pid": PID, "tid": TID_ENGINE}),
            )?;
            self.open.insert(*id);
        }
        self.event(
            json!({"name": "iteration", "cat": "engine", "ph": "X", "ts": ts,
            "dur": dur.max(1), "pid": PID, "tid": TID_ENGINE,
            "args": {"decode_rows": decode, "prefill_rows": prefill, "snapshot": snap}}),
        )?;
        let t = snap.t_us;
        let p = &snap.pool;
        self.counter(
            t,
            "kv blocks",
            json!({"used": p.used, "parked": p.parked, "free": p.free}),
        )?;
        let running = snap
            .requests
            .iter()
            .filter(|r| r.state.is_running())
            .count();
        let waiting = snap.requests.len() - running;
        self.counter(
            t,
            "requests",
            json!({"running": running, "waiting": waiting}),
        )?;
        self.counter(
            t,
            "batch rows",
            json!({"decode": decode, "prefill": prefill}),
        )?;
        for id in &snap.preempted {
            self.event(
                json!({"name": format!("preempt {id}"), "cat": "engine", "ph": "i",
                "s": "p", "ts": t, "pid": PID, "tid": TID_ENGINE}),
            )?;
        }
        for id in self.open.clone().difference(&seen) {
            self.event(
                json!({"name": format!("request {id}"), "cat": "request", "ph": "e",
                "id": id, "ts": t, "pid": PID, "tid": TID_ENGINE}),
            )?;
            self.open.remove(id);
        }
        self.out.flush().map_err(|e| self.io_error(e))
    }
    // ANCHOR_END: write_snapshot

    /// Closes the array; the file is then plain JSON too.
    pub fn finish(mut self) -> Result<PathBuf> {
        self.raw("]\n")?;
        self.out.flush().map_err(|e| self.io_error(e))?;
        Ok(self.path)
    }

    fn counter(&mut self, ts: u64, name: &str, args: serde_json::Value) -> Result<()> {
        self.event(json!({"name": name, "ph": "C", "ts": ts, "pid": PID, "args": args}))
    }

    /// One event on its own line; a comma before every event but the first.
    fn event(&mut self, event: serde_json::Value) -> Result<()> {
        let sep = if self.events == 0 { "" } else { ",\n" };
        self.events += 1;
        self.raw(&format!("{sep}{event}"))
    }

    fn raw(&mut self, text: &str) -> Result<()> {
        let written = self.out.write_all(text.as_bytes());
        written.map_err(|e| self.io_error(e))
    }

    fn io_error(&self, e: std::io::Error) -> Error {
        Error::Internal(format!(
            "cannot write the recording {}: {e}",
            self.path.display()
        ))
    }
}

/// The snapshots of a recording (kvlab's or any Chrome trace holding them), in order;
/// a missing closing `]` is allowed, as in Chrome's format.
pub fn read_snapshots(text: &str) -> Result<Vec<Snapshot>> {
    let trimmed = text.trim_end().trim_end_matches(',');
    let closed = if trimmed.ends_with(']') {
        trimmed.to_string()
    } else {
        format!("{trimmed}]")
    };
    let events: Vec<serde_json::Value> = serde_json::from_str(&closed).map_err(|e| {
        Error::InvalidArgument(format!(
            "not a Chrome trace (a JSON array of events): {e}; give a file written by kvlab serve --record or kvlab record"
        ))
    })?;
    let mut snaps = Vec::new();
    for event in events {
        let Some(snap) = event.get("args").and_then(|a| a.get("snapshot")) else {
            continue;
        };
        let snap: Snapshot = serde_json::from_value(snap.clone()).map_err(|e| {
            Error::InvalidArgument(format!("a snapshot in the trace does not parse: {e}"))
        })?;
        if snap.version != super::snapshot::SNAPSHOT_VERSION {
            return Err(Error::InvalidArgument(format!(
                "the recording's snapshots are version {}, this kvlab reads version {}: record it again",
                snap.version,
                super::snapshot::SNAPSHOT_VERSION
            )));
        }
        snaps.push(snap);
    }
    Ok(snaps)
}
