//! `ballast explain FILE [--system NAME]`: each system's worst-case timeline,
//! in memory then in the durable queue, against its `key_ttl`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

/// Arguments of `ballast explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The configuration file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Only this system (default: every system in the file).
    #[arg(long, value_name = "NAME")]
    system: Option<String>,
}

pub fn run(args: &ExplainArgs) -> anyhow::Result<ExitCode> {
    let config = match crate::load_config(&args.file) {
        Ok(config) => config,
        Err(code) => return Ok(code),
    };
    let explanation = config.explain(args.system.as_deref()).context("cannot explain")?;
    std::io::stdout().write_all(explanation.to_string().as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
