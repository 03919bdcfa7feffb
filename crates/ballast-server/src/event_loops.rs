//! The gateway on an event loop per core, as nginx, Envoy and Pingora run
//! theirs: each loop is a single-threaded tokio runtime on a thread of its
//! own, accepting on a socket of its own (`SO_REUSEPORT`: the kernel spreads
//! new connections across the loops) and sending through an upstream pool of
//! its own (`HyperTransport` keeps one per thread), so a request is served
//! from accept to upstream and back on one thread — no wake-up of another
//! thread per request, which was a third of the gateway's time when the
//! server's connection task and the client's ran on different threads of
//! one shared runtime.
//!
//! What a system's calls share — breaker, bulkhead, budget, rate limit,
//! the waiting callers — stays shared across the loops. Each loop serves a
//! share of `max_connections` ([`listener::serve`]'s limits hold per loop).
//! The admin listener, the queue's worker and the trace export keep the
//! process's main runtime.

use std::io;
use std::net::SocketAddr;
use std::thread::JoinHandle;

use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::listener::{self, Limits};

/// The gateway's sockets, bound: one per loop, on one address.
#[derive(Debug)]
pub struct Sockets {
    sockets: Vec<std::net::TcpListener>,
    addr: SocketAddr,
}

impl Sockets {
    /// Binds `workers` sockets to `addr` (at least one). The address is
    /// first bound alone, so an address another process holds — even one
    /// with `SO_REUSEPORT` of its own — fails as "address in use" instead
    /// of silently sharing its connections; port 0 becomes that port.
    pub fn bind(addr: SocketAddr, workers: usize) -> io::Result<Self> {
        let alone = std::net::TcpListener::bind(addr)?;
        let addr = alone.local_addr()?;
        drop(alone);
        let sockets = shared(addr, workers.max(1))?;
        Ok(Self { sockets, addr })
    }

    /// The address every loop accepts on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many loops these sockets serve.
    pub fn loops(&self) -> usize {
        self.sockets.len()
    }

    /// The sockets themselves, one per loop, for a server of another kind
    /// on the same listening shape (the gateway bench's bare hyper proxy).
    pub fn into_listeners(self) -> Vec<std::net::TcpListener> {
        self.sockets
    }
}

/// `workers` listening sockets on `addr`, each with `SO_REUSEPORT`, their
/// group closed to every other socket.
///
/// The kernel lets any process of the same user join a reuseport group and
/// take a share of its connections — requests, tokens and all. A classic
/// BPF program on the group ([`closed_group`]) picks among the first
/// `workers` sockets only, ours, so a socket bound later gets no
/// connection; and the group is checked to hold ours alone once they are
/// bound, for one that joined in the instant between the lone bind and
/// ours.
#[cfg(target_os = "linux")]
fn shared(addr: SocketAddr, workers: usize) -> io::Result<Vec<std::net::TcpListener>> {
    use socket2::{Domain, Socket, Type};
    let sockets = (0..workers)
        .map(|_| {
            let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
            socket.set_reuse_address(true)?;
            socket.set_reuse_port(true)?;
            socket.set_nonblocking(true)?;
            socket.bind(&addr.into())?;
            socket.listen(1024)?;
            Ok(socket)
        })
        .collect::<io::Result<Vec<Socket>>>()?;
    closed_group(&sockets[0], workers)?;
    let listening = crate::listening::count(addr)?;
    if listening.is_some_and(|n| n != workers) {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "{addr}: another socket joined the gateway's {workers} as they were bound (SO_REUSEPORT, \
                 a process of the same user): stop it, or listen on another port"
            ),
        ));
    }
    Ok(sockets.into_iter().map(Into::into).collect())
}

/// Attaches to the reuseport group of `socket` a program that sends each
/// new connection to one of its first `workers` sockets, at random: the
/// sockets bound before any other could join.
#[cfg(target_os = "linux")]
fn closed_group(socket: &socket2::Socket, workers: usize) -> io::Result<()> {
    use nix::libc::{
        sock_filter, sock_fprog, BPF_A, BPF_ABS, BPF_ALU, BPF_K, BPF_LD, BPF_MOD, BPF_RET, BPF_W, SKF_AD_OFF,
        SKF_AD_RANDOM,
    };
    let op = |code: u32, k: u32| sock_filter { code: code as u16, jt: 0, jf: 0, k };
    let workers = u32::try_from(workers).map_err(|_| io::Error::other("too many gateway workers"))?;
    let mut program = [
        // A = a random number (the kernel's prandom), A %= workers, the socket's index.
        op(BPF_LD | BPF_W | BPF_ABS, (SKF_AD_OFF + SKF_AD_RANDOM) as u32),
        op(BPF_ALU | BPF_MOD | BPF_K, workers),
        op(BPF_RET | BPF_A, 0),
    ];
    // The kernel copies the program during the call.
    let fprog = sock_fprog { len: program.len() as u16, filter: program.as_mut_ptr() };
    nix::sys::socket::setsockopt(socket, nix::sys::socket::sockopt::AttachReusePortCbpf, &fprog)
        .map_err(io::Error::from)
}

