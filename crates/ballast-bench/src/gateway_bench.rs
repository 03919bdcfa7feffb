//! The overhead of one hop through ballast's gateway: a local upstream that
//! answers at once, called directly, through nginx's `proxy_pass` (the
//! reference hop) and through the gateway (`/call/up/…`), in the same run.
//!
//! Shared by the `gateway_bench` bin (the table of BENCHMARKS.md) and a smoke
//! test that runs it for a fraction of a second so it cannot rot.
//!
//! For every connection count, the hops are measured one after the
//! other, and the whole sequence is repeated `rounds` times, so a burst of
//! load elsewhere on the machine hits one round of each hop rather than all
//! rounds of one; each figure of the report is the median over the rounds.
//!
//! - [`upstream`]: the upstream (hyper, one thread, 64-byte body, keep-alive);
//! - [`gateway`]: ballast's gateway in-process;
//! - [`nginx`]: nginx as a child process;
//! - [`floor`]: a bare proxy on the gateway's HTTP stack (hyper's server to
//!   hyper's client, nothing else), the floor under the gateway's cost;
//! - [`served`]: the gateway in a process of its own, with or without its
//!   trace exporter (to an OTLP receiver in this process), for the cost of
//!   traces;
//! - [`load`]: the closed-loop load generator and its latency histogram;
//! - [`cpu`]: the CPU time each proxy spent per request;
//! - [`instructions`]: the instructions each proxy executed per request;
//! - [`download`]: the gateway's memory while large answers stream through it.

pub mod cpu;
pub mod download;
pub mod floor;
pub mod gateway;
pub mod instructions;
pub mod load;
pub mod nginx;
mod report;
pub mod served;
pub mod upstream;

use report::{micros, thousands};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

pub use load::{Load, Sample};
pub use served::Tracing;

/// Set, the smoke test runs the nginx hop too, and fails if nginx is missing.
pub const NGINX_ENV: &str = "BALLAST_TEST_NGINX";

/// The most ballast's added median latency may be, as a multiple of nginx's
/// (at one connection: above that the cores are saturated and the p50 is queueing).
pub const LATENCY_TARGET: f64 = 1.5;

/// The most CPU time per proxied request ballast may spend, as a multiple of nginx's.
pub const CPU_TARGET: f64 = 1.5;

/// The most CPU time and instructions per proxied request ballast may
/// spend, as a multiple of the bare hyper proxy's ([`floor`]).
pub const FLOOR_TARGET: f64 = 1.15;

/// The least ballast's requests/s may be, as a fraction of nginx's.
pub const THROUGHPUT_TARGET: f64 = 0.8;

/// A way to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hop {
    /// Straight to the upstream.
    Direct,
    /// Through nginx's `proxy_pass`.
    Nginx,
    /// Through a bare proxy on the gateway's HTTP stack ([`floor`]).
    HyperProxy,
    /// Through ballast's gateway.
    Ballast,
    /// Through ballast's gateway to a provider reached over TLS with an
    /// OAuth 2.0 token (`--provider`).
    Provider,
    /// Through the gateway in a `ballast serve`-like process, traces as given.
    Served(Tracing),
}

impl Hop {
    /// How the table names it.
    pub fn label(self) -> String {
        match self {
            Hop::Direct => "direct".to_owned(),
            Hop::Nginx => "nginx proxy_pass".to_owned(),
            Hop::HyperProxy => "hyper proxy".to_owned(),
            Hop::Ballast => "ballast gateway".to_owned(),
            Hop::Provider => "ballast gateway, TLS + OAuth 2.0".to_owned(),
            Hop::Served(tracing) => format!("ballast gateway, traces {}", tracing.label()),
        }
    }
}

/// Whether to measure the nginx hop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NginxUse {
    /// Not at all.
    Skip,
    /// If an nginx executable is found; otherwise the report says it is missing.
    IfInstalled,
    /// Always: a missing nginx is an error.
    Required,
    /// This executable.
    At(PathBuf),
}

