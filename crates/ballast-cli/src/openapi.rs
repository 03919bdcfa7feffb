//! `ballast openapi import SPEC --system NAME`: the routes table of a system
//! from its OpenAPI document, to paste into the configuration (see
//! `ballast_config::openapi` for which operation gets which kind).

use std::path::PathBuf;
use std::process::ExitCode;

use ballast_config::Config;

/// Arguments of `ballast openapi`.
#[derive(Debug, clap::Args)]
pub struct OpenapiArgs {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print `[systems.NAME.routes]` for every operation of an OpenAPI 3.0
    /// or 3.1 document (YAML or JSON): reads, keyed writes (the operation
    /// takes the idempotency header) and writes sent once, each with the
    /// rule that decided it and the document's line.
    Import {
        /// The OpenAPI document.
        #[arg(value_name = "SPEC")]
        spec: PathBuf,
        /// The system the routes are for.
        #[arg(long)]
        system: String,
        /// A configuration to take the system's `idempotency_header` from.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The idempotency header (default: the system's, else `Idempotency-Key`).
        #[arg(long, value_name = "NAME")]
        header: Option<String>,
    },
}

pub fn run(args: &OpenapiArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        Command::Import { spec, system, config, header } => {
            let header = match (header, config) {
                (Some(header), _) => header.clone(),
                (None, Some(file)) => {
                    let config =
                        Config::load(file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
                    config.idempotency_header(system)
                }
                (None, None) => ballast_http::DEFAULT_IDEMPOTENCY_HEADER.to_owned(),
            };
            let doc = ballast_config::openapi::read(spec, &header)?;
            print!("{}", doc.routes_toml(system));
            Ok(ExitCode::SUCCESS)
        }
    }
}
