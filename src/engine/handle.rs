//! The engine on its own OS thread, and the handle a server talks to it through
//! (book: scheduling.md).
//!
//! The forward pass is compute-bound and runs for milliseconds: on an async runtime's
//! threads it would block every other task (tokio's docs say so of any CPU-heavy work).
//! So the loop owns a thread of its own. A submit puts the request in an inbox (under a
//! mutex, with a condition variable to wake the loop) and returns at once with a
//! [`RequestStream`]: an unbounded channel the loop sends the request's events into,
//! which an async handler awaits and a test reads blocking. Dropping the stream cancels
//! the request: the loop frees its blocks at its next iteration.
//!
//! An iteration that fails (an error, or a panic: a bug) must not take the server with
//! it, nor leave submits queued for a loop that is gone. The loop fails every request it
//! holds, drops the engine (its pool's state is unknown midway through a step), starts a
//! fresh one on the same model, and goes on; `/metrics` counts the restarts.
//!
//! Watchers (the live view's event stream, a recording) get a [`Snapshot`] of the engine
//! after every iteration, through a broadcast channel that keeps only the latest few: a
//! watcher that reads slowly skips pictures (each one is whole) and never holds the loop
//! back or makes it buffer. With no watcher and no recording, no snapshot is made.

use super::engine::Engine;
use super::metrics::EngineMetrics;
use super::request::{validate, EngineConfig, Event, Request, SubmitError, Validated};
use super::snapshot::TokenText;
use super::trace::TraceWriter;
use crate::batch::BatchModel;
use crate::error::Result;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::broadcast;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// What the handles share with the loop.
struct Shared {
    inbox: Mutex<Inbox>,
    wake: Condvar,
    next_id: AtomicU64,
    model: Arc<dyn BatchModel>,
    config: EngineConfig,
    restarts: AtomicU64,
    /// Every snapshot, as JSON, to whoever watches (the live view).
    snapshots: broadcast::Sender<Arc<str>>,
    text: Arc<TokenText>,
    recorder: Mutex<Option<TraceWriter>>,
    started: Instant,
    /// The loop's thread, for [`EngineHandle::join`].
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// How the engine can be watched: how its snapshots show token ids, and a recording.
pub struct View {
    /// Token ids to text (the tokenizer's decode).
    pub text: Arc<TokenText>,
    /// Writes every iteration's snapshot (`--record`).
    pub record: Option<TraceWriter>,
}

impl Default for View {
    fn default() -> View {
        View {
            text: Arc::new(|ids: &[u32]| format!("{ids:?}")),
            record: None,
        }
    }
}

/// Snapshots a slow watcher may fall behind by before it skips to the latest.
const SNAPSHOTS_KEPT: usize = 16;

/// A failure planted in the next iteration, to test the restart (tests/server_hostile.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The step returns an error.
    Error,
    /// The step panics.
    Panic,
}

#[derive(Default)]
struct Inbox {
    new: Vec<(u64, Validated, UnboundedSender<Event>)>,
    cancelled: Vec<u64>,
    /// Requests in the engine's waiting queue at its last iteration.
    waiting: usize,
    metrics: EngineMetrics,
    shut_down: bool,
    fault: Option<Fault>,
    /// A watcher joined: send it the engine as it is, even if idle.
    snapshot_wanted: bool,
}

impl Shared {
    fn inbox(&self) -> MutexGuard<'_, Inbox> {
        // A panic while holding the lock leaves plain data behind: keep going.
        self.inbox.lock().unwrap_or_else(|e| e.into_inner())
    }
}

// ANCHOR: handle
/// A running engine: its loop runs on its own OS thread. Cheap to clone, Send + Sync.
#[derive(Clone)]
pub struct EngineHandle {
    shared: Arc<Shared>,
}

impl EngineHandle {
    /// Starts the engine loop on a new thread.
    pub fn spawn(model: Arc<dyn BatchModel>, config: EngineConfig) -> Result<EngineHandle> {
        EngineHandle::spawn_with_view(model, config, View::default())
    }

