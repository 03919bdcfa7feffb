//! Prints the gateway overhead table of BENCHMARKS.md: requests/s, p50/p99
//! latency, the proxy's CPU time and instructions per request for a direct
//! call, nginx's `proxy_pass`, a bare hyper proxy (the floor of the
//! gateway's HTTP stack) and ballast's gateway to the same local upstream,
//! with the target ratios.
//!
//! `cargo run --release -p ballast-bench --bin gateway_bench -- [--seconds 5] [--warm-up 1] [--rounds 3] [--connections 1,32] [--write]`
//! (`--idle 2000`: the memory an idle kept-alive connection holds instead;
//! `--provider 60`: also the gateway to a provider over TLS with OAuth 2.0
//! tokens of that many seconds, and what that adds to a call;
//! `--traces off,1.0,0.01`: also the gateway in processes of its own with
//! its OTLP trace exporter off and at those sample ratios, to a receiver in
//! this process, and the table of what traces cost).
//!
//! The gateway runs with the log `ballast serve` installs
//! ([`ballast_server::telemetry::init`]: events at `info` unless `RUST_LOG`
//! says otherwise, no spans), so its hop costs what it costs there. Without nginx on the machine, only direct and ballast are measured.

use std::path::PathBuf;
use std::time::Duration;

use ballast_bench::gateway_bench::{self, run, GatewayBenchOptions, NginxUse, Tracing};
use clap::Parser;

/// The overhead of one hop through ballast's gateway, beside nginx.
#[derive(Parser, Debug)]
struct Args {
    /// Measured seconds per hop and connection count.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Unmeasured seconds before each measurement.
    #[arg(long, default_value_t = 1.0)]
    warm_up: f64,
    /// Times the whole sequence runs; the table gives medians.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Connection counts.
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    connections: Vec<usize>,
    /// nginx's worker_processes.
    #[arg(long, default_value = "auto")]
    nginx_workers: String,
    /// The gateway's event loops, `[gateway] workers` (default: one per core, as `ballast serve`).
    #[arg(long)]
    ballast_threads: Option<usize>,
    /// The nginx executable (default: `nginx` on PATH or /usr/sbin/nginx).
    #[arg(long, conflicts_with = "no_nginx")]
    nginx: Option<PathBuf>,
    /// Measure direct and ballast only.
    #[arg(long)]
    no_nginx: bool,
    /// Instead of the hops, the memory one idle kept-alive connection holds
    /// in the gateway, over this many connections.
    #[arg(long, value_name = "N")]
    idle: Option<usize>,
    /// Keyed writes instead of reads: each request a `POST` with a body and
    /// an `Idempotency-Key` of its own (to a system that deduplicates by it).
    #[arg(long)]
    write: bool,
    /// Also the gateway to a provider over TLS (a CA of its own) with OAuth
    /// 2.0 tokens that live this many seconds, and the table of what that adds.
    #[arg(long, value_name = "TOKEN_SECONDS")]
    provider: Option<u64>,
    /// Trace settings to measure besides: `off` and sample ratios.
    #[arg(long, value_delimiter = ',')]
    traces: Vec<String>,
    /// Instead of the hops, the gateway's memory while callers download
    /// answers of this many MB through it at once (`--callers`).
    #[arg(long, value_name = "MB")]
    download: Option<u64>,
    /// Concurrent downloads for `--download`.
    #[arg(long, default_value_t = 3)]
    callers: usize,
    /// (internal) Serve a gateway for this upstream and print its address.
    #[arg(long, hide = true, value_name = "UPSTREAM")]
    serve_child: Option<std::net::SocketAddr>,
    /// (internal) The child's trace setting.
    #[arg(long, hide = true, default_value = "off")]
    tracing: String,
    /// (internal) The child's OTLP receiver.
    #[arg(long, hide = true, default_value = "")]
    collector: String,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(|_| "unknown".to_owned(), |s| s.trim().to_owned())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(upstream) = args.serve_child {
        return gateway_bench::served::serve_child(upstream, Tracing::parse(&args.tracing)?, &args.collector);
    }
    let _log = ballast_server::telemetry::init(None)?;
    if let Some(n) = args.idle {
        let per = ballast_bench::gateway_bench::idle_memory(n)?;
        println!("{n} idle kept-alive connections: {:.1} KiB of resident memory each", per as f64 / 1024.0);
        return Ok(());
    }
    if let Some(mb) = args.download {
        let before = loadavg();
        let exe = std::env::current_exe()?;
        let downloaded = ballast_bench::gateway_bench::download::run(&exe, mb * 1_000_000, args.callers)?;
        println!("{}", downloaded.report());
        println!("load average before: {before}; after: {}", loadavg());
        return Ok(());
    }
    let seconds = |s: f64| Duration::try_from_secs_f64(s).map_err(|e| anyhow::anyhow!("{s} s: {e}"));
    let opts = GatewayBenchOptions {
        connections: args.connections,
        warm_up: seconds(args.warm_up)?,
        measure: seconds(args.seconds)?,
        rounds: args.rounds,
        nginx: match (args.no_nginx, args.nginx) {
            (true, _) => NginxUse::Skip,
            (false, Some(path)) => NginxUse::At(path),
            (false, None) => NginxUse::IfInstalled,
        },
        nginx_workers: args.nginx_workers,
        ballast_threads: args.ballast_threads,
        traces: args.traces.iter().map(|t| Tracing::parse(t)).collect::<anyhow::Result<_>>()?,
        serve_exe: Some(std::env::current_exe()?),
        write: args.write,
        provider: args.provider.map(Duration::from_secs),
    };
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let before = loadavg();
    let report = run(&opts, |line| eprintln!("{line}"))?;
    let after = loadavg();
    println!(
        "{} s measured after {} s warm-up per hop, {} rounds interleaved, medians; {cores} cores; nginx: {}",
        args.seconds,
        args.warm_up,
        opts.rounds,
        match &report.nginx {
            Ok(version) => format!("{version}, worker_processes {}", opts.nginx_workers),
            Err(why) => why.clone(),
        }
    );
    println!("load average before: {before}; after: {after}\n");
    println!("{}", report.table());
    if let Some(why) = &report.instructions_missing {
        println!("Instructions not counted: {why}.\n");
    }
    print!("{}", report.ratio_table());
    let provider = report.provider_table();
    if !provider.is_empty() {
        println!("\nA provider over TLS with OAuth 2.0 tokens (the same gateway's CPU beside the plain hop):\n\n{provider}");
    }
    let traces = report.traces_table();
    if !traces.is_empty() {
        println!("\nTraces (each gateway a process of its own, CPU of the whole process):\n\n{traces}");
    }
    Ok(())
}
