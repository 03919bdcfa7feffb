//! `ballast` — the command line of ballast: check (`lint`) and explain
//! (`explain`) resilience configurations, run the end-to-end `demo`,
//! administer the durable queue (`queue`), run the worker that delivers its
//! deferred writes (`serve`), list the replicas of a fleet (`fleet`) and
//! type a TypeScript app's system names (`codegen ts`).
//!
//! The binary parses arguments, calls the libraries (`ballast-config`,
//! `ballast-queue`, `ballast-server`) and prints; everything a library user
//! would also want lives there. One module per subcommand.

mod codegen;
mod demo;
mod explain;
mod fleet;
mod format;
mod lint;
mod migrate;
mod openapi;
mod queue;
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Resilient calls to external systems, checked before code review.
#[derive(Debug, Parser)]
#[command(name = "ballast", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check configuration files against the guide's rules; exit 0 clean (or
    /// only warnings/notes), 1 on any error, 2 when a file cannot be read or parsed.
    Lint(lint::LintArgs),
    /// Show each system's worst-case timeline: in-memory attempts and waits,
    /// then the durable schedule and its total against key_ttl.
    Explain(explain::ExplainArgs),
    /// Run the whole story against a local, deliberately unreliable payment
    /// gateway: a naive client and ballast side by side, then a report.
    Demo(demo::DemoArgs),
    /// Administer the durable queue: stats, list, retry, cancel, prune. Exit
    /// 0 done, 1 when there was nothing to act on, 2 on bad arguments or an
    /// unreachable database.
    Queue(queue::QueueArgs),
    /// Work with a system's OpenAPI document: `import` prints its routes
    /// table (reads, keyed writes, writes sent once).
    Openapi(openapi::OpenapiArgs),
    /// List the replicas of `ballast serve` on the configuration's
    /// PostgreSQL queue: live or gone, version, configuration digest (drift
    /// flagged), clock.
    Fleet(fleet::FleetArgs),
    /// Generate code from the configuration: `ts` prints the systems as a
    /// TypeScript declaration that types `@ballast/client`'s system names.
    Codegen(codegen::CodegenArgs),
    /// Run the durable worker that delivers deferred writes to the configured
    /// systems, serving /metrics, /health/live and /health/ready; exit 1 if
    /// the configuration has errors, 0 after SIGTERM or Ctrl-C.
    Serve(serve::ServeArgs),
}

/// A file could not be read or parsed, or the arguments name nothing that exists.
const EXIT_UNUSABLE: u8 = 2;

/// The configuration at `path`, or — when it cannot be read or parsed — its
/// findings printed and the exit code that says so.
fn load_config(path: &std::path::Path) -> Result<ballast_config::Config, ExitCode> {
    ballast_config::Config::load(path).map_err(|e| {
        eprint!("{}", ballast_config::report::human(&e.findings(), e.input()));
        ExitCode::from(EXIT_UNUSABLE)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Lint(args) => lint::run(&args),
        Command::Explain(args) => explain::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Queue(args) => queue::run(&args),
        Command::Openapi(args) => openapi::run(&args),
        Command::Fleet(args) => fleet::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Codegen(args) => codegen::run(&args),
    };
    result.unwrap_or_else(|e| {
        eprintln!("error: {}", message(&e));
        ExitCode::from(EXIT_UNUSABLE)
    })
}

/// The error and its causes in one line, each cause said once: most of our
/// errors already quote their source ("cannot listen on …: Address already
/// in use"), and anyhow's `{:#}` would repeat it.
fn message(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}