/// What to run.
#[derive(Debug, Clone)]
pub struct GatewayBenchOptions {
    /// The connection counts, each a measurement of every hop.
    pub connections: Vec<usize>,
    /// Unmeasured requests before each measurement.
    pub warm_up: Duration,
    /// The measured window of each measurement.
    pub measure: Duration,
    /// How often the whole sequence runs; the report gives medians.
    pub rounds: usize,
    /// Whether to measure nginx.
    pub nginx: NginxUse,
    /// nginx's `worker_processes` (`auto` or a number).
    pub nginx_workers: String,
    /// The gateway's event loops (`None`: one per core, as `ballast serve`).
    pub ballast_threads: Option<usize>,
    /// Trace settings to measure, each a gateway process of its own
    /// exporting to an OTLP receiver here (empty: none).
    pub traces: Vec<Tracing>,
    /// The executable that serves a gateway with `--serve-child` (this bench's own).
    pub serve_exe: Option<PathBuf>,
    /// Keyed writes (`POST`, an `Idempotency-Key` each) instead of reads.
    pub write: bool,
    /// Also the gateway to a provider over TLS with OAuth 2.0 tokens that
    /// live this long (`None`: not measured).
    pub provider: Option<Duration>,
}

/// One row of the report: one hop at one connection count, medians over the rounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The hop.
    pub hop: Hop,
    /// Concurrent connections.
    pub connections: usize,
    /// Requests per second.
    pub rate: f64,
    /// Median latency.
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
    /// The proxy's CPU time (user and system) per request, warm-up
    /// included; `None` for the direct call or where `/proc` cannot tell.
    pub cpu: Option<Duration>,
    /// Spans the OTLP receiver got per request, for a traced gateway.
    pub spans: Option<f64>,
    /// The proxy's instructions per request, warm-up included; `None` for
    /// the direct call or where the counters cannot be read.
    pub instructions: Option<f64>,
}

/// The target ratios at one connection count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratios {
    /// Concurrent connections.
    pub connections: usize,
    /// ballast's p50 minus the direct p50, divided by nginx's; `None` when
    /// nginx added nothing measurable.
    pub added_p50: Option<f64>,
    /// ballast's requests/s divided by nginx's.
    pub throughput: f64,
    /// ballast's CPU time per request divided by nginx's.
    pub cpu: Option<f64>,
    /// ballast's CPU time per request divided by the bare hyper proxy's.
    pub floor_cpu: Option<f64>,
    /// ballast's instructions per request divided by the bare hyper proxy's.
    pub floor_instructions: Option<f64>,
    /// The bare hyper proxy's CPU time per request divided by nginx's.
    pub floor_over_nginx: Option<f64>,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct GatewayBenchReport {
    /// Every hop at every connection count.
    pub rows: Vec<Row>,
    /// The nginx used (its version line), or why there is none.
    pub nginx: Result<String, String>,
    /// The provider hop's token requests and calls, warm-ups included.
    pub provider_tokens: Option<(u64, u64)>,
    /// Why instructions were not counted, where they were not.
    pub instructions_missing: Option<String>,
}

