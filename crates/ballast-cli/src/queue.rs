//! `ballast queue --db URL stats | list | retry | cancel | prune`: look into
//! the durable queue and act on its tasks through `ballast-queue`'s admin API.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::format::Format;
use anyhow::{bail, Context as _};
use ballast_config::duration;
use ballast_queue::{Backend, KindStats, ListFilter, Queue, TaskInfo, TaskState, TABLE};
use serde_json::{json, Value};

/// How long to wait for the database before calling it unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Characters of `last_error` shown in a human table.
const ERROR_WIDTH: usize = 60;

/// Arguments of `ballast queue`.
#[derive(Debug, clap::Args)]
pub struct QueueArgs {
    /// The queue's database: sqlite://path/to/tasks.db, postgres://user@host/db,
    /// or a path to a SQLite file.
    #[arg(long, global = true, value_name = "URL")]
    db: Option<String>,
    /// Output format.
    #[arg(long, global = true, value_enum, default_value_t = Format::Human)]
    format: Format,
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Task counts per kind and state, and how long the oldest due task has
    /// waited (the queue's lag).
    Stats,
    /// Tasks in id order, one page at a time.
    List {
        /// Only tasks in this state: pending, running, completed, failed or cancelled.
        #[arg(long, value_parser = parse_state)]
        state: Option<TaskState>,
        /// Only tasks of this kind.
        #[arg(long)]
        kind: Option<String>,
        /// Page size.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Only tasks with a greater id (the last id of the previous page).
        #[arg(long, value_name = "ID", default_value_t = 0)]
        after: i64,
    },
    /// Put failed tasks back to pending, due now, with a fresh set of
    /// attempts; exit 1 if there was none. JSON: `{"retried": COUNT, "ids":
    /// [ID]}` for one task, `{"retried": COUNT}` with --all-failed.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["id", "all_failed"])))]
    Retry {
        /// The task's id.
        id: Option<i64>,
        /// Every failed task (of --kind, if given); exit 1 if there is none.
        #[arg(long)]
        all_failed: bool,
        /// With --all-failed: only tasks of this kind.
        #[arg(long, requires = "all_failed")]
        kind: Option<String>,
    },
    /// Cancel a pending or running task; exit 1 if it is already final. JSON:
    /// `{"cancelled": COUNT, "ids": [ID]}`.
    Cancel {
        /// The task's id.
        id: i64,
    },
    /// Take a failed task out of its sequence, so the writes held behind it
    /// go on; exit 1 if it is not a failed task of a sequence. JSON:
    /// `{"released": COUNT, "ids": [ID]}`.
    Release {
        /// The task's id.
        id: i64,
    },
    /// Apply the queue's migrations this version knows (as `ballast serve`
    /// does at start), unless a live replica of the fleet would stop working
    /// on them; `--check` applies nothing and says which are pending and
    /// whether the running replicas can take them (exit 1 if not).
    Migrate {
        /// Say, apply nothing.
        #[arg(long)]
        check: bool,
    },
    /// Delete completed, failed and cancelled tasks finalized more than
    /// DURATION ago.
    ///
    /// Their idempotency keys become free again, so keep tasks longer than
    /// the external systems' key TTL (R-RES-RE-1). Deleting nothing is not an
    /// error: a retention job that finds nothing old has succeeded.
    Prune {
        /// The age, e.g. 7d, 24h, 90m.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        older_than: Duration,
    },
}

impl Action {
    /// Whether the action only reads the queue.
    fn reads_only(&self) -> bool {
        matches!(self, Action::Stats | Action::List { .. } | Action::Migrate { .. })
    }
}

fn parse_state(s: &str) -> Result<TaskState, String> {
    s.parse().map_err(|e: ballast_queue::UnknownState| e.to_string())
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    duration::parse(s).map_err(|e| e.to_string())
}

/// What an action has to say, in both formats. `nothing` says why the action
/// found nothing to act on (exit 1).
pub(crate) struct Output {
    human: String,
    json: Value,
    nothing: Option<String>,
}

impl Output {
    pub(crate) fn done(human: String, json: Value) -> Self {
        Self { human, json, nothing: None }
    }

    pub(crate) fn nothing(why: String, json: Value) -> Self {
        Self { human: String::new(), json, nothing: Some(why) }
    }
}

