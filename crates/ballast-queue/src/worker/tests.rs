//! The worker's own tests: what the conformance suite cannot reach from
//! outside (a heartbeat racing the outcomes, the schedule a worker takes).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ballast::{Classification, Classified};
use tokio::time::Instant;
use tracing_subscriber::fmt::MakeWriter;

use super::completer::Completer;
use super::executor::Finished;
use super::producer::{Cleared, Producer};
use super::Worker;
use crate::alert::Alert;
use crate::handler::Handler;
use crate::lease;
use crate::store::Store;
use crate::{DurableBackoff, NewTask, Queue, TaskContext};

/// Fails every attempt, transiently or for good.
struct Failing(Classification);

impl Handler for Failing {
    type Payload = u64;
    type Error = Classified;

    async fn handle(&self, _: TaskContext, _: u64) -> std::result::Result<(), Classified> {
        Err(Classified::new("declined", self.0))
    }
}

/// Everything logged at debug level and above while the test runs.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl MakeWriter<'_> for Logs {
    type Writer = Logs;

    fn make_writer(&self) -> Logs {
        self.clone()
    }
}

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// C3: an alert whose tasks no handler of the worker runs would page
/// nobody; the worker is refused when it is built.
#[tokio::test]
async fn an_alert_whose_tasks_no_handler_runs_is_refused() {
    struct Pager;
    impl Alert for Pager {
        fn task_failed(&self, _: &crate::FailedTask) {}
        fn enqueue(&self, failed: &crate::FailedTask) -> Vec<NewTask> {
            vec![NewTask::new("page", &failed.id).key(failed.failure_key("page"))]
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::connect(&format!("sqlite://{}", dir.path().join("queue.db").display())).await.unwrap();
    let builder =
        || Worker::builder(queue.clone()).handler("k", Failing(Classification::permanent())).alert(Pager);
    let refused = builder().build().unwrap_err().to_string();
    assert!(refused.contains("\"page\"") && refused.contains("R-RES-RE-5"), "{refused}");
    assert!(builder().handler("page", Failing(Classification::permanent())).build().is_ok());
}

/// A worker built on a queue follows the queue's schedule unless told otherwise.
#[tokio::test]
async fn a_worker_polls_and_backs_off_by_its_queue_s_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::connect(&format!("sqlite://{}", dir.path().join("queue.db").display())).await.unwrap();
    let schedule = crate::DurableSchedule {
        poll_interval: Duration::from_millis(250),
        backoff: DurableBackoff::exponential(Duration::from_millis(10)),
        max_attempts: 3,
        ..Default::default()
    };
    let queue = queue.with_schedule(schedule);
    let worker =
        Worker::builder(queue.clone()).handler("k", Failing(Classification::permanent())).build().unwrap();
    assert_eq!(
        (worker.poll_interval, worker.attempts.backoff, worker.attempts.max_attempts),
        (schedule.poll_interval, schedule.backoff, 3)
    );
    let told = Worker::builder(queue)
        .handler("k", Failing(Classification::permanent()))
        .poll_interval(Duration::from_secs(1))
        .build()
        .unwrap();
    assert_eq!(told.poll_interval, Duration::from_secs(1));
}

/// A heartbeat round that began before the handlers returned reaches the
/// database after the worker stored their outcomes (rescheduled, failed):
/// the leases it finds gone were given up by this worker, not lost.
#[tokio::test]
async fn heartbeat_racing_the_task_s_own_outcome_reports_no_lost_lease() {
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);

    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::connect(&format!("sqlite://{}", dir.path().join("queue.db").display())).await.unwrap();
    queue.migrate().await.unwrap();
    queue.enqueue(NewTask::new("flaky", &1)).await.unwrap();
    queue.enqueue(NewTask::new("broken", &2)).await.unwrap();
    let worker = Worker::builder(queue)
        .handler("flaky", Failing(Classification::transient()))
        .handler("broken", Failing(Classification::permanent()))
        .build()
        .unwrap();
    let store = worker.queue.store.clone();
    let held = worker.attempts.held.clone();
    let mut producer = Producer::start(
        &store,
        worker.claim.clone(),
        worker.concurrency,
        worker.batch,
        held.clone(),
        worker.counters.clone(),
    )
    .await;
    let claim = producer.request(2);
    let asked = Instant::now();
    let claimed = store.settle_and_claim(&[], &claim).await.unwrap().claimed;
    let cleared = producer.claimed(2, asked, claimed);
    assert_eq!(cleared.len(), 2);

    let round = held.leases();
    let mut completer =
        Completer::new(Arc::clone(&worker.attempts.alert), tokio::sync::broadcast::channel(1).0);
    for Cleared { task, cancel, counters } in cleared {
        let lease = task.lease;
        let Finished::Ran(settling) = worker.attempts.attempt(task, cancel, counters).await else {
            panic!("the handler ran")
        };
        held.remove(lease);
        completer.push(settling);
    }
    let flushed = completer.flush(store.clone(), producer.request(0)).await;
    completer.answered(flushed).unwrap();
    lease::renew(&store, &held, &round, worker.claim.lease).await;
    producer.stop().await;

    let summary = completer.summary();
    assert_eq!((summary.rescheduled, summary.failed, summary.lost), (1, 1, 0));
    let logs = logs.text();
    assert!(!logs.contains("lease lost"), "a lease given up by this worker reported lost:\n{logs}");
}

/// A worker sweeps for expired leases with its first round trip, then with
/// the first one a sweep interval (a quarter of the lease) after the last —
/// never more often, however many round trips it makes.
#[tokio::test]
async fn a_sweep_for_expired_leases_goes_with_a_round_trip_every_quarter_lease() {
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::connect(&format!("sqlite://{}", dir.path().join("queue.db").display())).await.unwrap();
    queue.migrate().await.unwrap();
    let worker = Worker::builder(queue)
        .handler("flaky", Failing(Classification::transient()))
        .lease(Duration::from_secs(8))
        .build()
        .unwrap();
    let store = worker.queue.store.clone();
    let mut producer = Producer::start(
        &store,
        worker.claim.clone(),
        worker.concurrency,
        worker.batch,
        worker.attempts.held.clone(),
        worker.counters.clone(),
    )
    .await;
    // Paused once the database is open: its pool keeps time of its own.
    tokio::time::pause();
    assert!(producer.request(10).sweep, "the first round trip sweeps");
    let mut swept = Vec::new();
    for ms in (100..=4_100).step_by(100) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if producer.request(1).sweep {
            swept.push(ms);
        }
    }
    assert_eq!(swept, [2_000, 4_000], "a lease of 8 s: a sweep every 2 s");
    producer.stop().await;
}
