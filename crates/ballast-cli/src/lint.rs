//! `ballast lint FILE…`: every finding of each file, drawn like a
//! compiler's or as one JSON array; the exit code says whether any is an error.
//! A file with a breaker the fleet holds is also read against the fleet on
//! its PostgreSQL queue (unless `--offline`): a `quorum` above the replicas
//! that ran at once in the last day is a warning.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::format::Format;
use ballast_config::{report, Config, Finding};

/// Arguments of `ballast lint`.
#[derive(Debug, clap::Args)]
pub struct LintArgs {
    /// Configuration files to check.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Also check a system's routes against its OpenAPI document:
    /// `SYSTEM=payments.yaml`, or `payments.yaml` when the file has one
    /// system. Repeatable.
    #[arg(long, value_name = "[SYSTEM=]SPEC")]
    openapi: Vec<String>,
    /// Read only the files: do not compare a fleet breaker's `quorum` with
    /// the replicas that ran on the configuration's PostgreSQL queue in
    /// the last day.
    #[arg(long)]
    offline: bool,
}

/// How far back a fleet breaker's quorum is compared with the replicas.
const LATELY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The findings of the configuration at `path` against the fleet on its
/// PostgreSQL queue: none when it holds no breaker for the fleet, a note
/// when the fleet's database cannot be read.
fn against_fleet(path: &std::path::Path) -> Vec<Finding> {
    let Ok(config) = Config::load(path) else { return Vec::new() };
    let fleet_breaker = config.system_names().filter_map(|name| config.system(name)).any(|system| {
        system.breaker.as_ref().and_then(|b| b.section()).is_some_and(|b| b.scope.as_deref() == Some("fleet"))
    });
    let Some(queue) = config.queue().ok().filter(|_| fleet_breaker) else { return Vec::new() };
    let read = async {
        let view = ballast_fleet::FleetView::reading(&queue.url).await?;
        view.most_at_once(LATELY).await
    };
    let most = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|runtime| runtime.block_on(read).map_err(|e| e.to_string()));
    match most {
        Ok(replicas) => config.check_fleet(replicas, "in the last day"),
        Err(error) => vec![Finding {
            rule: None,
            severity: ballast::Severity::Note,
            file: path.display().to_string(),
            location: None,
            span: None,
            message: format!(
                "the fleet at {} could not be read ({error}): the fleet breakers' quorum is not checked against \
                 the replicas that ran",
                ballast::redact_url(&queue.url)
            ),
            help: "run lint where the fleet's database is reachable, or pass --offline".to_owned(),
        }],
    }
}

/// The findings of the configuration at `path` against each OpenAPI document.
fn against_openapi(path: &std::path::Path, specs: &[String]) -> anyhow::Result<Vec<Finding>> {
    let config = Config::load(path).map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e))?;
    let mut found = Vec::new();
    for spec in specs {
        let (system, file) = match spec.split_once('=') {
            Some((system, file)) => (system.to_owned(), file),
            None => {
                let names: Vec<&str> = config.system_names().collect();
                match names.as_slice() {
                    [only] => ((*only).to_owned(), spec.as_str()),
                    _ => anyhow::bail!(
                        "--openapi {spec}: {} has {} systems ({}); say which: --openapi SYSTEM={spec}",
                        path.display(),
                        names.len(),
                        names.join(", ")
                    ),
                }
            }
        };
        if config.system(&system).is_none() {
            anyhow::bail!("--openapi {spec}: {} has no system {system:?}", path.display());
        }
        let doc =
            ballast_config::openapi::read(std::path::Path::new(file), &config.idempotency_header(&system))?;
        found.extend(config.check_openapi(&system, &doc));
    }
    Ok(found)
}

pub fn run(args: &LintArgs) -> anyhow::Result<ExitCode> {
    let mut all: Vec<Finding> = Vec::new();
    let mut human = String::new();
    let mut unusable = false;
    for path in &args.files {
        // Unknown keys and wrong types are error findings beside the rules'
        // (exit 1); only an unreadable file or broken TOML is unusable (exit 2).
        let (findings, source) = match Config::check_file(path) {
            Ok(checked) => (checked.findings, Some(checked.source)),
            Err(e) => {
                unusable = true;
                (e.findings(), e.input().cloned())
            }
        };
        let mut findings = findings;
        if !args.offline && !findings.iter().any(Finding::is_error) {
            findings.extend(against_fleet(path));
        }
        human.push_str(&report::human(&findings, source.as_ref()));
        human.push_str(&report::summary(&path.display().to_string(), &findings));
        human.push('\n');
        all.extend(findings);
        if !args.openapi.is_empty() {
            let found = against_openapi(path, &args.openapi)?;
            human.push_str(&report::human(&found, None));
            all.extend(found);
        }
    }
    let out = match args.format {
        Format::Human => human,
        Format::Json => report::json(&all) + "\n",
    };
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(if unusable {
        ExitCode::from(crate::EXIT_UNUSABLE)
    } else if ballast_config::has_errors(&all) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
