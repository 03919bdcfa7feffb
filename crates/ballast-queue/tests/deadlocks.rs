//! Round 3's C5 and C2 on PostgreSQL (when `BALLAST_TEST_PG` is set):
//! batches enqueued across several sequences at once, while workers settle
//! tasks, release the held ones and renew their leases in batches of 16 —
//! every statement takes its locks in one order, so none waits on another
//! in a circle, and no enqueue fails.

mod support;

use std::time::Duration;

use ballast::IdempotencyKey;
use ballast_queue::{Handler, NewTask, Queue, TaskContext, Worker};
use tokio_util::sync::CancellationToken;

/// Holds each task a few milliseconds, and one in ten for 400 ms, so
/// leases are renewed while others settle.
struct Brief;

impl Handler for Brief {
    type Payload = u32;
    type Error = std::convert::Infallible;

    async fn handle(&self, _task: TaskContext, n: u32) -> Result<(), std::convert::Infallible> {
        let held = if n.is_multiple_of(10) { 400 } else { u64::from(n % 7) };
        tokio::time::sleep(Duration::from_millis(held)).await;
        Ok(())
    }
}

const SEQUENCES: u32 = 8;

/// A batch of one task for each sequence, the sequences in `reversed` order
/// or not: two batches in flight lock them in opposite orders unless the
/// store sorts them.
fn batch(round: u32, reversed: bool) -> Vec<NewTask> {
    let mut order: Vec<u32> = (0..SEQUENCES).collect();
    if reversed {
        order.reverse();
    }
    order
        .into_iter()
        .map(|s| {
            NewTask::new("write", &(round * SEQUENCES + s))
                .key(IdempotencyKey::v5(format!("{round}-{s}-{reversed}"), "write"))
                .sequence(format!("entity/{s}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_across_sequences_never_deadlock_with_releases_and_renewals() {
    let Some(harness) = support::Harness::postgres().await else { return };
    let queue: Queue = harness.queue.clone();
    let stop = CancellationToken::new();
    let mut workers = Vec::new();
    for _ in 0..2 {
        let worker = Worker::builder(queue.clone())
            .handler("write", Brief)
            .concurrency(16)
            .batch(16)
            .lease(Duration::from_secs(1))
            .poll_interval(Duration::from_millis(20))
            .build()
            .unwrap();
        workers.push(tokio::spawn(worker.run(stop.clone())));
    }
    let mut producers = Vec::new();
    for producer in 0..4u32 {
        let queue = queue.clone();
        producers.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            for round in 0..60 {
                let round = producer * 1_000 + round;
                if let Err(e) = queue.enqueue_batch(batch(round, producer % 2 == 1)).await {
                    failures.push(e.to_string());
                }
            }
            failures
        }));
    }
    let mut failures = Vec::new();
    for producer in producers {
        failures.extend(producer.await.unwrap());
    }
    stop.cancel();
    for worker in workers {
        let _ = worker.await;
    }
    harness.cleanup().await;
    assert!(
        failures.is_empty(),
        "{} of 240 batches failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
}
