//! `ballast fleet --config FILE`: the replicas of `ballast serve` on the
//! configuration's PostgreSQL queue, one line each — `live` or `gone`, the
//! host and process, the version, the configuration's digest (flagged
//! `drift` when it differs from most live replicas') and the clock (flagged
//! when more than a second off the database's). What the replicas wrote
//! is printed with its control characters shown, not obeyed: a row of the
//! database cannot drive the operator's terminal.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;

use crate::format::Format;

/// Arguments of `ballast fleet`.
#[derive(Debug, clap::Args)]
pub struct FleetArgs {
    /// The configuration whose `[queue] url` the fleet shares.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// `human` (one line per replica) or `json`.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
}

pub fn run(args: &FleetArgs) -> anyhow::Result<ExitCode> {
    let config = match crate::load_config(&args.config) {
        Ok(config) => config,
        Err(code) => return Ok(code),
    };
    let queue = config.queue().context("the configuration's [queue]")?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let replicas = runtime.block_on(async {
        let view = ballast_fleet::FleetView::connect(&queue.url).await?;
        view.replicas().await
    });
    let replicas = replicas.with_context(|| format!("the fleet at {}", ballast::redact_url(&queue.url)))?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string(&replicas)?),
        Format::Human => {
            if replicas.is_empty() {
                println!("no replica has joined this fleet in the last hour");
            }
            for r in &replicas {
                let mut flags = Vec::new();
                if r.drift {
                    flags.push("drift: another configuration than most live replicas".to_owned());
                }
                if r.clock_off {
                    flags.push(format!("clock {:+.0} ms off the database's", r.clock_skew_ms));
                }
                let up = SystemTime::now().duration_since(r.started_at).unwrap_or_default();
                println!(
                    "{:<4} {}  {}:{}  {}  config {}  up {}  heartbeat {} ago  admin {}{}",
                    r.state.as_str(),
                    &r.id.simple().to_string()[24..],
                    field(&r.identity.host),
                    r.identity.pid,
                    field(&r.identity.version),
                    field(&r.identity.config_digest),
                    humantime::format_duration(Duration::from_secs(up.as_secs())),
                    humantime::format_duration(Duration::from_secs(r.heartbeat_age.as_secs())),
                    field(&r.identity.admin),
                    if flags.is_empty() { String::new() } else { format!("  [{}]", flags.join("; ")) },
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A field a replica wrote, on one line of a terminal: its control
/// characters shown as escapes (`\u{1b}`), a line break among them, so a
/// row can neither drive the terminal nor forge a line of its own.
fn field(text: &str) -> String {
    ballast_config::report::printable(text).replace('\n', "\\u{a}").replace('\t', "\\u{9}")
}
