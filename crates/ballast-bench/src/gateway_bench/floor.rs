//! The floor under the gateway: a bare proxy on the gateway's own HTTP
//! stack and nothing else. hyper's server hands each request to hyper's
//! client (`hyper_util`'s pooled client, as the gateway's transport uses)
//! and the answer back, bodies streamed; an event loop per core, each with a
//! socket of its own — the gateway's own `SO_REUSEPORT` group
//! ([`Sockets`]) — and an upstream pool of its own, as the gateway runs. No routing, no
//! policy, no metrics, no tracing: what it costs is what the HTTP stack
//! costs, and what the gateway costs beyond it is ballast's own.

use std::net::SocketAddr;
use std::thread::JoinHandle;

use anyhow::Context;
use ballast_server::event_loops::Sockets;
use bytes::Bytes;
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use hyper::http::uri::Authority;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio_util::sync::CancellationToken;

/// The prefix of the floor's threads' names (`fl:PORT/N`).
const THREAD_PREFIX: &str = "fl";

/// A running bare proxy; stopped when dropped.
pub struct HyperFloor {
    addr: SocketAddr,
    stop: CancellationToken,
    threads: Vec<JoinHandle<()>>,
}

impl HyperFloor {
    /// Proxies every request to `upstream`, path and query as they came,
    /// on `loops` event loops (`None`: one per core).
    pub fn start(upstream: SocketAddr, loops: Option<usize>) -> anyhow::Result<HyperFloor> {
        let loops = loops.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
        let sockets =
            Sockets::bind(([127, 0, 0, 1], 0).into(), loops).context("binding the hyper proxy's sockets")?;
        let addr = sockets.local_addr();
        let stop = CancellationToken::new();
        let mut threads = Vec::with_capacity(loops);
        for (n, socket) in sockets.into_listeners().into_iter().enumerate() {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let stop = stop.clone();
            let thread = std::thread::Builder::new()
                .name(format!("{THREAD_PREFIX}:{}/{n}", addr.port()))
                .spawn(move || runtime.block_on(serve(socket, upstream, stop)))?;
            threads.push(thread);
        }
        Ok(HyperFloor { addr, stop, threads })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The names its threads start with, by which its CPU time is found.
    pub fn threads(&self) -> Vec<String> {
        vec![format!("{THREAD_PREFIX}:{}/", self.addr.port())]
    }
}

impl Drop for HyperFloor {
    fn drop(&mut self) {
        self.stop.cancel();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// One loop: accepts on `socket` and proxies each connection's requests
/// through this loop's own pool.
async fn serve(socket: std::net::TcpListener, upstream: SocketAddr, stop: CancellationToken) {
    let Ok(listener) = tokio::net::TcpListener::from_std(socket) else { return };
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Incoming> = Client::builder(TokioExecutor::new()).build(connector);
    let Ok(upstream) = Authority::try_from(upstream.to_string()) else { return };
    while let Some(Ok((stream, _))) = stop.run_until_cancelled(listener.accept()).await {
        let _ = stream.set_nodelay(true);
        let (client, upstream) = (client.clone(), upstream.clone());
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let (client, upstream) = (client.clone(), upstream.clone());
            async move { Ok::<_, std::convert::Infallible>(forward(&client, upstream, request).await) }
        });
        tokio::spawn(async move {
            // Errors here are a client going away: nothing to do.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// `request` sent on to `upstream`, its answer streamed back; `502` when
/// the upstream cannot be reached.
async fn forward(
    client: &Client<HttpConnector, Incoming>,
    upstream: Authority,
    request: Request<Incoming>,
) -> Response<Either<Incoming, Empty<Bytes>>> {
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let Ok(uri) = Uri::builder().scheme("http").authority(upstream).path_and_query(path).build() else {
        return status(StatusCode::BAD_REQUEST);
    };
    parts.uri = uri;
    match client.request(Request::from_parts(parts, body)).await {
        Ok(answer) => answer.map(Either::Left),
        Err(_) => status(StatusCode::BAD_GATEWAY),
    }
}

fn status(status: StatusCode) -> Response<Either<Incoming, Empty<Bytes>>> {
    let mut answer = Response::new(Either::Right(Empty::new()));
    *answer.status_mut() = status;
    answer
}
