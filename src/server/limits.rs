//! What one client may hold of the server, and the counts of connections (book:
//! serving-http.md, "Running kvlab serve safely").
//!
//! A server on a network meets clients that are slow, broken or hostile. Each one costs
//! a socket, a task and buffers for as long as its connection is open, so every way a
//! client can keep a connection open without making progress gets a clock or a cap.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

// ANCHOR: limits
/// The caps and clocks of `kvlab serve` (each one has a flag).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; more wait in the kernel's accept queue (`--max-connections`).
    pub max_connections: usize,
    /// A client must send its whole request head within this (`--header-timeout-s`):
    /// a slow-loris client, one header byte every few seconds, is cut off.
    pub header_timeout: Duration,
    /// The body must arrive whole within this (`--body-timeout-s`): a client that sends
    /// its body a byte at a time is answered 408.
    pub body_timeout: Duration,
    /// The request line and headers together: hyper answers 431 once it has buffered
    /// this much of a head without finding its end (it reads in growing chunks, so a head
    /// may pass up to one chunk over). It sizes hyper's read buffer: at least 8 KiB.
    pub max_header_bytes: usize,
    /// The kernel's send buffer of each connection: what a client that stops reading can
    /// leave unsent there before the server notices (Linux doubles it and grows it
    /// without bound to the system's maximum, several MiB, unless it is set).
    pub send_buffer_bytes: u32,
    /// A streamed answer whose client reads nothing for this long is cancelled
    /// (`--stream-stall-s`): its KV blocks go back to the pool.
    pub stream_stall: Duration,
    /// On SIGTERM or Ctrl-C, answers under way get this long to finish (`--drain-timeout-s`).
    pub drain_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_header_bytes: 32 * 1024,
            send_buffer_bytes: 64 * 1024,
            stream_stall: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(30),
        }
    }
}
// ANCHOR_END: limits

/// hyper refuses a read buffer under 8 KiB (it asserts), so neither may we.
pub const MIN_HEADER_BYTES: usize = 8 * 1024;

/// Connections now, at most, and in all (the gauges and counter of `GET /metrics`).
#[derive(Debug, Default)]
pub struct ConnectionCounts {
    open: AtomicU64,
    peak: AtomicU64,
    accepted: AtomicU64,
}

impl ConnectionCounts {
    /// Counts a new connection; the guard counts it closed when dropped.
    pub fn opened(self: &Arc<Self>) -> OpenConnection {
        let now = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
        self.accepted.fetch_add(1, Ordering::Relaxed);
        OpenConnection {
            counts: self.clone(),
        }
    }

    pub fn open(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

/// One open connection, counted until it is dropped.
pub struct OpenConnection {
    counts: Arc<ConnectionCounts>,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.counts.open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_stays_when_connections_close() {
        let counts = Arc::new(ConnectionCounts::default());
        let a = counts.opened();
        let b = counts.opened();
        drop(a);
        assert_eq!((counts.open(), counts.peak(), counts.accepted()), (1, 2, 2));
        drop(b);
        let _c = counts.opened();
        assert_eq!((counts.open(), counts.peak(), counts.accepted()), (1, 2, 3));
    }
}
