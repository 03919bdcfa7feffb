//! The gateway as `ballast serve` runs it, with or without its trace
//! exporter, in a process of its own (a process has one global tracing
//! subscriber, so each sampling setting needs its own): the bench binary
//! started again with `--serve-child`. Its CPU time is the whole process's —
//! runtime, queue and export thread alike.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use ballast_config::{Root, Sampler, SpanPipeline, TraceExport};

use super::gateway::BenchGateway;

/// Whether the gateway exports traces, and which share of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tracing {
    /// No exporter: what `ballast serve` does with nothing configured.
    Off,
    /// OTLP export of this many traces in a million (parent-based, so a
    /// caller's decision would win; the bench's requests carry none).
    PerMillion(u32),
}

impl Tracing {
    /// `off`, or a ratio such as `1.0` or `0.01`.
    pub fn parse(text: &str) -> anyhow::Result<Tracing> {
        if text == "off" {
            return Ok(Tracing::Off);
        }
        let ratio: f64 = text.parse().with_context(|| format!("{text:?} is neither `off` nor a ratio"))?;
        anyhow::ensure!((0.0..=1.0).contains(&ratio), "{ratio} is not a ratio from 0 to 1");
        Ok(Tracing::PerMillion((ratio * 1e6).round() as u32))
    }

    /// The ratio, for `Off` none.
    pub fn ratio(self) -> Option<f64> {
        match self {
            Tracing::Off => None,
            Tracing::PerMillion(n) => Some(f64::from(n) / 1e6),
        }
    }

    /// How the tables name it.
    pub fn label(self) -> String {
        match self.ratio() {
            None => "off".to_owned(),
            Some(r) => format!("sampled {r}"),
        }
    }

    /// As `--serve-child` takes it.
    pub fn arg(self) -> String {
        self.ratio().map_or_else(|| "off".to_owned(), |r| r.to_string())
    }
}

/// The exporter's settings for `tracing` towards `collector`: the defaults
/// `ballast serve` has with only an endpoint and a sampler configured.
fn export(tracing: Tracing, collector: &str) -> Option<TraceExport> {
    let ratio = tracing.ratio()?;
    Some(TraceExport {
        endpoint: format!("{collector}/v1/traces"),
        headers: Vec::new(),
        spans: SpanPipeline {
            service_name: "gateway-bench".to_owned(),
            sampler: Sampler { parent_based: true, root: Root::Ratio(ratio) },
            ..SpanPipeline::default()
        },
    })
}

/// A gateway process; killed when dropped.
pub struct Served {
    child: Child,
    addr: SocketAddr,
}

impl Served {
    /// Starts `exe --serve-child` for `upstream` with `tracing` towards `collector`.
    pub fn start(
        exe: &Path,
        upstream: SocketAddr,
        tracing: Tracing,
        collector: &str,
    ) -> anyhow::Result<Served> {
        let mut child = Command::new(exe)
            .args([
                "--serve-child",
                &upstream.to_string(),
                "--tracing",
                &tracing.arg(),
                "--collector",
                collector,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {}", exe.display()))?;
        let mut line = String::new();
        let stdout = child.stdout.take().context("the child's stdout")?;
        BufReader::new(stdout).read_line(&mut line)?;
        let addr =
            line.trim().parse().with_context(|| format!("the child printed {line:?}, not its address"))?;
        Ok(Served { child, addr })
    }

    /// Where its gateway listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // Closing its stdin asks it to stop; the kill is for a stuck one.
        drop(self.child.stdin.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child's side: the log (and exporter) `ballast serve` installs, the
/// gateway, its address on stdout; stops when stdin closes.
pub fn serve_child(upstream: SocketAddr, tracing: Tracing, collector: &str) -> anyhow::Result<()> {
    // The recorder first, as `ballast serve` does: the exporter's counters are taken at init.
    super::gateway::prometheus();
    let telemetry = ballast_server::telemetry::init(export(tracing, collector).as_ref())?;
    let gateway = BenchGateway::start(upstream, None)?;
    println!("{}", gateway.addr());
    let mut rest = String::new();
    while std::io::stdin().read_line(&mut rest)? > 0 {}
    drop(gateway);
    let flush = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    flush.block_on(telemetry.shutdown(Duration::from_secs(2)));
    Ok(())
}
