//! Serving HTTP on a listener that a flood of clients cannot take down.
//!
//! A plain accept loop hands every connection a task and a file descriptor
//! for as long as the client likes: thousands of clients that send half a
//! request and stop hold thousands of descriptors, until the process cannot
//! open the sockets its own worker needs for its deliveries, and the health
//! check no longer gets through. Here:
//!
//! - at most `max_connections` connections are served at once, so the
//!   listener can never hold more descriptors than that;
//! - every connection must send its request headers within
//!   `header_read_timeout` (on a new connection and between the requests of a
//!   kept-alive one), or it is closed;
//! - when every slot is taken, a new connection displaces the oldest one that
//!   has not sent a whole request yet, so a flood of half-sent requests cannot
//!   lock out a scraper or a probe; only when every slot is serving requests
//!   does a new connection wait in the kernel's accept queue.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// How long in-flight requests may finish after shutdown is asked for.
const DRAIN: Duration = Duration::from_secs(5);

/// Pause after an accept error such as "too many open files", so that the
/// loop does not spin while descriptors are short.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The limits of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers, on a new
    /// connection and between requests of a kept-alive one.
    pub header_read_timeout: Duration,
}

impl Default for Limits {
    /// 256 connections, 5 s to send headers.
    fn default() -> Self {
        Self { max_connections: 256, header_read_timeout: Duration::from_secs(5) }
    }
}

/// One open connection, as the listener keeps track of it.
struct Open {
    /// Set once the client has sent a whole request: from then on the
    /// connection is doing real work and is never displaced.
    served: AtomicBool,
    close: CancellationToken,
}

/// The open connections, oldest first.
#[derive(Default)]
struct Connections(Mutex<VecDeque<Arc<Open>>>);

impl Connections {
    fn list(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Open>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn open(&self) -> Arc<Open> {
        let open = Arc::new(Open { served: AtomicBool::new(false), close: CancellationToken::new() });
        self.list().push_back(Arc::clone(&open));
        open
    }

    fn closed(&self, open: &Arc<Open>) {
        self.list().retain(|o| !Arc::ptr_eq(o, open));
    }

    /// Closes the oldest connection that has not sent a whole request;
    /// false if every connection is serving one.
    fn displace_oldest_unserved(&self) -> bool {
        let list = self.list();
        match list.iter().find(|o| !o.served.load(Ordering::Acquire) && !o.close.is_cancelled()) {
            Some(victim) => {
                victim.close.cancel();
                true
            }
            None => false,
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` is
/// cancelled, then lets in-flight requests finish (5 s at most).
pub async fn serve(listener: TcpListener, router: Router, limits: Limits, shutdown: CancellationToken) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let connections = Arc::new(Connections::default());
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(&e);
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        if slots.available_permits() == 0 && connections.displace_oldest_unserved() {
            tracing::debug!("every connection slot taken: closed the oldest connection without a request");
        }
        let slot = tokio::select! {
            () = shutdown.cancelled() => break,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let _ = stream.set_nodelay(true);
        let open = connections.open();
        let marker = Arc::clone(&open);
        let router = router.clone();
        let service = tower::service_fn(move |request| {
            marker.served.store(true, Ordering::Release);
            tower::ServiceExt::oneshot(router.clone(), request)
        });
        let connection =
            graceful.watch(http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service)));
        let connections = Arc::clone(&connections);
        tokio::spawn(async move {
            // Errors here are the client's (a timeout, a reset): nothing to do.
            tokio::select! {
                _ = connection => {}
                () = open.close.cancelled() => {}
            }
            connections.closed(&open);
            drop(slot);
        });
    }
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::debug!("connections still open after {DRAIN:?}; closing them");
    }
}

fn accept_failed(e: &io::Error) {
    // EMFILE / ENFILE: the process or the system is out of descriptors.
    if matches!(e.raw_os_error(), Some(23 | 24)) {
        tracing::warn!(error = %e, "cannot accept a connection: out of file descriptors; retrying shortly");
    } else {
        tracing::debug!(error = %e, "accept failed");
    }
}