/// Runs every measurement of `opts`; `progress` hears of each one as it ends.
pub fn run(opts: &GatewayBenchOptions, mut progress: impl FnMut(&str)) -> anyhow::Result<GatewayBenchReport> {
    if opts.connections.is_empty() || opts.rounds == 0 {
        anyhow::bail!("give at least one connection count and one round");
    }
    let upstream = upstream::BenchUpstream::start()?;
    let binary = match &opts.nginx {
        NginxUse::Skip => Err("not measured".to_owned()),
        NginxUse::IfInstalled => nginx::find().ok_or_else(|| "not installed".to_owned()),
        NginxUse::Required => Ok(nginx::find().with_context(|| {
            format!("{NGINX_ENV} is set but nginx is not installed (apt-get install nginx)")
        })?),
        NginxUse::At(path) => Ok(path.clone()),
    };
    let nginx = match &binary {
        Ok(binary) => Some(nginx::Nginx::start(binary, upstream.addr(), &opts.nginx_workers)?),
        Err(_) => None,
    };
    let nginx_label = binary.map(|b| nginx::version(&b).unwrap_or_else(|| b.display().to_string()));
    let gateway = gateway::BenchGateway::start(upstream.addr(), opts.ballast_threads)?;
    let floor = floor::HyperFloor::start(upstream.addr(), opts.ballast_threads)?;
    let pki = tempfile::tempdir()?;
    let provider = match opts.provider {
        None => None,
        Some(lifetime) => {
            let ca = ballast_test_support::pki::Ca::new("Bench Provider CA");
            let tls = ballast_test_support::ServerTls::new(ca.server(&["127.0.0.1"]));
            let upstream = upstream::BenchUpstream::start_provider(&tls, lifetime)?;
            let ca_file = ca.write(pki.path(), "ca");
            let gateway = gateway::BenchGateway::provider(upstream.addr(), opts.ballast_threads, &ca_file)?;
            Some((upstream, gateway))
        }
    };
    // The receiver of the traced gateways, on a thread of this process.
    let receiver = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let collector = receiver.block_on(ballast_test_support::otlp::Collector::counting());
    let mut served = Vec::new();
    for &tracing in &opts.traces {
        let exe =
            opts.serve_exe.as_deref().context("traced gateways need the executable that serves them")?;
        served.push((tracing, served::Served::start(exe, upstream.addr(), tracing, &collector.endpoint())?));
    }

    let direct_path = "/orders/7";
    let proxied_path = format!("{}{}", nginx::PREFIX, direct_path.trim_start_matches('/'));
    let gateway_path = format!("/call/{}{direct_path}", gateway::SYSTEM);
    let mut hops: Vec<(Hop, SocketAddr, &str, Option<cpu::Who>, &upstream::BenchUpstream)> =
        vec![(Hop::Direct, upstream.addr(), direct_path, None, &upstream)];
    if let Some(nginx) = &nginx {
        hops.push((Hop::Nginx, nginx.addr(), &proxied_path, Some(cpu::Who::Process(nginx.pid())), &upstream));
    }
    hops.push((
        Hop::HyperProxy,
        floor.addr(),
        direct_path,
        Some(cpu::Who::Threads(floor.threads())),
        &upstream,
    ));
    hops.push((
        Hop::Ballast,
        gateway.addr(),
        &gateway_path,
        Some(cpu::Who::Threads(gateway.threads())),
        &upstream,
    ));
    if let Some((provider_upstream, provider_gateway)) = &provider {
        let who = cpu::Who::Threads(provider_gateway.threads());
        hops.push((Hop::Provider, provider_gateway.addr(), &gateway_path, Some(who), provider_upstream));
    }
    for (tracing, child) in &served {
        let who = Some(cpu::Who::Process(child.pid()));
        hops.push((Hop::Served(*tracing), child.addr(), &gateway_path, who, &upstream));
    }

    let client = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut samples: BTreeMap<(usize, Hop), Vec<Measured>> = BTreeMap::new();
    let mut instructions_missing = None;
    for round in 1..=opts.rounds {
        for &connections in &opts.connections {
            for (hop, addr, path, who, upstream) in &hops {
                let (hop, addr, path) = (*hop, *addr, *path);
                let load =
                    Load { connections, warm_up: opts.warm_up, measure: opts.measure, write: opts.write };
                // A machine that could not count once will not the next time.
                let counting = who
                    .as_ref()
                    .filter(|_| instructions_missing.is_none())
                    .map(instructions::Counting::start);
                let before = (upstream.served(), who.as_ref().and_then(cpu::used), collector.span_count());
                let sample = client
                    .block_on(load::run(addr, path, upstream::BODY, load))
                    .with_context(|| format!("{} at {connections} connections", hop.label()))?;
                let counted = counting.map(|c| c.and_then(instructions::Counting::stop));
                let instructions = match counted {
                    Some(Ok(count)) => Some(count as f64 / sample.total.max(1) as f64),
                    Some(Err(why)) => {
                        instructions_missing.get_or_insert(why);
                        None
                    }
                    None => None,
                };
                anyhow::ensure!(
                    upstream.served() - before.0 >= sample.total,
                    "{} answered requests the upstream never saw",
                    hop.label()
                );
                let cpu = match (before.1, who.as_ref().and_then(cpu::used)) {
                    (Some(before), Some(after)) => {
                        Some(after.saturating_sub(before).div_f64(sample.total.max(1) as f64))
                    }
                    _ => None,
                };
                let spans = matches!(hop, Hop::Served(_))
                    .then(|| (collector.span_count() - before.2) as f64 / sample.total.max(1) as f64);
                progress(&format!(
                    "round {round}/{}: {} at {connections} connections: {} requests, {:.0}/s, p50 {}, p99 {}, CPU/request {}, instructions/request {}",
                    opts.rounds,
                    hop.label(),
                    sample.requests,
                    sample.rate(),
                    micros(sample.latency(0.5)),
                    micros(sample.latency(0.99)),
                    cpu.map_or("–".to_owned(), micros),
                    instructions.map_or("–".to_owned(), thousands),
                ));
                samples.entry((connections, hop)).or_default().push(Measured {
                    sample,
                    cpu,
                    spans,
                    instructions,
                });
            }
        }
    }
    let rows =
        samples.into_iter().map(|((connections, hop), rounds)| medians(hop, connections, &rounds)).collect();
    let provider_tokens =
        provider.as_ref().map(|(upstream, _)| (upstream.tokens_issued(), upstream.served()));
    Ok(GatewayBenchReport { rows, nginx: nginx_label, provider_tokens, instructions_missing })
}

