//! The upstream every hop ends at: HTTP/1.1 with keep-alive, answering every
//! request at once with `200` and a small fixed body, on a thread and a
//! current-thread runtime of its own, like a small service next door.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

/// The body of every answer (64 bytes).
pub const BODY: &[u8] = br#"{"id":7,"state":"paid","amount":1000,"currency":"RUB","ok":true}"#;

/// A running upstream; stopped when dropped.
pub struct BenchUpstream {
    addr: SocketAddr,
    served: Arc<AtomicU64>,
    stop: CancellationToken,
    thread: Option<JoinHandle<()>>,
}

impl BenchUpstream {
    /// Listens on a free loopback port and answers from a thread of its own.
    pub fn start() -> anyhow::Result<BenchUpstream> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding the upstream")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let served = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let (count, stopped) = (Arc::clone(&served), stop.clone());
        let thread = std::thread::Builder::new().name("upstream".into()).spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
                while let Some(Ok((stream, _))) = stopped.run_until_cancelled(listener.accept()).await {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(serve(stream, Arc::clone(&count)));
                }
            });
        })?;
        Ok(BenchUpstream { addr, served, stop, thread: Some(thread) })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests answered so far.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

impl Drop for BenchUpstream {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(stream: tokio::net::TcpStream, served: Arc<AtomicU64>) {
    let service = hyper::service::service_fn(move |_: Request<hyper::body::Incoming>| {
        served.fetch_add(1, Ordering::Relaxed);
        let mut response = Response::new(Full::new(Bytes::from_static(BODY)));
        response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        std::future::ready(Ok::<_, Infallible>(response))
    });
    // Errors here are a client going away: nothing to do.
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
}