pub fn run(args: &QueueArgs) -> anyhow::Result<ExitCode> {
    let Some(db) = args.db.as_deref() else {
        bail!("`ballast queue` needs --db URL (sqlite://path/to/tasks.db, postgres://…, or a SQLite file)");
    };
    let url = queue_url(db);
    let shown = ballast::redact_url(&url);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let out = runtime.block_on(async {
        let unreachable =
            |_| anyhow::anyhow!("cannot reach the queue database at {shown} within {CONNECT_TIMEOUT:?}");
        // Looking must not change the database: opened read-only, no table is
        // created (on a URL naming the wrong database, migrating would plant
        // an empty queue there and report it), no journal-mode switch on a
        // SQLite file, and a file the operator may only read is fine.
        let reader = tokio::time::timeout(CONNECT_TIMEOUT, Queue::connect_read_only(&url))
            .await
            .map_err(unreachable)?
            .map_err(|e| match e {
                ballast_queue::Error::NoDatabase { path } => anyhow::anyhow!(
                    "no queue database at {path:?}: check --db (the service creates it on its first start)"
                ),
                other => {
                    anyhow::Error::new(other).context(format!("cannot open the queue database at {shown}"))
                }
            })?;
        // A database behind this version's schema is what `migrate` is for.
        let migrating = matches!(args.action, Action::Migrate { .. });
        if !migrating
            && !reader
                .is_migrated()
                .await
                .with_context(|| format!("cannot read the queue database at {shown}"))?
        {
            bail!(
                "no {TABLE} table in {shown}: is this the queue's database? \
                 `ballast serve` or `Queue::migrate()` creates it"
            );
        }
        let queue = if args.action.reads_only() {
            reader
        } else {
            tokio::time::timeout(CONNECT_TIMEOUT, Queue::connect(&url))
                .await
                .map_err(unreachable)?
                .with_context(|| format!("cannot open the queue at {shown}"))?
        };
        act(&queue, &args.action, (&url, &shown)).await
    })?;
    let mut stdout = std::io::stdout().lock();
    match args.format {
        // Kinds and errors come from the table: escape what could drive the terminal.
        Format::Human => stdout.write_all(ballast_config::report::printable(&out.human).as_bytes())?,
        Format::Json => writeln!(stdout, "{}", serde_json::to_string_pretty(&out.json)?)?,
    }
    Ok(match out.nothing {
        Some(why) => {
            eprintln!("ballast queue: {why}");
            ExitCode::from(1)
        }
        None => ExitCode::SUCCESS,
    })
}

/// The queue URL `--db` means: a URL as given, anything else a SQLite file.
fn queue_url(db: &str) -> String {
    if Backend::from_url(db).is_some() || db.contains("://") {
        db.to_owned()
    } else {
        format!("sqlite://{db}")
    }
}

/// Does `action` on `queue`, opened from `url` (shown as `shown`).
async fn act(queue: &Queue, action: &Action, (url, shown): (&str, &str)) -> anyhow::Result<Output> {
    Ok(match action {
        Action::Migrate { check } => crate::migrate::migrate(url, shown, queue, *check).await?,
        Action::Stats => stats(&queue.stats().await?),
        Action::List { state, kind, limit, after } => {
            let filter = ListFilter {
                kind: kind.clone(),
                state: *state,
                after_id: *after,
                limit: *limit,
                ..Default::default()
            };
            list(&queue.list(&filter).await?, *limit)
        }
        Action::Retry { id: Some(id), .. } => {
            if queue.retry(*id).await? {
                let human = format!("task {id} retried: pending, due now, with a fresh set of attempts\n");
                Output::done(human, json!({ "retried": 1, "ids": [id] }))
            } else {
                let why = match queue.get(*id).await? {
                    None => format!("no task {id}: nothing to retry"),
                    Some(task) => format!("task {id} is {}, not failed: nothing to retry", task.state),
                };
                Output::nothing(why.clone(), json!({ "retried": 0, "ids": [], "reason": why }))
            }
        }
        Action::Retry { kind, .. } => {
            let kinds = match kind {
                Some(kind) => vec![kind.clone()],
                None => queue.stats().await?.into_iter().filter(|s| s.failed > 0).map(|s| s.kind).collect(),
            };
            let mut retried = 0;
            for kind in &kinds {
                retried += queue.retry_failed(kind).await?;
            }
            if retried == 0 {
                let of_kind = kind.as_ref().map(|k| format!(" of kind {k:?}")).unwrap_or_default();
                let why = format!("no failed tasks{of_kind}: nothing to retry");
                Output::nothing(why.clone(), json!({ "retried": 0, "reason": why }))
            } else {
                let human = format!("{retried} failed task(s) retried: pending, due now\n");
                Output::done(human, json!({ "retried": retried }))
            }
        }
        Action::Cancel { id } => {
            if queue.cancel(*id).await? {
                Output::done(format!("task {id} cancelled\n"), json!({ "cancelled": 1, "ids": [id] }))
            } else {
                let why = match queue.get(*id).await? {
                    None => format!("no task {id}: nothing to cancel"),
                    Some(task) => format!("task {id} is already {}: nothing to cancel", task.state),
                };
                Output::nothing(why.clone(), json!({ "cancelled": 0, "ids": [], "reason": why }))
            }
        }
        Action::Release { id } => {
            if queue.release_from_sequence(*id).await? {
                let human = format!("task {id} left its sequence: the writes behind it go on\n");
                Output::done(human, json!({ "released": 1, "ids": [id] }))
            } else {
                let why = match queue.get(*id).await? {
                    None => format!("no task {id}: nothing to release"),
                    Some(task) if task.sequence.is_none() => {
                        format!("task {id} is in no sequence: nothing to release")
                    }
                    Some(task) => format!(
                        "task {id} is {}: only a failed task holds its sequence (cancel a pending one)",
                        task.state
                    ),
                };
                Output::nothing(why.clone(), json!({ "released": 0, "ids": [], "reason": why }))
            }
        }
        Action::Prune { older_than } => {
            let pruned = queue.prune(*older_than).await?;
            let age = duration::display(*older_than);
            let human = format!("{pruned} task(s) finalized more than {age} ago deleted\n");
            Output::done(human, json!({ "pruned": pruned, "older_than_secs": older_than.as_secs_f64() }))
        }
    })
}