    /// Starts the engine loop, watchable through `view`.
    pub fn spawn_with_view(
        model: Arc<dyn BatchModel>,
        config: EngineConfig,
        view: View,
    ) -> Result<EngineHandle> {
        let engine = Engine::new(model.clone(), config.clone())?;
        // The counters of the empty engine (every block free), so that `/metrics` is
        // right before the first iteration too.
        let inbox = Inbox {
            metrics: engine.metrics(),
            ..Inbox::default()
        };
        let shared = Arc::new(Shared {
            inbox: Mutex::new(inbox),
            wake: Condvar::new(),
            next_id: AtomicU64::new(0),
            model,
            config,
            restarts: AtomicU64::new(0),
            snapshots: broadcast::channel(SNAPSHOTS_KEPT).0,
            text: view.text,
            recorder: Mutex::new(view.record),
            started: Instant::now(),
            thread: Mutex::new(None),
        });
        let for_loop = shared.clone();
        let thread = std::thread::Builder::new()
            .name("kvlab-engine".into())
            .spawn(move || run_loop(engine, for_loop))
            .map_err(|e| {
                crate::error::Error::Internal(format!("cannot start the engine thread: {e}"))
            })?;
        *shared.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread);
        Ok(EngineHandle { shared })
    }

    /// Queues `request`. Refused at once when it can never run, when the waiting queue
    /// is full, or when the engine has stopped.
    pub fn submit(&self, request: Request) -> std::result::Result<RequestStream, SubmitError> {
        let s = &self.shared;
        let valid = validate(s.model.config(), &s.config, request).map_err(SubmitError::Invalid)?;
        let mut inbox = s.inbox();
        if inbox.shut_down {
            return Err(SubmitError::ShutDown);
        }
        if inbox.waiting + inbox.new.len() >= s.config.max_waiting {
            return Err(SubmitError::QueueFull { retry_after_s: 1 });
        }
        let id = s.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = unbounded_channel();
        inbox.new.push((id, valid, sender));
        s.wake.notify_one();
        Ok(RequestStream {
            id,
            receiver,
            shared: s.clone(),
        })
    }

    /// A snapshot of the counters, as of the last iteration.
    pub fn metrics(&self) -> EngineMetrics {
        self.shared.inbox().metrics.clone()
    }

    /// The engine's snapshots from now on, as JSON; the first shows it as it is now.
    pub fn watch(&self) -> broadcast::Receiver<Arc<str>> {
        let receiver = self.shared.snapshots.subscribe();
        self.shared.inbox().snapshot_wanted = true;
        self.shared.wake.notify_one();
        receiver
    }

    /// Times an iteration failed and the loop started a fresh engine.
    pub fn restarts(&self) -> u64 {
        self.shared.restarts.load(Ordering::Relaxed)
    }

    /// Makes the next iteration fail (tests only).
    #[doc(hidden)]
    pub fn inject_fault(&self, fault: Fault) {
        self.shared.inbox().fault = Some(fault);
    }

    /// Stops the loop; pending streams get `Event::Failed`, later submits `ShutDown`.
    pub fn shutdown(&self) {
        self.shared.inbox().shut_down = true;
        self.shared.wake.notify_one();
    }

    /// Waits for the loop to end after [`EngineHandle::shutdown`] (its current iteration,
    /// then the recording's last bytes). Blocks: from async code, call it in
    /// `spawn_blocking`.
    pub fn join(&self) {
        let thread = self
            .shared
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(thread) = thread {
            // A panic in the loop was already caught and reported there.
            let _ = thread.join();
        }
    }
}
// ANCHOR_END: handle

/// The events of one request. Dropping it cancels the request.
pub struct RequestStream {
    pub id: u64,
    receiver: UnboundedReceiver<Event>,
    shared: Arc<Shared>,
}

impl RequestStream {
    /// The next event; `None` after `Finished` or `Failed`.
    pub async fn next(&mut self) -> Option<Event> {
        self.receiver.recv().await
    }

    /// The same, blocking the calling thread (never call it on an async runtime's thread).
    pub fn blocking_next(&mut self) -> Option<Event> {
        self.receiver.blocking_recv()
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        // A finished request is no longer in the engine: cancelling it does nothing.
        self.shared.inbox().cancelled.push(self.id);
        self.shared.wake.notify_one();
    }
}

