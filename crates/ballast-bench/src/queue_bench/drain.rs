//! Processing: workers draining the queue, in this process and in child
//! processes, until no task is pending or running.

use std::process::Stdio;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use ballast_queue::{Queue, RunSummary};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

use super::*;

/// Drains the queue; returns the combined rate and, in the parent process,
/// the claim → complete latencies in µs.
pub(super) async fn process(
    db: &Db,
    queue: &Queue,
    opts: &QueueBenchOptions,
) -> anyhow::Result<(f64, Option<Vec<i64>>)> {
    let started =
        Arc::new(Started { at: (0..opts.tasks).map(|_| AtomicI64::new(0)).collect(), ..Started::default() });
    let mut children = Vec::new();
    if opts.processes > 1 {
        let (Db::Pg { schema, .. }, Some((exe, args))) = (db, &opts.child_command) else {
            bail!("--processes > 1 needs PostgreSQL");
        };
        for _ in 1..opts.processes {
            let mut child = tokio::process::Command::new(exe)
                .args(args)
                .arg("--child-schema")
                .arg(schema)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .context("starting a child worker process")?;
            let stdout = child.stdout.take().context("child stdout")?;
            let mut lines = BufReader::new(stdout).lines();
            match lines.next_line().await? {
                Some(line) if line == "ready" => {}
                other => bail!("child worker did not get ready: {other:?}"),
            }
            children.push((child, lines));
        }
    }
    let shutdown = CancellationToken::new();
    let start = Instant::now();
    for (child, _) in &mut children {
        let stdin = child.stdin.as_mut().context("child stdin")?;
        stdin.write_all(b"go\n").await?;
        stdin.flush().await?;
    }
    let mut workers = Vec::new();
    for _ in 0..opts.workers {
        let worker = build_worker(queue.clone(), opts, Arc::clone(&started))?;
        workers.push(tokio::spawn(worker.run(shutdown.clone())));
    }
    if opts.processes == 1 {
        // Every handler has run before the database can be drained: until
        // then the check costs nothing but this process's own counter.
        while started.count.load(Ordering::Relaxed) < opts.tasks {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    wait_drained(db).await?;
    let elapsed = start.elapsed();
    shutdown.cancel();
    let mut summaries: Vec<RunSummary> = Vec::new();
    for worker in workers {
        summaries.push(worker.await?);
    }
    for (mut child, mut lines) in children {
        drop(child.stdin.take());
        let _ = lines.next_line().await?;
        child.wait().await?;
    }
    let rate = opts.tasks as f64 / elapsed.as_secs_f64();
    let latencies = if opts.processes == 1 {
        let done = db.finalized().await?;
        Some(
            done.into_iter()
                .filter_map(|(index, finalized)| {
                    let start = started.at.get(usize::try_from(index).ok()?)?.load(Ordering::Relaxed);
                    (start > 0).then(|| finalized - start)
                })
                .collect(),
        )
    } else {
        None
    };
    Ok((rate, latencies))
}

/// Returns once no task is pending or running. The check walks the pending
/// and running indexes on PostgreSQL, the live one on SQLite (never the table: a scan would cost the database more
/// and more as completed rows pile up, and slow the queue being measured).
pub(super) async fn wait_drained(db: &Db) -> anyhow::Result<()> {
    let sql = match db {
        Db::Sqlite { .. } => {
            "SELECT EXISTS (SELECT 1 FROM ballast_tasks INDEXED BY ballast_tasks_live
                            WHERE finalized_at IS NULL)"
        }
        // The pool of `Db` has enable_seqscan off, so these use the indexes.
        Db::Pg { .. } => {
            "SELECT CASE WHEN EXISTS (SELECT 1 FROM ballast_tasks WHERE state = 'pending')
                           OR EXISTS (SELECT 1 FROM ballast_tasks
                                      WHERE state = 'running' AND lease_expires_at IS NOT NULL)
                    THEN 1::bigint ELSE 0::bigint END"
        }
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    while db.scalar(sql).await? != 0 {
        if Instant::now() > deadline {
            bail!("the queue did not drain within 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// A child process: workers on the queue in `schema` from "go" on stdin until
/// stdin closes; prints "ready" once connected and "done N" at the end.
pub async fn child(opts: &QueueBenchOptions, schema: &str) -> anyhow::Result<()> {
    let url = pg_url(opts.url.as_deref())?;
    let pool = Queue::pg_pool_options().connect_with(pg_options(&url, schema)?).await?;
    let queue = Queue::from_postgres(pool);
    let mut stdout = tokio::io::stdout();
    stdout.write_all(b"ready\n").await?;
    stdout.flush().await?;
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    if stdin.next_line().await?.as_deref() != Some("go") {
        return Ok(());
    }
    let shutdown = CancellationToken::new();
    let started = Arc::new(Started::default());
    let mut workers = Vec::new();
    for _ in 0..opts.workers {
        let worker = build_worker(queue.clone(), opts, Arc::clone(&started))?;
        workers.push(tokio::spawn(worker.run(shutdown.clone())));
    }
    while stdin.next_line().await?.is_some() {}
    shutdown.cancel();
    let mut completed = 0;
    for worker in workers {
        completed += worker.await?.completed;
    }
    stdout.write_all(format!("done {completed}\n").as_bytes()).await?;
    stdout.flush().await?;
    Ok(())
}
