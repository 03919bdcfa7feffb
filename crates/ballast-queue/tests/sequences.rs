//! A property of sequences: whatever the interleaving of writes to 20
//! sequences, transient failures and worker restarts, the upstream applies
//! each sequence's writes in the order they were enqueued, every write is
//! applied, and none twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ballast::{Classification, Classify, IdempotencyKey};
use ballast_queue::{DurableBackoff, Handler, NewTask, Queue, TaskContext, TaskState, Worker};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

const SEQUENCES: u32 = 20;

/// A write to entity `entity`, the `n`th enqueued, failing transiently
/// `fails` times before it is applied.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Write {
    entity: u32,
    n: u32,
    fails: u32,
}

#[derive(Debug)]
struct Unavailable;

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("503 from the upstream")
    }
}

impl Classify for Unavailable {
    fn classify(&self) -> Classification {
        Classification::transient()
    }
}

/// The upstream: applies a write once per key, in the order writes come,
/// and counts every delivery.
#[derive(Clone, Default)]
struct Upstream {
    applied: Arc<Mutex<Vec<(u32, u32)>>>,
    deliveries: Arc<Mutex<HashMap<u32, u32>>>,
}

impl Handler for Upstream {
    type Payload = Write;
    type Error = Unavailable;

    async fn handle(&self, task: TaskContext, write: Write) -> Result<(), Unavailable> {
        if task.attempt() <= write.fails {
            return Err(Unavailable);
        }
        let first = {
            let mut deliveries = self.deliveries.lock().unwrap();
            let times = deliveries.entry(write.n).or_insert(0);
            *times += 1;
            *times == 1
        };
        if first {
            self.applied.lock().unwrap().push((write.entity, write.n));
        }
        // A restart may come while the write is applied and not yet
        // recorded complete: it is delivered again, under its key.
        tokio::task::yield_now().await;
        Ok(())
    }
}

#[derive(Debug, Clone)]
enum Step {
    Write { entity: u32, fails: u32 },
    Restart,
    Pause(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0..SEQUENCES, prop_oneof![4 => Just(0u32), 1 => 1..3u32])
            .prop_map(|(entity, fails)| Step::Write { entity, fails }),
        1 => Just(Step::Restart),
        1 => (0..20u64).prop_map(Step::Pause),
    ]
}

fn worker(queue: &Queue, upstream: &Upstream) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let worker = Worker::builder(queue.clone())
        .handler("write", upstream.clone())
        .concurrency(8)
        .batch(8)
        .poll_interval(Duration::from_millis(10))
        .backoff(DurableBackoff::exponential(Duration::from_millis(5)))
        .shutdown_grace(Duration::from_millis(20))
        .seed(11)
        .build()
        .unwrap();
    let stop = CancellationToken::new();
    let run = tokio::spawn(worker.run(stop.clone()));
    (stop, tokio::spawn(async move { drop(run.await) }))
}

async fn run(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::connect(&format!("sqlite://{}", dir.path().join("queue.db").display())).await.unwrap();
    queue.migrate().await.unwrap();
    let upstream = Upstream::default();
    let mut running = worker(&queue, &upstream);
    let mut ids = Vec::new();
    for step in steps {
        match step {
            Step::Write { entity, fails } => {
                let n = u32::try_from(ids.len()).unwrap();
                let task = NewTask::new("write", &Write { entity, n, fails })
                    .key(IdempotencyKey::v5(n, "write"))
                    .max_attempts(10)
                    .sequence(format!("entity/{entity}"));
                ids.push(queue.enqueue(task).await.unwrap().id);
            }
            Step::Restart => {
                running.0.cancel();
                running.1.await.unwrap();
                running = worker(&queue, &upstream);
            }
            Step::Pause(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for id in &ids {
        loop {
            let task = queue.get(*id).await.unwrap().unwrap();
            if task.state == TaskState::Completed {
                break;
            }
            prop_assert!(tokio::time::Instant::now() < deadline, "task {id} never completed: {task:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    running.0.cancel();
    running.1.await.unwrap();

    let applied = upstream.applied.lock().unwrap().clone();
    prop_assert_eq!(applied.len(), ids.len(), "every write applied once: {:?}", applied);
    let mut last: HashMap<u32, u32> = HashMap::new();
    for (entity, n) in applied {
        if let Some(before) = last.insert(entity, n) {
            prop_assert!(before < n, "entity {} saw write {} after write {}", entity, n, before);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        rng_seed: RngSeed::Fixed(39),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn each_sequence_is_applied_in_its_order_whatever_fails_or_restarts(
        steps in proptest::collection::vec(step(), 20..120)
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(run(steps))?;
    }
}
