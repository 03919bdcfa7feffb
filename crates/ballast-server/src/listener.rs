//! Serving HTTP on a listener that a flood of clients cannot take down.
//!
//! A plain accept loop hands every connection a task and a file descriptor
//! for as long as the client likes: thousands of clients that send half a
//! request — or whole headers and then a large body one byte a second — hold
//! thousands of descriptors, until the process cannot open the sockets its
//! own worker needs, and the health check no longer gets through. Here, as
//! nginx and Envoy bound theirs:
//!
//! - at most `max_connections` connections are served at once, so the
//!   listener can never hold more descriptors than that;
//! - every connection must send its request headers within
//!   `header_read_timeout` (on a new connection and between the requests of a
//!   kept-alive one), and the request's body within `body_read_timeout` of its
//!   headers; a late body ends the request with [`BodyTimeout`] and the
//!   connection is closed;
//! - a connection is *working* only between the end of a request's body and
//!   the end of its answer. When every slot is taken, a new connection
//!   displaces the oldest one that is not working — one still reading headers
//!   or a body, or idle between requests — so slow clients cannot lock out a
//!   scraper or a probe;
//! - beyond `max_connections`, a small reserve of slots
//!   ([`Limits::probe_reserve`]) serves only the liveness and readiness probes
//!   (`/health/live`, `/health/ready`): even when every slot is working, a
//!   probe gets an answer. Other requests on a reserve slot are answered 503.
//!   Only when the reserve is taken too does a new connection wait in the
//!   kernel's accept queue.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use axum::Router;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;

/// Pause after an accept error such as "too many open files", so that the
/// loop does not spin while descriptors are short.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The paths a reserve slot serves.
pub const PROBE_PATHS: [&str; 3] = ["/health/live", "/health/ready", "/health/systems"];

/// The limits of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers, on a new
    /// connection and between requests of a kept-alive one.
    pub header_read_timeout: Duration,
    /// How long a client may take to send a request's body, from the end
    /// of its headers.
    pub body_read_timeout: Duration,
    /// Slots beyond `max_connections` that serve only [`PROBE_PATHS`].
    pub probe_reserve: usize,
}

/// Slots the admin listener keeps beyond `max_connections` for
/// [`PROBE_PATHS`]: a probe still gets through a full listener.
pub const PROBE_RESERVE: usize = 8;

impl Default for Limits {
    /// The admin listener's defaults ([`ServeSettings::default`](ballast_config::ServeSettings)):
    /// 256 connections, 5 s to send headers, 10 s to send a body, and
    /// [`PROBE_RESERVE`] slots kept for probes.
    fn default() -> Self {
        Self::of(&ballast_config::ServeSettings::default().listener, PROBE_RESERVE)
    }
}

impl Limits {
    /// The limits `listener`'s settings give, with `probe_reserve` slots
    /// kept for probes.
    pub fn of(listener: &ballast_config::ListenerSettings, probe_reserve: usize) -> Self {
        Self {
            max_connections: listener.max_connections,
            header_read_timeout: listener.header_read_timeout,
            body_read_timeout: listener.body_read_timeout,
            probe_reserve,
        }
    }
}

/// A request's body that took longer than `body_read_timeout` to arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request's body did not arrive within {0:?} of its headers")]
pub struct BodyTimeout(pub Duration);

/// One open connection, as the listener keeps track of it.
struct Open {
    /// Requests whose body has been read and whose answer is not done: while
    /// any, the connection is doing real work and is never displaced.
    working: AtomicUsize,
    close: CancellationToken,
    /// Holds a reserve slot: only probes are served.
    reserve: bool,
}

/// The open connections, oldest first.
#[derive(Default)]
struct Connections(Mutex<VecDeque<Arc<Open>>>);

