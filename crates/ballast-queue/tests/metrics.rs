//! The queue's Prometheus metrics after a scripted run on SQLite: attempt
//! outcomes counted per kind, task gauges and lag refreshed by
//! `Queue::record_metrics`.

mod support;

use std::time::Duration;

use ballast::{Classification, Classify};
use ballast_queue::{DurableBackoff, Handler, NewTask, TaskContext, TaskState, Worker};
use metrics_exporter_prometheus::PrometheusBuilder;
use support::{wait_for, Harness};
use tokio_util::sync::CancellationToken;

#[derive(Debug)]
struct Failure(bool);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0 { "transient" } else { "permanent" })
    }
}

impl Classify for Failure {
    fn classify(&self) -> Classification {
        if self.0 {
            Classification::transient()
        } else {
            Classification::permanent()
        }
    }
}

/// "ok" succeeds, "flaky" fails transiently on its first attempt, "bad" fails
/// permanently, "hang" runs until the worker stops it.
struct Scripted;

impl Handler for Scripted {
    type Payload = String;
    type Error = Failure;

    async fn handle(&self, task: TaskContext, action: String) -> Result<(), Failure> {
        match action.as_str() {
            "flaky" if task.attempt() == 1 => Err(Failure(true)),
            "bad" => Err(Failure(false)),
            "hang" => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_tasks_and_lag_are_recorded() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");

    let h = Harness::sqlite().await;
    let queue = h.queue.clone();
    let mut ids = Vec::new();
    for action in ["ok", "ok", "ok", "flaky", "bad", "hang"] {
        ids.push(queue.enqueue(NewTask::new("job", action)).await.expect("enqueue").id);
    }
    // Not due for an hour, and a kind no worker here handles: pending, no lag.
    queue.enqueue(NewTask::new("later", "x").run_after(Duration::from_secs(3600))).await.expect("enqueue");

    let worker = Worker::builder(queue.clone())
        .handler("job", Scripted)
        .poll_interval(Duration::from_millis(20))
        .backoff(DurableBackoff::exponential(Duration::from_millis(10)))
        .shutdown_grace(Duration::from_millis(100))
        .build()
        .expect("worker");
    let stop = CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()));
    let flaky = ids[3];
    wait_for(&queue, flaky, Duration::from_secs(10), |t| t.state == TaskState::Completed).await;
    wait_for(&queue, ids[4], Duration::from_secs(10), |t| t.state == TaskState::Failed).await;
    wait_for(&queue, ids[5], Duration::from_secs(10), |t| t.state == TaskState::Running).await;
    stop.cancel();
    let summary = running.await.expect("worker");
    assert_eq!((summary.completed, summary.rescheduled, summary.failed, summary.released), (4, 1, 1, 1));

    let stats = queue.record_metrics().await.expect("stats");
    assert_eq!(stats.len(), 2);
    let text = handle.render();
    let attempts = |outcome: &str| {
        value(&text, &format!("ballast_task_attempts_total{{kind=\"job\",outcome=\"{outcome}\"}}"))
    };
    assert_eq!(attempts("completed"), 4.0);
    assert_eq!(attempts("retried"), 1.0);
    assert_eq!(attempts("failed"), 1.0);
    assert_eq!(attempts("released"), 1.0);
    assert_eq!(attempts("lost"), 0.0);
    let tasks = |kind: &str, state: &str| {
        value(&text, &format!("ballast_queue_tasks{{kind=\"{kind}\",state=\"{state}\"}}"))
    };
    assert_eq!(tasks("job", "completed"), 4.0);
    assert_eq!(tasks("job", "failed"), 1.0);
    assert_eq!(tasks("job", "pending"), 1.0, "the released task is due again");
    assert_eq!(tasks("job", "running"), 0.0);
    assert_eq!(tasks("later", "pending"), 1.0);
    assert!(value(&text, "ballast_queue_lag_seconds{kind=\"job\"}") >= 0.0);
    assert_eq!(value(&text, "ballast_queue_lag_seconds{kind=\"later\"}"), 0.0);

    // A lost outcome: the task is cancelled while its handler runs.
    let lost = queue.enqueue(NewTask::new("job", "hang")).await.expect("enqueue").id;
    let worker = Worker::builder(queue.clone())
        .handler("job", Scripted)
        .poll_interval(Duration::from_millis(20))
        .shutdown_grace(Duration::from_millis(200))
        .build()
        .expect("worker");
    let stop = CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()));
    wait_for(&queue, lost, Duration::from_secs(10), |t| t.state == TaskState::Running).await;
    // Both hanging tasks are running now; cancel them, then stop: their handlers
    // are stopped at the grace period and the release is refused.
    for id in [ids[5], lost] {
        queue.cancel(id).await.expect("cancel");
    }
    stop.cancel();
    running.await.expect("worker");
    let stats = queue.record_metrics().await.expect("stats");
    let job = stats.iter().find(|s| s.kind == "job").expect("job stats");
    assert_eq!(job.count(TaskState::Cancelled), 2);
    let text = handle.render();
    assert_eq!(value(&text, "ballast_queue_tasks{kind=\"job\",state=\"cancelled\"}"), 2.0);
    assert_eq!(value(&text, "ballast_queue_tasks{kind=\"job\",state=\"pending\"}"), 0.0);
    h.cleanup().await;
}