// ANCHOR: engine_loop
/// The loop: take new requests and cancellations, run one iteration, send the events.
fn run_loop(mut engine: Engine, shared: Arc<Shared>) {
    let mut streams: HashMap<u64, UnboundedSender<Event>> = HashMap::new();
    loop {
        let (new, cancelled, snapshot_wanted) = {
            let mut inbox = shared.inbox();
            while inbox.new.is_empty()
                && inbox.cancelled.is_empty()
                && !inbox.snapshot_wanted
                && !engine.has_work()
            {
                if inbox.shut_down || Arc::strong_count(&shared) == 1 {
                    break;
                }
                // Woken by a submit, a cancel or a shutdown; the timeout notices that
                // every handle and stream is gone.
                inbox = (shared.wake.wait_timeout(inbox, Duration::from_millis(200)))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            if inbox.shut_down || (Arc::strong_count(&shared) == 1 && !engine.has_work()) {
                break;
            }
            (
                std::mem::take(&mut inbox.new),
                std::mem::take(&mut inbox.cancelled),
                std::mem::take(&mut inbox.snapshot_wanted),
            )
        };
        for (id, valid, sender) in new {
            match engine.add_validated(id, valid) {
                Ok(()) => {
                    streams.insert(id, sender);
                }
                Err(e) => {
                    let _ = sender.send(Event::Failed {
                        message: e.to_string(),
                    });
                }
            }
        }
        for id in cancelled {
            if streams.remove(&id).is_some() {
                engine.cancel(id);
            }
        }
        if !engine.has_work() {
            shared.inbox().metrics = engine.metrics();
            if snapshot_wanted {
                publish(&engine, None, &shared);
            }
            continue;
        }
        let fault = shared.inbox().fault.take();
        // A panic becomes an error like any other: the loop outlives a bug in a step.
        let stepped = catch_unwind(AssertUnwindSafe(|| step(&mut engine, fault)))
            .unwrap_or_else(|panic| Err(crate::error::Error::Internal(panic_message(&panic))));
        let report = match stepped {
            Ok(report) => report,
            Err(e) => match restart(engine, &shared, &mut streams, &e.to_string()) {
                Some(fresh) => {
                    engine = fresh;
                    continue;
                }
                None => break,
            },
        };
        // The counters, then the watchers, then the clients: a client that reads
        // `/metrics` or the event stream once its answer is done sees its iteration.
        {
            let mut inbox = shared.inbox();
            inbox.waiting = engine.n_waiting();
            inbox.metrics = engine.metrics();
        }
        publish(&engine, Some(&report), &shared);
        for (id, event) in report.events {
            let done = matches!(event, Event::Finished { .. } | Event::Failed { .. });
            if let Some(sender) = streams.get(&id) {
                // A receiver gone without its Drop (cannot happen) would only lose events.
                let _ = sender.send(event);
            }
            if done {
                streams.remove(&id);
            }
        }
    }
    shared.inbox().shut_down = true;
    fail_all(&mut streams, "the engine has shut down");
    let recorder = shared
        .recorder
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(Err(e)) = recorder.map(TraceWriter::finish) {
        eprintln!("kvlab engine: {e}");
    }
}
// ANCHOR_END: engine_loop

// ANCHOR: publish
/// The engine's snapshot to its watchers and its recording, when it has any.
fn publish(engine: &Engine, report: Option<&super::engine::StepReport>, shared: &Shared) {
    let mut recorder = shared.recorder.lock().unwrap_or_else(|e| e.into_inner());
    if shared.snapshots.receiver_count() == 0 && recorder.is_none() {
        return; // nobody looks: no snapshot
    }
    let t_us = shared.started.elapsed().as_micros() as u64;
    let snapshot = engine.snapshot(report, t_us, &*shared.text);
    // A recording holds iterations; the picture a new watcher gets between them is not one.
    if let (Some(writer), Some(_)) = (recorder.as_mut(), report) {
        if let Err(e) = writer.write(&snapshot) {
            // The recording stops; serving goes on.
            eprintln!("kvlab engine: {e}; recording stopped");
            *recorder = None;
        }
    }
    match serde_json::to_string(&snapshot) {
        // No receiver left between the check and here: nothing to do.
        Ok(json) => drop(shared.snapshots.send(Arc::from(json))),
        Err(e) => eprintln!("kvlab engine: a snapshot does not serialize: {e}"),
    }
}
// ANCHOR_END: publish

/// One iteration, or the planted fault.
fn step(engine: &mut Engine, fault: Option<Fault>) -> Result<super::engine::StepReport> {
    match fault {
        Some(Fault::Panic) => panic!("a fault planted by inject_fault"),
        Some(Fault::Error) => Err(crate::error::Error::Internal(
            "a fault planted by inject_fault".into(),
        )),
        None => engine.step(),
    }
}

// ANCHOR: restart
/// After a failed iteration: fails every request the loop holds, drops the engine and
/// its pool (their state midway through a step is unknown), and starts a fresh one on
/// the same model. None when even that fails: the loop then stops, and submits are
/// refused with `ShutDown` rather than queued for ever.
fn restart(
    engine: Engine,
    shared: &Shared,
    streams: &mut HashMap<u64, UnboundedSender<Event>>,
    why: &str,
) -> Option<Engine> {
    eprintln!("kvlab engine: an iteration failed ({why}); starting again on a fresh KV pool");
    fail_all(
        streams,
        &format!("the engine failed in an iteration ({why}); it started again on a fresh KV pool: send the request again"),
    );
    // The old pool is freed before the new one is allocated: both would not fit a budget
    // sized to the machine.
    drop(engine);
    match Engine::new(shared.model.clone(), shared.config.clone()) {
        Ok(fresh) => {
            shared.restarts.fetch_add(1, Ordering::Relaxed);
            // The waiting queue went with the old engine.
            shared.inbox().waiting = 0;
            Some(fresh)
        }
        Err(e) => {
            eprintln!("kvlab engine: cannot start again ({e}): stopping");
            None
        }
    }
}
// ANCHOR_END: restart

/// The text of a panic's payload (`panic!` with a literal or a formatted message).
fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("a panic: {s}")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("a panic: {s}")
    } else {
        "a panic".to_string()
    }
}

fn fail_all(streams: &mut HashMap<u64, UnboundedSender<Event>>, message: &str) {
    for (_, sender) in streams.drain() {
        let _ = sender.send(Event::Failed {
            message: message.to_string(),
        });
    }
}