impl Connections {
    fn list(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Open>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn open(&self, reserve: bool) -> Arc<Open> {
        let open = Arc::new(Open { working: AtomicUsize::new(0), close: CancellationToken::new(), reserve });
        self.list().push_back(Arc::clone(&open));
        open
    }

    fn closed(&self, open: &Arc<Open>) {
        self.list().retain(|o| !Arc::ptr_eq(o, open));
    }

    /// Closes the oldest connection of a normal slot that is not working;
    /// false if every one is.
    fn displace_oldest_idle(&self) -> bool {
        let list = self.list();
        let idle =
            |o: &&Arc<Open>| !o.reserve && o.working.load(Ordering::Acquire) == 0 && !o.close.is_cancelled();
        match list.iter().find(idle) {
            Some(victim) => {
                victim.close.cancel();
                true
            }
            None => false,
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` is
/// cancelled; then stops accepting (the socket closed: new connections are
/// refused), closes idle kept-alive connections, and lets requests in
/// flight finish — their answers carrying `Connection: close` — for `grace`
/// at most.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    tls: Option<crate::tls::ListenerTls>,
    shutdown: CancellationToken,
    grace: Duration,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let reserve = Arc::new(Semaphore::new(limits.probe_reserve));
    let connections = Arc::new(Connections::default());
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(&e);
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        if slots.available_permits() == 0 && connections.displace_oldest_idle() {
            tracing::debug!("every connection slot taken: closed the oldest connection not doing work");
        }
        // A displaced connection frees its slot as soon as its task sees the
        // cancellation; until then, or while every slot works, a probe's
        // connection takes the reserve.
        let free = Arc::clone(&slots).try_acquire_owned().ok();
        let kept = || Arc::clone(&reserve).try_acquire_owned().ok();
        let (slot, on_reserve) = match free.map(|s| (s, false)).or_else(|| kept().map(|k| (k, true))) {
            Some(taken) => taken,
            None => {
                let slot = tokio::select! {
                    () = shutdown.cancelled() => break,
                    slot = Arc::clone(&slots).acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => break,
                    },
                };
                (slot, false)
            }
        };
        let _ = stream.set_nodelay(true);
        let open = connections.open(on_reserve);
        let service = TowerToHyperService::new(ConnectionService {
            router: router.clone(),
            open: Arc::clone(&open),
            limits,
            peer,
        });
        let connections = Arc::clone(&connections);
        let Some(tls) = &tls else {
            let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                // Errors here are the client's (a timeout, a reset): nothing to do.
                tokio::select! {
                    _ = connection => {}
                    () = open.close.cancelled() => {}
                }
                connections.closed(&open);
                drop(slot);
            });
            continue;
        };
        let (acceptor, watcher, http) = (tls.acceptor().clone(), graceful.watcher(), http.clone());
        tokio::spawn(async move {
            // The handshake is the start of the request's headers: it has
            // their time, and a client that stalls in it is dropped.
            let served = async {
                let handshake = tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream));
                if let Ok(Ok(stream)) = handshake.await {
                    let _ = watcher.watch(http.serve_connection(TokioIo::new(stream), service)).await;
                }
            };
            tokio::select! {
                () = served => {}
                () = open.close.cancelled() => {}
            }
            connections.closed(&open);
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        tracing::debug!("connections still open after {grace:?}; closing them");
    }
}

/// The router as one connection serves it: bodies bounded in time, the
/// connection marked working while a request's answer is being made.
#[derive(Clone)]
struct ConnectionService {
    router: Router,
    open: Arc<Open>,
    limits: Limits,
    peer: std::net::SocketAddr,
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, std::convert::Infallible>> + Send>>;

impl tower::Service<Request<Incoming>> for ConnectionService {
    type Response = Response<Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Incoming>) -> BoxFuture {
        if self.open.reserve && !PROBE_PATHS.contains(&request.uri().path()) {
            let busy =
                (StatusCode::SERVICE_UNAVAILABLE, "every connection slot is busy; try again shortly\n");
            return Box::pin(std::future::ready(Ok(axum::response::IntoResponse::into_response(busy))));
        }
        let state = Arc::new(RequestState { open: Arc::clone(&self.open), counted: AtomicBool::new(false) });
        let (parts, body) = request.into_parts();
        if http_body::Body::is_end_stream(&body) {
            state.body_done();
        }
        let body = Timed {
            inner: body,
            deadline: None,
            by: tokio::time::Instant::now() + self.limits.body_read_timeout,
            limit: self.limits.body_read_timeout,
            state: Some(Arc::clone(&state)),
        };
        let mut request = Request::from_parts(parts, Body::new(body));
        // What axum's `ConnectInfo` reads: the login limiter keys on it.
        request.extensions_mut().insert(axum::extract::ConnectInfo(self.peer));
        let router = self.router.clone();
        Box::pin(async move {
            let response = tower::ServiceExt::oneshot(router, request).await;
            drop(state);
            response
        })
    }
}

/// Counts a request as working from the end of its body to the end of its
/// answer (when this is dropped).
struct RequestState {
    open: Arc<Open>,
    counted: AtomicBool,
}

impl RequestState {
    fn body_done(&self) {
        if !self.counted.swap(true, Ordering::AcqRel) {
            self.open.working.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl Drop for RequestState {
    fn drop(&mut self) {
        if *self.counted.get_mut() {
            self.open.working.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

pin_project_lite::pin_project! {
    /// A request body that must arrive within its limit.
    struct Timed {
        #[pin]
        inner: Incoming,
        // Armed only when the body is not there at once: most bodies are.
        deadline: Option<Pin<Box<Sleep>>>,
        by: tokio::time::Instant,
        limit: Duration,
        state: Option<Arc<RequestState>>,
    }
}

impl http_body::Body for Timed {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        if this.state.is_none() {
            return Poll::Ready(None);
        }
        match this.inner.poll_frame(cx) {
            Poll::Ready(None) => {
                if let Some(state) = this.state.take() {
                    state.body_done();
                }
                Poll::Ready(None)
            }
            Poll::Ready(Some(frame)) => Poll::Ready(Some(frame.map_err(Into::into))),
            Poll::Pending => match this
                .deadline
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(*this.by)))
                .as_mut()
                .poll(cx)
            {
                Poll::Ready(()) => {
                    // The rest is never read: hyper closes the connection once
                    // the handler has answered (408, or whatever it makes of it).
                    this.state.take();
                    Poll::Ready(Some(Err(Box::new(BodyTimeout(*this.limit)))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.state.is_none() || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
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
