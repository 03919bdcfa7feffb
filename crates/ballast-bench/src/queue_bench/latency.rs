//! Claim latency: one task due at a time, from the enqueue's return to its
//! handler's start.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use anyhow::Context;
use ballast_queue::{Handler, NewTask, Queue, TaskContext, Worker};
use tokio_util::sync::CancellationToken;

use super::*;

/// The latency worker's poll interval: the bound of the poll path.
pub(super) const POLL: Duration = Duration::from_millis(100);

/// Tells when the handler of each latency task started.
pub(super) struct Signal(tokio::sync::mpsc::UnboundedSender<Instant>);

impl Handler for Signal {
    type Payload = usize;
    type Error = Infallible;

    async fn handle(&self, _task: TaskContext, _: usize) -> Result<(), Infallible> {
        let _ = self.0.send(Instant::now());
        Ok(())
    }
}

/// `samples` tasks, one at a time with the worker idle in between: from the
/// enqueue's return to the handler's start, sorted. `other`: enqueued
/// through a pool of its own, as another process would.
pub(super) async fn claim_latency(
    db: &Db,
    queue: &Queue,
    samples: usize,
    other: bool,
) -> anyhow::Result<Vec<Duration>> {
    let (started, mut starts) = tokio::sync::mpsc::unbounded_channel();
    let worker = Worker::builder(queue.clone())
        .handler("bench-latency", Signal(started))
        .poll_interval(POLL)
        .build()?;
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    let producer = if other { db.queue().await? } else { queue.clone() };
    let mut latencies = Vec::with_capacity(samples);
    for i in 0..samples {
        // Idle long enough for the worker to be waiting, at an odd offset
        // from its poll so the poll path is sampled all along its interval.
        tokio::time::sleep(Duration::from_millis(50 + (i as u64 * 37) % 100)).await;
        producer.enqueue(NewTask::new("bench-latency", &i)).await?;
        let enqueued = Instant::now();
        let start = tokio::time::timeout(Duration::from_secs(30), starts.recv())
            .await
            .context("a latency task was not claimed within 30 s")?
            .context("the worker stopped")?;
        latencies.push(start.saturating_duration_since(enqueued));
    }
    shutdown.cancel();
    running.await?;
    latencies.sort_unstable();
    Ok(latencies)
}
