//! The load generator: `connections` kept-alive HTTP/1.1 connections, each
//! sending its next request as soon as the last answer is read in full
//! (closed loop), the latency of every request of the measured window
//! recorded in an HdrHistogram (1 ns to 60 s, 3 significant digits).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;

/// The longest a request may take before the run fails: far beyond any
/// latency of a working hop, short enough that a stuck one ends the run.
const PATIENCE: Duration = Duration::from_secs(10);

/// How much load, for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    /// Concurrent connections, one request in flight on each.
    pub connections: usize,
    /// Requests sent first and not counted (pools fill, caches warm).
    pub warm_up: Duration,
    /// The measured window that follows.
    pub measure: Duration,
    /// Keyed writes instead of reads: `POST` with a body and an
    /// `Idempotency-Key` of its own per request.
    pub write: bool,
}

/// The body of a keyed write.
const WRITE_BODY: &[u8] = br#"{"amount":100,"currency":"EUR"}"#;

/// What one run of a [`Load`] measured.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Requests started in the measured window, all answered as expected.
    pub requests: u64,
    /// Requests answered in all, the warm-up's included.
    pub total: u64,
    /// From the start of the measured window to the last answer.
    pub elapsed: Duration,
    /// Their latencies in ns, from sending the request to having read the
    /// whole answer.
    pub latencies: Histogram<u64>,
}

impl Sample {
    /// Requests per second.
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    /// The latency at `quantile` (0.5 for the median).
    pub fn latency(&self, quantile: f64) -> Duration {
        Duration::from_nanos(self.latencies.value_at_quantile(quantile))
    }
}

/// Sends `GET {path}` (or keyed `POST`s, [`Load::write`]) to `addr` under `load`; every answer must be `200`
/// with `body`, or the run fails: a hop that answers errors fast is not
/// faster.
pub async fn run(addr: SocketAddr, path: &str, body: &[u8], load: Load) -> anyhow::Result<Sample> {
    if load.connections == 0 || load.measure.is_zero() {
        bail!("a load needs at least one connection and a measured window");
    }
    let start = Instant::now();
    let window = (start + load.warm_up, start + load.warm_up + load.measure);
    let mut connections = Vec::with_capacity(load.connections);
    // Keys no earlier run used: a gateway that remembers keys must not join them.
    let run_id =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    for n in 0..load.connections {
        let keys = load.write.then(|| format!("bench-{run_id:x}-{n}"));
        let connection = connection(addr, path.to_owned(), Bytes::copy_from_slice(body), window, keys);
        connections.push(tokio::spawn(connection));
    }
    let mut latencies = histogram();
    let mut last = window.0;
    let mut total = 0;
    for connection in connections {
        let (histogram, answered, done) = connection.await.context("a connection task failed")??;
        latencies.add(&histogram).context("merging latencies")?;
        total += answered;
        last = last.max(done);
    }
    let requests = latencies.len();
    if requests == 0 {
        bail!("no request was answered within the measured window");
    }
    Ok(Sample { requests, total, elapsed: last.duration_since(window.0), latencies })
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// One connection's loop: its latencies, how many answers it read in all
/// and when its last measured answer came.
async fn connection(
    addr: SocketAddr,
    path: String,
    expected: Bytes,
    (from, until): (Instant, Instant),
    keys: Option<String>,
) -> anyhow::Result<(Histogram<u64>, u64, Instant)> {
    let stream =
        tokio::net::TcpStream::connect(addr).await.with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let connection = tokio::spawn(connection);
    let host = addr.to_string();
    let mut latencies = histogram();
    let mut answered = 0;
    let mut last = from;
    loop {
        sender.ready().await.with_context(|| format!("{addr} closed the connection"))?;
        let request = match &keys {
            None => Request::get(path.as_str()).header(HOST, host.as_str()).body(Full::new(Bytes::new()))?,
            Some(prefix) => Request::post(path.as_str())
                .header(HOST, host.as_str())
                .header(CONTENT_TYPE, "application/json")
                .header("idempotency-key", format!("{prefix}-{answered}"))
                .body(Full::new(Bytes::from_static(WRITE_BODY)))?,
        };
        let sent = Instant::now();
        if sent >= until {
            break;
        }
        let exchange = async {
            let response = sender.send_request(request).await?;
            let status = response.status();
            anyhow::Ok((status, response.into_body().collect().await?.to_bytes()))
        };
        let (status, body) = tokio::time::timeout(PATIENCE, exchange)
            .await
            .with_context(|| format!("{path} on {addr}: no answer within {PATIENCE:?}"))?
            .with_context(|| format!("{path} on {addr}: no answer"))?;
        let done = Instant::now();
        if status != StatusCode::OK || body != expected {
            bail!("{path} on {addr} answered {status}: {:?}", String::from_utf8_lossy(&body));
        }
        answered += 1;
        if sent >= from {
            latencies.record(done.duration_since(sent).as_nanos() as u64)?;
            last = done;
        }
    }
    // Without its sender the connection closes; wait for that, so that no
    // idle connection of this run is left open on the hop during the next.
    drop(sender);
    let _ = connection.await;
    Ok((latencies, answered, last))
}