fn stats(stats: &[KindStats]) -> Output {
    let json = stats
        .iter()
        .map(|s| {
            json!({
                "kind": s.kind,
                "pending": s.pending,
                "running": s.running,
                "completed": s.completed,
                "failed": s.failed,
                "cancelled": s.cancelled,
                "oldest_due_age_secs": s.oldest_due_age.map(|d| d.as_secs_f64()),
            })
        })
        .collect();
    if stats.is_empty() {
        return Output::done("the queue is empty\n".into(), json);
    }
    let header = ["KIND", "PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "OLDEST DUE"];
    let rows = stats
        .iter()
        .map(|s| {
            let mut row = vec![s.kind.clone()];
            row.extend(TaskState::ALL.map(|state| s.count(state).to_string()));
            row.push(s.oldest_due_age.map_or_else(|| "-".into(), duration::display));
            row
        })
        .collect::<Vec<_>>();
    let right = [false, true, true, true, true, true, true];
    Output::done(table(&header, &rows, &right), json)
}

fn list(tasks: &[TaskInfo], limit: u32) -> Output {
    let json = tasks.iter().map(task_json).collect();
    if tasks.is_empty() {
        return Output::done("no tasks match\n".into(), json);
    }
    let now = SystemTime::now();
    let header = ["ID", "KIND", "STATE", "ATTEMPT", "RUN AT", "KEY", "LAST ERROR"];
    let rows = tasks
        .iter()
        .map(|t| {
            vec![
                t.id.to_string(),
                t.kind.clone(),
                t.state.to_string(),
                format!("{}/{}", t.attempt, t.max_attempts),
                relative(t.run_at, now),
                t.key.clone().unwrap_or_else(|| "-".into()),
                t.last_error.as_deref().map_or_else(|| "-".into(), truncate),
            ]
        })
        .collect::<Vec<_>>();
    let mut human = table(&header, &rows, &[true, false, false, true, false, false, false]);
    if let Some(last) = tasks.last().filter(|_| tasks.len() == limit as usize) {
        human.push_str(&format!("(more may follow: --after {})\n", last.id));
    }
    Output::done(human, json)
}

fn task_json(t: &TaskInfo) -> Value {
    json!({
        "id": t.id,
        "kind": t.kind,
        "state": t.state.as_str(),
        "attempt": t.attempt,
        "max_attempts": t.max_attempts,
        "run_at": rfc3339(t.run_at),
        "key": t.key,
        "last_error": t.last_error,
        "errors": t.errors.iter().map(|e| json!({
            "attempt": e.attempt,
            "at": rfc3339(UNIX_EPOCH + Duration::from_micros(e.at.max(0).unsigned_abs())),
            "error": e.error,
        })).collect::<Vec<_>>(),
        "payload": t.payload,
        "lease_owner": t.lease_owner,
        "lease_expires_at": t.lease_expires_at.map(rfc3339),
        "created_at": rfc3339(t.created_at),
        "updated_at": rfc3339(t.updated_at),
        "finalized_at": t.finalized_at.map(rfc3339),
        "sequence": t.sequence,
        "held": t.is_held(),
    })
}

/// Columns padded to their widest cell, numbers right-aligned.
fn table(header: &[&str], rows: &[Vec<String>], right: &[bool]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, cell) in cells.enumerate() {
            let pad = " ".repeat(widths[i] - cell.chars().count());
            let sep = if i == 0 { "" } else { "  " };
            if right[i] {
                out.push_str(&format!("{sep}{pad}{cell}"));
            } else {
                out.push_str(&format!("{sep}{cell}{pad}"));
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(&mut header.iter().copied());
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// One line of at most [`ERROR_WIDTH`] characters.
fn truncate(error: &str) -> String {
    let flat = error.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= ERROR_WIDTH {
        return flat;
    }
    let cut: String = flat.chars().take(ERROR_WIDTH - 1).collect();
    format!("{cut}…")
}

/// `in 4s`, `2m 30s ago` or `now`.
fn relative(t: SystemTime, now: SystemTime) -> String {
    match t.duration_since(now) {
        Ok(ahead) if ahead >= Duration::from_secs(1) => format!("in {}", duration::display(whole(ahead))),
        Ok(_) => "now".into(),
        Err(behind) if behind.duration() < Duration::from_secs(1) => "now".into(),
        Err(behind) => format!("{} ago", duration::display(whole(behind.duration()))),
    }
}

fn whole(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}

/// `2025-01-31T12:00:00Z` (UTC, whole seconds).
fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(951_825_599)), "2000-02-29T11:59:59Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(1_735_689_600)), "2025-01-01T00:00:00Z");
    }
}
