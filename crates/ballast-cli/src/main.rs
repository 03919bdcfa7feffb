//! `ballast` — check and explain resilience configurations.
//!
//! The binary only parses arguments, loads files through `ballast-config`
//! and prints; everything a library user would also want lives there. One
//! module per subcommand.

mod explain;
mod lint;

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
    Lint(lint::Args),
    /// Show each system's worst-case timeline: in-memory attempts and waits,
    /// then the durable schedule and its total against key_ttl.
    Explain(explain::Args),
}

/// A file could not be read or parsed, or the arguments name nothing that exists.
const EXIT_UNUSABLE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Lint(args) => lint::run(&args),
        Command::Explain(args) => explain::run(&args),
    };
    result.unwrap_or_else(|e| {
        eprintln!("error: {e:#}");
        ExitCode::from(EXIT_UNUSABLE)
    })
}