/// The memory one idle kept-alive connection holds in the gateway: `n`
/// connections each send one request, read its answer and stay open; the
/// process's resident memory grows by the result × `n` (the clients are
/// plain sockets, holding no memory of their own worth counting; kernel
/// socket buffers are not resident memory).
pub fn idle_memory(n: usize) -> anyhow::Result<u64> {
    use std::io::{Read, Write};
    let upstream = upstream::BenchUpstream::start()?;
    let gateway = gateway::BenchGateway::start(upstream.addr(), None)?;
    let request = format!("GET /call/{}/orders/7 HTTP/1.1\r\nHost: localhost\r\n\r\n", gateway::SYSTEM);
    let open = |count: usize| -> anyhow::Result<Vec<std::net::TcpStream>> {
        let mut sockets = Vec::with_capacity(count);
        for _ in 0..count {
            let mut socket = std::net::TcpStream::connect(gateway.addr())?;
            socket.write_all(request.as_bytes())?;
            let mut answer = [0u8; 4096];
            let read = socket.read(&mut answer)?;
            anyhow::ensure!(
                answer[..read].starts_with(b"HTTP/1.1 200"),
                "the gateway did not answer 200: {}",
                String::from_utf8_lossy(&answer[..read])
            );
            sockets.push(socket);
        }
        Ok(sockets)
    };
    // A first round warms the allocator and the pools up.
    drop(open(n.min(64))?);
    std::thread::sleep(Duration::from_millis(200));
    let before = resident()?;
    let sockets = open(n)?;
    std::thread::sleep(Duration::from_millis(200));
    let after = resident()?;
    drop(sockets);
    Ok(after.saturating_sub(before) / n.max(1) as u64)
}

/// This process's resident memory, in bytes.
fn resident() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .context("no VmRSS in /proc/self/status")?;
    Ok(kib * 1024)
}

/// One measurement: the load's sample, the proxy's CPU time per request
/// and, for a traced gateway, the spans received per request.
struct Measured {
    sample: Sample,
    cpu: Option<Duration>,
    spans: Option<f64>,
    instructions: Option<f64>,
}

