//! The accept loop: connections under a cap and clocks, and a drain on shutdown (book:
//! serving-http.md, "Running kvlab serve safely").
//!
//! `axum::serve` is the short way, but it gives hyper no timer, and without one hyper
//! cannot time out a request head: a client that sends one header byte every few seconds
//! (a "slow loris") holds its connection, its task and its buffers for ever, and a few
//! thousand of them take the server's file descriptors. So kvlab runs hyper itself, as
//! axum does inside `serve`, with three more things: a timer and a head timeout, a cap
//! on open connections, and a drain that lets answers under way finish when it stops.

use super::app::App;
use super::limits::Limits;
use super::router::router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde::Serialize;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::Semaphore;

/// How the server stopped.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Drained {
    /// Connections open when the shutdown came.
    pub connections: u64,
    /// Seconds the drain took.
    pub seconds: f64,
    /// Whether the drain timeout cut answers off (their requests are cancelled).
    pub cancelled: bool,
}

/// A listening socket on `addr` whose connections have `limits.send_buffer_bytes` of send
/// buffer (accepted sockets inherit it) and a queue of 1024 waiting connections (the
/// place connections over `max_connections` wait).
pub fn bind(addr: SocketAddr, limits: &Limits) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    // A restarted server may bind while the old one's connections are in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.set_send_buffer_size(limits.send_buffer_bytes)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

// ANCHOR: accept_loop
/// Serves `app` on `listener` until `shutdown` resolves; then stops accepting, gives the
/// open connections `drain_timeout` to finish their answers, and stops the engine.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<Drained> {
    let limits = app.limits;
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_header_bytes);
    let service = TowerToHyperService::new(router(app.clone()));
    // A slot is taken *before* accepting: over the cap, new connections wait in the
    // kernel's accept queue, costing the server nothing, instead of in its memory.
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    // Dropped when the drain times out: every connection still open is then closed.
    let (cut, cut_off) = tokio::sync::watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors (EMFILE) or a connection reset before it
                    // was accepted: wait a little rather than spin, and go on.
                    eprintln!("kvlab serve: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let connection = http.serve_connection(TokioIo::new(stream), service.clone());
        let connection = graceful.watch(connection);
        let open = app.connections.opened();
        let mut cut_off = cut_off.clone();
        tokio::spawn(async move {
            // A client that hangs up or times out ends its connection with an error:
            // nothing to do but free its slot. Dropping the connection closes its socket
            // and drops its answer, which cancels the request in the engine.
            tokio::select! {
                _ = connection => {},
                _ = cut_off.changed() => {},
            }
            drop((slot, open));
        });
    }
    drop(listener);
    // Streams that never end by themselves (the live view's) end now.
    app.stopping.send_replace(true);
    let connections = app.connections.open();
    let start = Instant::now();
    let cancelled = tokio::time::timeout(limits.drain_timeout, graceful.shutdown())
        .await
        .is_err();
    drop(cut);
    app.engine.shutdown();
    let engine = app.engine.clone();
    // The iteration under way ends, and the recording gets its closing bytes.
    let _ = tokio::task::spawn_blocking(move || engine.join()).await;
    Ok(Drained {
        connections,
        seconds: start.elapsed().as_secs_f64(),
        cancelled,
    })
}
// ANCHOR_END: accept_loop