/// Elsewhere `SO_REUSEPORT` does not spread connections: one socket, which
/// every loop accepts on.
#[cfg(not(target_os = "linux"))]
fn shared(addr: SocketAddr, workers: usize) -> io::Result<Vec<std::net::TcpListener>> {
    let socket = std::net::TcpListener::bind(addr)?;
    socket.set_nonblocking(true)?;
    let mut sockets = (1..workers).map(|_| socket.try_clone()).collect::<io::Result<Vec<_>>>()?;
    sockets.push(socket);
    Ok(sockets)
}

/// The loops, running.
#[derive(Debug)]
pub struct Loops {
    threads: Vec<JoinHandle<()>>,
    served: Vec<tokio::sync::oneshot::Receiver<()>>,
    released: CancellationToken,
}

impl Loops {
    /// Serves `router` on every socket, each loop within its share of
    /// `limits.max_connections`, until `shutdown` is cancelled; then each
    /// loop lets its requests in flight finish for `grace` at most
    /// ([`listener::serve`]).
    pub fn start(
        sockets: Sockets,
        router: &Router,
        limits: Limits,
        tls: Option<crate::tls::ListenerTls>,
        shutdown: &CancellationToken,
        grace: std::time::Duration,
    ) -> io::Result<Self> {
        let count = sockets.sockets.len();
        let share = Limits { max_connections: limits.max_connections.div_ceil(count).max(1), ..limits };
        let released = CancellationToken::new();
        // Until every loop is up: loops started before a failure stop serving
        // and end, instead of waiting for a release no one will send.
        let starting = shutdown.child_token();
        let mut guard = StopIfFailed(Some((starting.clone(), released.clone())));
        let (mut threads, mut served) = (Vec::with_capacity(count), Vec::with_capacity(count));
        let addr = sockets.addr;
        for (i, socket) in sockets.sockets.into_iter().enumerate() {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let (router, shutdown, released) = (router.clone(), starting.clone(), released.clone());
            let tls = tls.clone();
            let (done, finished) = tokio::sync::oneshot::channel();
            // `gw:9465/0`: which listener's loop a thread is, in `top -H`
            // (a thread's name holds 15 bytes).
            let name = format!("gw:{}/{i}", addr.port());
            let thread = std::thread::Builder::new().name(name).spawn(move || {
                runtime.block_on(async move {
                    match tokio::net::TcpListener::from_std(socket) {
                        Ok(socket) => listener::serve(socket, router, share, tls, shutdown, grace).await,
                        Err(e) => tracing::error!(error = %e, "a gateway event loop cannot take its socket"),
                    }
                    let _ = done.send(());
                    // Kept running until the process is done with it: calls
                    // it detached (deferrable writes whose caller hung up)
                    // finish here, and database connections opened on this
                    // loop stay served for the worker's last writes.
                    released.cancelled().await;
                });
            })?;
            threads.push(thread);
            served.push(finished);
        }
        guard.0 = None;
        Ok(Self { threads, served, released })
    }

    /// Waits until every loop has stopped serving (after `shutdown`).
    pub async fn served(&mut self) {
        for finished in self.served.drain(..) {
            let _ = finished.await;
        }
    }

    /// Stops the loops for good, once nothing else of the process needs
    /// them, and waits for their threads.
    pub fn release(mut self) {
        self.released.cancel();
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
    }
}

/// Stops the loops already started when starting the rest failed.
struct StopIfFailed(Option<(CancellationToken, CancellationToken)>);

impl Drop for StopIfFailed {
    fn drop(&mut self) {
        if let Some((serving, released)) = self.0.take() {
            serving.cancel();
            released.cancel();
        }
    }
}

impl Drop for Loops {
    /// Loops no one releases (their server was dropped) stop once they have
    /// served.
    fn drop(&mut self) {
        self.released.cancel();
    }
}
