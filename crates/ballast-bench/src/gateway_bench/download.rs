//! The gateway's memory while callers download large answers through it:
//! an upstream that streams `size` bytes per request (made as it sends, so
//! it holds none of them), the gateway in a process of its own (as `ballast
//! serve` runs it), `callers` downloads at once, and the gateway process's
//! resident memory sampled every 10 ms from `/proc` — before, at its peak
//! (`VmHWM`) and after.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

use super::served::{Served, Tracing};

/// The part the upstream sends at a time.
const CHUNK: usize = 64 << 10;

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Downloaded {
    /// Bytes each caller got (all of them, or the run fails).
    pub size: u64,
    /// Downloads at once.
    pub callers: usize,
    /// The gateway's resident memory before the downloads, in KiB.
    pub rss_before_kib: u64,
    /// Its peak resident memory over its life (`VmHWM`), in KiB.
    pub peak_kib: u64,
    /// Its resident memory after, in KiB.
    pub rss_after_kib: u64,
    /// How long the downloads took together.
    pub elapsed: Duration,
}

impl Downloaded {
    /// The report's lines.
    pub fn report(&self) -> String {
        let mib = |kib: u64| kib as f64 / 1024.0;
        let total = self.size as f64 * self.callers as f64;
        format!(
            "{} concurrent downloads of {} MB through the gateway: {:.1} s, {:.0} MB/s in all\n\
             gateway resident memory: {:.1} MiB before, {:.1} MiB at its peak (VmHWM), {:.1} MiB after",
            self.callers,
            self.size / 1_000_000,
            self.elapsed.as_secs_f64(),
            total / 1e6 / self.elapsed.as_secs_f64(),
            mib(self.rss_before_kib),
            mib(self.peak_kib),
            mib(self.rss_after_kib),
        )
    }
}

/// Runs `callers` downloads of `size` bytes through a gateway started as
/// `exe --serve-child`.
pub fn run(exe: &Path, size: u64, callers: usize) -> anyhow::Result<Downloaded> {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(async move {
        let upstream = upstream(size).await?;
        let served = Served::start(exe, upstream, Tracing::Off, "http://127.0.0.1:9")?;
        let pid = served.pid();
        let rss_before_kib = status(pid, "VmRSS")?;
        let started = Instant::now();
        let mut downloads = tokio::task::JoinSet::new();
        for i in 0..callers {
            downloads.spawn(download(served.addr(), i));
        }
        // Sampled as it goes too: a peak the kernel's `VmHWM` would also show,
        // but printed so a run can be watched.
        let mut peak_seen = rss_before_kib;
        let mut sample = tokio::time::interval(Duration::from_millis(10));
        let mut got = Vec::new();
        while got.len() < callers {
            tokio::select! {
                done = downloads.join_next() => match done {
                    Some(done) => got.push(done??),
                    None => break,
                },
                _ = sample.tick() => peak_seen = peak_seen.max(status(pid, "VmRSS").unwrap_or(0)),
            }
        }
        let elapsed = started.elapsed();
        for bytes in &got {
            anyhow::ensure!(*bytes == size, "a caller got {bytes} bytes of {size}");
        }
        let peak_kib = status(pid, "VmHWM")?.max(peak_seen);
        let rss_after_kib = status(pid, "VmRSS")?;
        Ok(Downloaded { size, callers, rss_before_kib, peak_kib, rss_after_kib, elapsed })
    })
}

/// One download: its bytes, each checked against the pattern.
async fn download(gateway: SocketAddr, caller: usize) -> anyhow::Result<u64> {
    let stream = tokio::net::TcpStream::connect(gateway).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = Request::get(format!("/call/{}/reports/{caller}.csv", super::gateway::SYSTEM))
        .header("host", gateway.to_string())
        .body(http_body_util::Empty::<Bytes>::new())?;
    let response = sender.send_request(request).await?;
    anyhow::ensure!(response.status() == 200, "the gateway answered {}", response.status());
    let mut body = response.into_body();
    let mut got = 0u64;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.context("the download broke off")?.into_data() {
            anyhow::ensure!(
                data.iter().enumerate().all(|(i, b)| *b == pattern(got + i as u64)),
                "the bytes at {got} are not the upstream's"
            );
            got += data.len() as u64;
        }
    }
    Ok(got)
}

/// The byte at `offset` of every download.
fn pattern(offset: u64) -> u8 {
    (offset % 251) as u8
}

/// An upstream answering every request with `size` bytes of the pattern,
/// made a chunk at a time as the connection takes them.
async fn upstream(size: u64) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("binding the upstream")?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = hyper::service::service_fn(move |_: Request<hyper::body::Incoming>| {
                let chunks = futures_util::stream::unfold(0u64, move |sent| async move {
                    (sent < size).then(|| {
                        let len = (size - sent).min(CHUNK as u64);
                        let chunk: Bytes = (sent..sent + len).map(pattern).collect::<Vec<u8>>().into();
                        (Ok::<_, Infallible>(Frame::data(chunk)), sent + len)
                    })
                });
                let mut response = Response::new(StreamBody::new(chunks));
                response.headers_mut().insert(hyper::header::CONTENT_LENGTH, size.into());
                std::future::ready(Ok::<_, Infallible>(response))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    Ok(addr)
}

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`).
fn status(pid: u32, field: &str) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading /proc (Linux)")?;
    text.lines()
        .find_map(|line| {
            line.strip_prefix(field)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse().ok()
        })
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}