/// The row of `hop` at `connections`: each figure the median over the rounds.
fn medians(hop: Hop, connections: usize, rounds: &[Measured]) -> Row {
    let seconds = |f: fn(&Measured) -> f64| Duration::from_secs_f64(median(rounds.iter().map(f)));
    Row {
        hop,
        connections,
        rate: median(rounds.iter().map(|m| m.sample.rate())),
        p50: seconds(|m| m.sample.latency(0.5).as_secs_f64()),
        p99: seconds(|m| m.sample.latency(0.99).as_secs_f64()),
        cpu: rounds
            .iter()
            .all(|m| m.cpu.is_some())
            .then(|| seconds(|m| m.cpu.unwrap_or_default().as_secs_f64())),
        spans: rounds
            .iter()
            .all(|m| m.spans.is_some())
            .then(|| median(rounds.iter().map(|m| m.spans.unwrap_or_default()))),
        instructions: rounds
            .iter()
            .all(|m| m.instructions.is_some())
            .then(|| median(rounds.iter().map(|m| m.instructions.unwrap_or_default()))),
    }
}

/// The middle value (the mean of the two middle ones for an even count).
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_numbers_read_as_the_table_shows_them() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), 2.0);
        assert_eq!(median([4.0, 1.0, 2.0, 3.0].into_iter()), 2.5);
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
    }

    #[test]
    fn an_nginx_that_cannot_start_fails_the_run_and_says_why() {
        let opts = GatewayBenchOptions {
            connections: vec![1],
            warm_up: Duration::ZERO,
            measure: Duration::from_millis(10),
            rounds: 1,
            nginx: NginxUse::At("/nonexistent/nginx".into()),
            nginx_workers: "1".to_owned(),
            ballast_threads: None,
            traces: Vec::new(),
            serve_exe: None,
            write: false,
            provider: None,
        };
        let err = run(&opts, |_| {}).expect_err("no nginx there");
        assert!(format!("{err:#}").contains("cannot start /nonexistent/nginx"), "{err:#}");
    }

    /// Every hop at two connection counts for a fraction of a second, reads
    /// then keyed writes; nginx only when `BALLAST_TEST_NGINX` is set, and
    /// then it must be there.
    #[test]
    fn smoke() {
        smoke_of(false);
        smoke_of(true);
    }

    fn smoke_of(write: bool) {
        let nginx = if std::env::var_os(NGINX_ENV).is_some() {
            NginxUse::Required
        } else {
            eprintln!("nginx hop skipped: {NGINX_ENV} not set");
            NginxUse::Skip
        };
        let measured_nginx = nginx == NginxUse::Required;
        let opts = GatewayBenchOptions {
            connections: vec![1, 4],
            warm_up: Duration::from_millis(50),
            measure: Duration::from_millis(200),
            rounds: 1,
            nginx,
            nginx_workers: "1".to_owned(),
            ballast_threads: None,
            traces: Vec::new(),
            serve_exe: None,
            write,
            provider: Some(Duration::from_secs(60)),
        };
        let report = run(&opts, |line| eprintln!("{line}")).expect("the bench runs");
        let hops = if measured_nginx { 5 } else { 4 };
        assert_eq!(report.rows.len(), 2 * hops, "{report:#?}");
        for row in &report.rows {
            assert!(row.rate > 0.0 && row.p50 > Duration::ZERO && row.p50 <= row.p99, "{row:?}");
        }
        let table = report.table();
        assert_eq!(table.lines().count(), 2 + report.rows.len(), "{table}");
        assert!(table.contains("| ballast gateway | 4 |"), "{table}");
        assert!(table.contains("| ballast gateway, TLS + OAuth 2.0 | 4 |"), "{table}");
        assert!(table.contains("| hyper proxy | 4 |"), "{table}");
        let (tokens, calls) = report.provider_tokens.expect("the provider was measured");
        assert!(tokens == 1 && calls > 0, "one token for the run's {calls} calls, not {tokens}");
        assert!(report.provider_table().contains("token requests"), "{}", report.provider_table());
        assert_eq!(report.ratios().len(), if measured_nginx { 2 } else { 0 });
        assert!(report.ratio_table().contains(if measured_nginx { "target" } else { "No ratios" }));
    }
}
