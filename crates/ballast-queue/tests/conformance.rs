//! One suite, written once, run against every backend: SQLite always,
//! PostgreSQL when `BALLAST_TEST_PG` is set.

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use ballast::{Classification, Classify, IdempotencyKey};
use ballast_queue::{
    Alert, DurableBackoff, EnqueueOutcome, FailReason, FailedTask, Handler, Handover, HandoverError,
    KeyBinding, ListFilter, NewTask, Queue, RunSummary, Schedule, TaskContext, TaskInfo, TaskState,
    TxConnection, Worker, WorkerBuilder, WriteOrDefer,
};
use serde::{Deserialize, Serialize};
use support::{wait_for, Db, Harness};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const SOON: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Job {
    action: String,
}

fn job(action: &str) -> Job {
    Job { action: action.to_owned() }
}

#[derive(Debug)]
enum TestError {
    Transient,
    Permanent,
    /// Nothing reached outside; try again in 10 ms.
    NotYet,
}

impl std::fmt::Display for TestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TestError::Transient => "gateway timed out",
            TestError::Permanent => "card declined",
            TestError::NotYet => "not yet",
        })
    }
}

impl Classify for TestError {
    fn classify(&self) -> Classification {
        match self {
            TestError::Transient => Classification::transient(),
            TestError::Permanent => Classification::permanent(),
            TestError::NotYet => {
                Classification { retry_after: Some(Duration::from_millis(10)), ..Classification::transient() }
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Call {
    id: i64,
    attempt: u32,
    key: Option<IdempotencyKey>,
    action: String,
}

/// Does what the payload says and remembers every call.
#[derive(Clone)]
struct Scripted {
    calls: Arc<Mutex<Vec<Call>>>,
    gate: Arc<Semaphore>,
}

impl Default for Scripted {
    fn default() -> Self {
        Self { calls: Arc::default(), gate: Arc::new(Semaphore::new(0)) }
    }
}

impl Scripted {
    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

impl Handler for Scripted {
    type Payload = Job;
    type Error = TestError;

    async fn handle(&self, task: TaskContext, job: Job) -> Result<(), TestError> {
        self.calls.lock().unwrap().push(Call {
            id: task.id(),
            attempt: task.attempt(),
            key: task.key().cloned(),
            action: job.action.clone(),
        });
        match job.action.as_str() {
            "transient" => Err(TestError::Transient),
            "permanent" => Err(TestError::Permanent),
            "result" => {
                task.set_result(&serde_json::json!({ "status": 201 })).unwrap();
                Ok(())
            }
            "result, then permanent" => {
                task.set_result(&serde_json::json!({ "status": 201 })).unwrap();
                Err(TestError::Permanent)
            }
            "panic" => panic!("boom in handler"),
            other if other.starts_with("steps:") => {
                // Works in steps: each attempt records the next for the one after it.
                let left: u32 = other["steps:".len()..].parse().unwrap();
                if left == 0 {
                    task.set_result(&serde_json::json!({ "done_at_attempt": task.attempt() })).unwrap();
                    return Ok(());
                }
                task.set_next_payload(&Job { action: format!("steps:{}", left - 1) }).unwrap();
                task.not_attempted();
                Err(TestError::NotYet)
            }
            "gate" => {
                self.gate.acquire().await.unwrap().forget();
                Ok(())
            }
            other => {
                if let Some(ms) = other.strip_prefix("sleep:") {
                    tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
                }
                Ok(())
            }
        }
    }
}

#[derive(Clone, Default)]
struct Alerts(Arc<Mutex<Vec<FailedTask>>>);

impl Alert for Alerts {
    fn task_failed(&self, task: &FailedTask) {
        self.0.lock().unwrap().push(task.clone());
    }
}

impl Alerts {
    fn all(&self) -> Vec<FailedTask> {
        self.0.lock().unwrap().clone()
    }
}

fn worker(queue: &Queue, handler: Scripted) -> WorkerBuilder {
    Worker::builder(queue.clone()).handler("job", handler).poll_interval(Duration::from_millis(50)).seed(7)
}

struct Running {
    stop: CancellationToken,
    handle: JoinHandle<RunSummary>,
}

impl Running {
    async fn stop(self) -> RunSummary {
        self.stop.cancel();
        self.handle.await.expect("worker task")
    }
}

fn start(worker: WorkerBuilder) -> Running {
    let worker = worker.build().expect("valid worker");
    let stop = CancellationToken::new();
    let handle = tokio::spawn(worker.run(stop.clone()));
    Running { stop, handle }
}

async fn enqueue(queue: &Queue, action: &str) -> i64 {
    queue.enqueue(NewTask::new("job", &job(action))).await.expect("enqueue").id
}

/// One job per action, enqueued in order: their ids.
async fn enqueue_each<const N: usize>(queue: &Queue, actions: [&str; N]) -> [i64; N] {
    let mut ids = [0; N];
    for (id, action) in ids.iter_mut().zip(actions) {
        *id = enqueue(queue, action).await;
    }
    ids
}

fn within(t: SystemTime, from: SystemTime, lo: Duration, hi: Duration) -> bool {
    let d = t.duration_since(from).unwrap_or_default();
    d >= lo && d <= hi
}

// ---------------------------------------------------------------- the suite

async fn migrate_is_idempotent(h: &Harness) {
    h.queue.migrate().await.unwrap();
    h.queue.migrate().await.unwrap();
    // Each backend has one file per migration, the same versions on both.
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite")).unwrap().count();
    assert_eq!(h.scalar("SELECT count(*) FROM ballast_migrations").await, files as i64);
    assert!(h.queue.is_migrated().await.unwrap());
}

async fn enqueue_dedupes_by_kind_and_key(h: &Harness) {
    let key = IdempotencyKey::v5("order-1", "charge");
    let first = h.queue.enqueue(NewTask::new("job", &job("ok")).key(key.clone())).await.unwrap();
    let again = h.queue.enqueue(NewTask::new("job", &job("other")).key(key.clone())).await.unwrap();
    assert!(first.created);
    assert!(!again.created, "the second enqueue must say the task already existed");
    assert_eq!(again.id, first.id);
    let other_kind = h.queue.enqueue(NewTask::new("refund", &job("ok")).key(key)).await.unwrap();
    assert!(other_kind.created && other_kind.id != first.id);
    let a = h.queue.enqueue(NewTask::new("job", &job("ok"))).await.unwrap();
    let b = h.queue.enqueue(NewTask::new("job", &job("ok"))).await.unwrap();
    assert!(a.created && b.created && a.id != b.id, "tasks without a key never collide");

    let k2 = IdempotencyKey::v7();
    let batch = h
        .queue
        .enqueue_batch(vec![
            NewTask::new("job", &job("ok")).key(k2.clone()),
            NewTask::new("job", &job("ok")),
            NewTask::new("job", &job("ok")).key(k2),
        ])
        .await
        .unwrap();
    assert_eq!(batch.len(), 3);
    assert!(batch[0].created && batch[1].created && !batch[2].created);
    assert_eq!(batch[2].id, batch[0].id);
    // In a batch, a key already stored resolves to the stored task, in place.
    let stored_key = IdempotencyKey::v5("order-1", "charge");
    let batch = h
        .queue
        .enqueue_batch(vec![
            NewTask::new("job", &job("ok")),
            NewTask::new("job", &job("other")).key(stored_key),
            NewTask::new("job", &job("ok")),
        ])
        .await
        .unwrap();
    assert!(batch[0].created && !batch[1].created && batch[2].created, "{batch:?}");
    assert_eq!(batch[1].id, first.id);
    assert!(batch[0].id != batch[2].id && batch[0].id != first.id);
    let stored = h.queue.get(first.id).await.unwrap().unwrap();
    assert_eq!(stored.payload, serde_json::json!({"action": "ok"}), "the first payload stands");
    assert_eq!(stored.max_attempts, 10);
}

async fn invalid_tasks_are_refused_before_the_database(h: &Harness) {
    let err = h.queue.enqueue(NewTask::new("job", &job("ok")).max_attempts(0)).await.unwrap_err();
    assert!(err.to_string().contains("max_attempts"), "{err}");
    let bad = HashMap::from([((1, 2), 3)]);
    let err = h.queue.enqueue_batch(vec![NewTask::new("job", &job("ok")), NewTask::new("job", &bad)]).await;
    assert!(err.is_err());
    assert_eq!(h.scalar("SELECT count(*) FROM ballast_tasks").await, 0, "a batch is all or nothing");
}

async fn handler_gets_payload_key_and_attempt(h: &Harness) {
    let handler = Scripted::default();
    let key = IdempotencyKey::v5("order-2", "charge");
    let id = h.queue.enqueue(NewTask::new("job", &job("ok")).key(key.clone())).await.unwrap().id;
    let w = start(worker(&h.queue, handler.clone()));
    let task = wait_for(&h.queue, id, SOON, |t| t.state == TaskState::Completed).await;
    let summary = w.stop().await;
    assert_eq!(summary.completed, 1);
    assert!(task.finalized_at.is_some() && task.lease_owner.is_none());
    let calls = handler.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].id, calls[0].attempt, calls[0].key.as_ref()), (id, 1, Some(&key)));
    assert_eq!(calls[0].action, "ok");
}

async fn scheduled_task_waits_for_run_at(h: &Harness) {
    let handler = Scripted::default();
    let later = h
        .queue
        .enqueue(NewTask::new("job", &job("ok")).run_after(Duration::from_secs(3600)))
        .await
        .unwrap()
        .id;
    let now = enqueue(&h.queue, "ok").await;
    let w = start(worker(&h.queue, handler.clone()));
    wait_for(&h.queue, now, SOON, |t| t.state == TaskState::Completed).await;
    let task = h.queue.get(later).await.unwrap().unwrap();
    assert_eq!((task.state, task.attempt), (TaskState::Pending, 0), "not due yet");
    assert!(h.queue.run_now(later).await.unwrap());
    wait_for(&h.queue, later, SOON, |t| t.state == TaskState::Completed).await;
    w.stop().await;
}

/// How a transaction is undone.
enum Undo {
    RollBack,
    Drop,
}

/// Enqueues `task()` in a transaction that commits, then in one undone.
async fn commit_one_undo_one<DB: sqlx::Database>(
    queue: &Queue,
    pool: &sqlx::Pool<DB>,
    task: impl Fn() -> NewTask,
    undo: Undo,
) -> (EnqueueOutcome, EnqueueOutcome)
where
    DB::Connection: TxConnection,
{
    let mut tx = pool.begin().await.unwrap();
    let kept = queue.enqueue_in(&mut *tx, task()).await.unwrap();
    tx.commit().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let undone = queue.enqueue_in(&mut *tx, task()).await.unwrap();
    match undo {
        Undo::RollBack => tx.rollback().await.unwrap(),
        Undo::Drop => drop(tx),
    }
    (kept, undone)
}

async fn enqueue_in_transaction_commits_or_vanishes(h: &Harness) {
    let task = || NewTask::new("job", &job("ok")).key(IdempotencyKey::v7());
    // SQLite's transaction is rolled back, PostgreSQL's dropped: both undo.
    let (kept, dropped) = match &h.db {
        Db::Sqlite { pool, .. } => commit_one_undo_one(&h.queue, pool, task, Undo::RollBack).await,
        Db::Pg { pool, .. } => commit_one_undo_one(&h.queue, pool, task, Undo::Drop).await,
    };
    assert!(h.queue.get(kept.id).await.unwrap().is_some());
    assert!(h.queue.get(dropped.id).await.unwrap().is_none(), "rolled back: no task");
    assert_eq!(h.scalar("SELECT count(*) FROM ballast_tasks").await, 1);

    if let Db::Pg { .. } = h.db {
        let other = Harness::sqlite().await;
        if let Db::Sqlite { pool, .. } = &other.db {
            let mut tx = pool.begin().await.unwrap();
            let err = h.queue.enqueue_in(&mut *tx, task()).await.unwrap_err();
            assert!(err.to_string().contains("transaction"), "{err}");
        }
    }
}

async fn transient_errors_back_off_then_fail_with_alert(h: &Harness) {
    let handler = Scripted::default();
    let alerts = Alerts::default();
    let id = h.queue.enqueue(NewTask::new("job", &job("transient")).max_attempts(3)).await.unwrap().id;
    let w = start(worker(&h.queue, handler.clone()).alert(alerts.clone()));

    // After attempt n the task is due again in [2^n / 2, 2^n] seconds.
    for attempt in 1..=2u32 {
        let before = SystemTime::now();
        let task =
            wait_for(&h.queue, id, SOON, |t| t.attempt == attempt && t.state == TaskState::Pending).await;
        let nominal = Duration::from_secs(1 << attempt);
        let slack = Duration::from_secs(2);
        assert!(
            within(task.run_at, before, nominal / 2 - Duration::from_millis(900), nominal + slack),
            "attempt {attempt}: run_at {:?} after {:?}",
            task.run_at.duration_since(before),
            nominal
        );
        assert_eq!(task.last_error.as_deref(), Some("gateway timed out"));
        assert_eq!(task.errors.len(), attempt as usize);
        assert!(h.queue.run_now(id).await.unwrap());
    }
    let task = wait_for(&h.queue, id, SOON, |t| t.state == TaskState::Failed).await;
    let summary = w.stop().await;
    assert_eq!(task.attempt, 3);
    assert_eq!(task.errors.iter().map(|e| e.attempt).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!((summary.rescheduled, summary.failed), (2, 1));
    let alerts = alerts.all();
    assert_eq!(alerts.len(), 1, "a human must see it (R-RES-RE-5)");
    assert_eq!((alerts[0].id, alerts[0].reason, alerts[0].attempt), (id, FailReason::Exhausted, 3));
    assert_eq!(handler.calls().len(), 3);
}

/// Pages a human through a task of its own, stored with the failure.
#[derive(Clone, Default)]
struct Pager(Alerts);

impl Alert for Pager {
    fn task_failed(&self, task: &FailedTask) {
        self.0.task_failed(task);
    }

    fn enqueue(&self, task: &FailedTask) -> Vec<NewTask> {
        let page = NewTask::new("page", &task.id).key(task.failure_key("pager"));
        // A task the store refuses must not cost the failure its record.
        vec![page, NewTask::new("not a kind", &task.id)]
    }
}

/// Takes a page: the alert's own tasks need a handler on the worker.
struct Paged;

impl Handler for Paged {
    type Payload = serde_json::Value;
    type Error = ballast::Classified;

    async fn handle(&self, _: TaskContext, _: serde_json::Value) -> Result<(), ballast::Classified> {
        Ok(())
    }
}

async fn failure_stores_its_alert_tasks_keyed_by_the_failure(h: &Harness) {
    let handler = Scripted::default();
    let pager = Pager::default();
    let id = enqueue(&h.queue, "permanent").await;
    let w = start(worker(&h.queue, handler.clone()).handler("page", Paged).alert(pager.clone()));
    wait_for(&h.queue, id, SOON, |t| t.state == TaskState::Failed).await;
    let pages = h.queue.list(&ListFilter::default().kind("page")).await.unwrap();
    assert_eq!(pages.len(), 1, "{pages:?}");
    // The alert is told once the failure is stored, a moment after the task reads failed.
    let deadline = tokio::time::Instant::now() + SOON;
    while pager.0.all().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the alert was never told of the failure");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let first = pager.0.all()[0].clone();
    assert_eq!(pages[0].key.as_deref(), Some(first.failure_key("pager").as_str()));
    assert_eq!(pages[0].payload, serde_json::json!(id));

    // Retried by an operator and failed again: a new failure, a new page.
    assert!(h.queue.retry(id).await.unwrap());
    wait_for(&h.queue, id, SOON, |t| t.state == TaskState::Failed && t.errors.len() == 2).await;
    w.stop().await;
    let pages = h.queue.list(&ListFilter::default().kind("page")).await.unwrap();
    assert_eq!(pages.len(), 2, "{pages:?}");
    assert_ne!(pages[0].key, pages[1].key);
    assert_eq!(pager.0.all().len(), 2);
    assert_eq!(h.queue.list(&ListFilter::default().kind("not a kind")).await.unwrap().len(), 0);
}

async fn a_successful_attempt_keeps_its_result(h: &Harness) {
    let handler = Scripted::default();
    let [kept, dropped, plain] = enqueue_each(&h.queue, ["result", "result, then permanent", "ok"]).await;
    let w = start(worker(&h.queue, handler.clone()));
    let kept = wait_for(&h.queue, kept, SOON, |t| t.state == TaskState::Completed).await;
    let dropped = wait_for(&h.queue, dropped, SOON, |t| t.state == TaskState::Failed).await;
    let plain = wait_for(&h.queue, plain, SOON, |t| t.state == TaskState::Completed).await;
    w.stop().await;
    assert_eq!(kept.result, Some(serde_json::json!({ "status": 201 })));
    assert_eq!((dropped.result, plain.result), (None, None));
}

async fn a_rescheduled_attempt_hands_its_next_payload_on(h: &Harness) {
    let handler = Scripted::default();
    let id = enqueue(&h.queue, "steps:3").await;
    let w = start(worker(&h.queue, handler.clone()));
    let done = wait_for(&h.queue, id, SOON, |t| t.state == TaskState::Completed).await;
    w.stop().await;
    let actions: Vec<String> = handler.calls().into_iter().map(|c| c.action).collect();
    assert_eq!(actions, ["steps:3", "steps:2", "steps:1", "steps:0"]);
    assert_eq!(
        done.payload,
        serde_json::json!({ "action": "steps:0" }),
        "the payload as the last step left it"
    );
    assert_eq!(
        done.result,
        Some(serde_json::json!({ "done_at_attempt": 1 })),
        "steps not attempted are not counted"
    );
}

async fn permanent_error_fails_at_once(h: &Harness) {
    let handler = Scripted::default();
    let alerts = Alerts::default();
    let id = enqueue(&h.queue, "permanent").await;
    let w = start(worker(&h.queue, handler.clone()).alert(alerts.clone()));
    let task = wait_for(&h.queue, id, SOON, |t| t.state == TaskState::Failed).await;
    w.stop().await;
    assert_eq!(task.attempt, 1, "a permanent error is never retried (R-RES-RE-X2)");
    assert_eq!(task.last_error.as_deref(), Some("card declined"));
    assert_eq!(alerts.all()[0].reason, FailReason::Permanent);
}

/// N1: a panicking handler may have done its work (a delivery the upstream
/// applied), so its outcome is unknown: it is tried again with its key, and
/// fails as `panicked` — alerting once — only when its attempts are spent;
/// the worker goes on.
async fn a_panic_is_an_unknown_outcome_tried_again_and_the_worker_goes_on(h: &Harness) {
    let handler = Scripted::default();
    let alerts = Alerts::default();
    let boom = h.queue.enqueue(NewTask::new("job", &job("panic")).max_attempts(2)).await.unwrap().id;
    let quick = DurableBackoff::exponential(Duration::from_millis(20));
    let w = start(worker(&h.queue, handler.clone()).alert(alerts.clone()).concurrency(1).backoff(quick));
    let task = wait_for(&h.queue, boom, SOON, |t| t.state == TaskState::Failed).await;
    assert_eq!(task.attempt, 2, "tried again before failing: {task:?}");
    let error = task.last_error.as_deref().unwrap();
    assert!(error.contains("boom in handler") && error.contains("outcome is unknown"), "{error}");
    let after = enqueue(&h.queue, "ok").await;
    wait_for(&h.queue, after, SOON, |t| t.state == TaskState::Completed).await;
    w.stop().await;
    assert_eq!(handler.calls().iter().filter(|c| c.id == boom).count(), 2);
    let alerted: Vec<FailReason> = alerts.all().iter().map(|a| a.reason).collect();
    assert_eq!(alerted, [FailReason::Panicked], "one alert, when the attempts are spent");
}

async fn bad_payload_fails_with_a_clear_error(h: &Harness) {
    let handler = Scripted::default();
    let alerts = Alerts::default();
    let id = h.queue.enqueue(NewTask::new("job", &42)).await.unwrap().id;
    let ok = enqueue(&h.queue, "ok").await;
    let w = start(worker(&h.queue, handler.clone()).alert(alerts.clone()));
    let task = wait_for(&h.queue, id, SOON, |t| t.state == TaskState::Failed).await;
    wait_for(&h.queue, ok, SOON, |t| t.state == TaskState::Completed).await;
    w.stop().await;
    let error = task.last_error.unwrap();
    assert!(error.contains("payload does not match") && error.contains("Job"), "{error}");
    assert_eq!(alerts.all()[0].reason, FailReason::BadPayload);
    assert_eq!(handler.calls().len(), 1, "the handler never sees a bad payload");
}

async fn lost_lease_cannot_overwrite_the_newer_attempt(h: &Harness) {
    let slow = Scripted::default();
    let id = enqueue(&h.queue, "gate").await;
    // One slot, so the first worker cannot re-claim its own expired task.
    let first = start(worker(&h.queue, slow.clone()).owner("first").concurrency(1));
    wait_for(&h.queue, id, SOON, |t| t.state == TaskState::Running).await;

    // The first worker stops renewing (a pause, a partition): its lease runs
    // out and the second worker claims the task and completes it.
    h.expire_leases().await;
    let fast = Scripted::default();
    fast.gate.add_permits(1);
    let second = start(worker(&h.other_queue().await, fast.clone()).owner("second"));
    let task = wait_for(&h.queue, id, SOON, |t| t.state == TaskState::Completed).await;
    assert_eq!(task.attempt, 2);

    // The first worker now finishes: its completion must change nothing.
    slow.gate.add_permits(1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (a, b) = (first.stop().await, second.stop().await);
    assert_eq!((a.completed, a.lost), (0, 1), "first worker: {a:?}");
    assert_eq!((b.completed, b.lost), (1, 0), "second worker: {b:?}");
    let after = h.queue.get(id).await.unwrap().unwrap();
    assert_eq!((after.state, after.attempt, after.updated_at), (TaskState::Completed, 2, task.updated_at));
}

/// A worker that claimed a task and vanished (killed, its host gone) never
/// renews the lease: the claim takes pending tasks only, so the sweep every
/// worker sends now and then is what returns it to pending — once the lease
/// has run out, never before, and then within a sweep interval (a quarter of
/// the lease) and a poll.
async fn a_vanished_worker_s_task_runs_again_once_its_lease_ran_out(h: &Harness) {
    let handler = Scripted::default();
    let id = enqueue(&h.queue, "ok").await;
    let lease = ballast_queue::MIN_LEASE;
    let vanished = std::time::Instant::now();
    // Claimed as a worker's claim leaves it, by a worker that is gone.
    let claim = if h.is_pg() {
        format!(
            "UPDATE ballast_tasks SET state = 'running', attempt = attempt + 1, lease_owner = 'vanished',
                 lease_token = gen_random_uuid(), lease_expires_at = now() + interval '{} milliseconds'
             WHERE id = {id}",
            lease.as_millis()
        )
    } else {
        let expires = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap() + lease;
        format!(
            "UPDATE ballast_tasks SET state = 'running', attempt = attempt + 1, lease_owner = 'vanished',
                 lease_token = randomblob(16), lease_expires_at = {} WHERE id = {id}",
            expires.as_micros()
        )
    };
    h.exec(&claim).await;
    let w = start(worker(&h.queue, handler.clone()).lease(lease));
    let task = wait_for(&h.queue, id, SOON, |t| t.state == TaskState::Completed).await;
    let took = vanished.elapsed();
    w.stop().await;
    assert!(took >= lease, "taken over after {took:?}, before its lease of {lease:?} ran out");
    // A sweep every quarter of the lease, a poll of 50 ms; the rest is slack
    // for a machine whose cores are busy.
    let bound = lease + lease / 4 + Duration::from_secs(3);
    assert!(took <= bound, "taken over after {took:?}: the sweep should find it within {bound:?}");
    let attempts: Vec<u32> = handler.calls().iter().map(|c| c.attempt).collect();
    assert_eq!(attempts, [2], "the vanished attempt counts; the handler ran once, as attempt 2");
    assert_eq!(task.attempt, 2);
}

async fn heartbeat_keeps_a_long_handler_s_lease(h: &Harness) {
    let (a, b) = (Scripted::default(), Scripted::default());
    // Heartbeats every third of the lease; the handler outlives two leases.
    // A lease of 4 s leaves a renewal over two seconds to be late on a
    // machine whose cores are all busy (2 s was once not enough there).
    let lease = Duration::from_secs(4);
    let id = enqueue(&h.queue, "sleep:9000").await;
    let first = start(worker(&h.queue, a.clone()).lease(lease));
    wait_for(&h.queue, id, SOON, |t| t.state == TaskState::Running).await;
    let second = start(worker(&h.other_queue().await, b.clone()).lease(lease));
    wait_for(&h.queue, id, SOON * 2, |t| t.state == TaskState::Completed).await;
    let (sa, sb) = (first.stop().await, second.stop().await);
    assert_eq!((sa.completed, sa.lost, sb.completed), (1, 0, 0));
    assert!(b.calls().is_empty(), "the lease was renewed, so no one else ran the task");
    assert_eq!(h.queue.get(id).await.unwrap().unwrap().attempt, 1);
}

/// Waits on its cancellation token, to see when the worker tells it to stop.
#[derive(Clone, Default)]
struct Patient {
    started: Arc<AtomicUsize>,
    told_to_stop: Arc<AtomicUsize>,
}

impl Handler for Patient {
    type Payload = u64;
    type Error = TestError;

    async fn handle(&self, task: TaskContext, _: u64) -> Result<(), TestError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        tokio::select! {
            _ = task.cancellation().cancelled() => {
                self.told_to_stop.fetch_add(1, Ordering::SeqCst);
                Err(TestError::Transient)
            }
            _ = tokio::time::sleep(Duration::from_secs(120)) => Ok(()),
        }
    }
}

async fn poll_until(what: &str, within: Duration, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The database stops taking the worker's writes: no renewal gets through,
/// so once the lease may have run out the handler must be told to stop,
/// without waiting for the database to answer.
async fn handler_is_told_to_stop_when_its_lease_cannot_be_renewed(h: &Harness) {
    let handler = Patient::default();
    h.queue.enqueue(NewTask::new("patient", &0)).await.unwrap();
    let w = start(
        Worker::builder(h.queue.clone())
            .handler("patient", handler.clone())
            .lease(Duration::from_secs(1))
            .poll_interval(Duration::from_millis(50)),
    );
    poll_until("handler started", SOON, || handler.started.load(Ordering::SeqCst) == 1).await;
    let lock = h.lock_writes().await;
    poll_until("handler told to stop while its lease could not be renewed", Duration::from_secs(20), || {
        handler.told_to_stop.load(Ordering::SeqCst) == 1
    })
    .await;
    lock.release().await;
    w.stop().await;
}

/// A claim answered only after its lease ran out (the database was slow,
/// or the process paused): the worker no longer holds those tasks, so it
/// must not start their handlers; the task runs under a later claim.
async fn claim_answered_after_its_lease_starts_no_handler(h: &Harness) {
    let handler = Scripted::default();
    let id = enqueue(&h.queue, "ok").await;
    // The shortest lease a worker takes, so the wait past it stays short.
    let lease = ballast_queue::MIN_LEASE;
    let lock = h.lock_writes().await;
    let w = start(worker(&h.queue, handler.clone()).lease(lease));
    h.wait_for_blocked_write().await;
    tokio::time::sleep(lease * 2).await;
    lock.release().await;
    let task = wait_for(&h.queue, id, SOON, |t| t.state == TaskState::Completed).await;
    w.stop().await;
    let attempts: Vec<u32> = handler.calls().iter().map(|c| c.attempt).collect();
    assert!(
        attempts.len() == 1 && attempts[0] >= 2,
        "handler attempts {attempts:?}: attempt 1 was claimed after its lease had run out and must not run"
    );
    assert_eq!(task.attempt, attempts[0]);
}

async fn cancelled_task_is_fenced_too(h: &Harness) {
    let handler = Scripted::default();
    let alerts = Alerts::default();
    let id = h.queue.enqueue(NewTask::new("job", &job("gate"))).await.unwrap().id;
    let w = start(worker(&h.queue, handler.clone()).alert(alerts.clone()));
    wait_for(&h.queue, id, SOON, |t| t.state == TaskState::Running).await;
    assert!(h.queue.cancel(id).await.unwrap());
    assert!(!h.queue.cancel(id).await.unwrap(), "already final");
    handler.gate.add_permits(1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let summary = w.stop().await;
    assert_eq!((summary.completed, summary.lost), (0, 1));
    assert_eq!(h.queue.get(id).await.unwrap().unwrap().state, TaskState::Cancelled);
}

async fn shutdown_finishes_in_flight_then_releases_the_rest(h: &Harness) {
    let handler = Scripted::default();
    let [quick, stuck] = enqueue_each(&h.queue, ["sleep:200", "sleep:60000"]).await;
    let w = start(worker(&h.queue, handler.clone()).shutdown_grace(Duration::from_millis(800)));
    wait_for(&h.queue, stuck, SOON, |t| t.state == TaskState::Running).await;
    wait_for(&h.queue, quick, SOON, |t| t.state == TaskState::Running).await;
    let started = std::time::Instant::now();
    let summary = w.stop().await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!((summary.completed, summary.released), (1, 1), "{summary:?}");
    assert_eq!(h.queue.get(quick).await.unwrap().unwrap().state, TaskState::Completed);
    let released = h.queue.get(stuck).await.unwrap().unwrap();
    assert_eq!((released.state, released.attempt), (TaskState::Pending, 0), "{released:?}");
    assert!(released.lease_owner.is_none() && released.run_at <= SystemTime::now(), "claimable at once");
}

async fn admin_stats_list_retry_cancel_prune(h: &Harness) {
    let handler = Scripted::default();
    let [ok, bad, bad2] = enqueue_each(&h.queue, ["ok", "permanent", "permanent"]).await;
    let w = start(worker(&h.queue, handler.clone()));
    wait_for(&h.queue, ok, SOON, |t| t.state == TaskState::Completed).await;
    wait_for(&h.queue, bad2, SOON, |t| t.state == TaskState::Failed).await;
    wait_for(&h.queue, bad, SOON, |t| t.state == TaskState::Failed).await;
    w.stop().await;
    let waiting =
        h.queue.enqueue(NewTask::new("other", &1).run_after(Duration::from_secs(60))).await.unwrap().id;
    let due = h.queue.enqueue(NewTask::new("other", &2)).await.unwrap().id;

    let stats = h.queue.stats().await.unwrap();
    let by_kind: HashMap<_, _> = stats.iter().map(|s| (s.kind.as_str(), s)).collect();
    assert_eq!((by_kind["job"].completed, by_kind["job"].failed, by_kind["job"].pending), (1, 2, 0));
    assert_eq!(by_kind["other"].pending, 2);
    assert!(by_kind["other"].oldest_due_age.is_some() && by_kind["job"].oldest_due_age.is_none());

    let failed = h.queue.list(&ListFilter::default().state(TaskState::Failed)).await.unwrap();
    assert_eq!(failed.iter().map(|t| t.id).collect::<Vec<_>>(), vec![bad, bad2]);
    let page1 = h.queue.list(&ListFilter::default().limit(2)).await.unwrap();
    let page2 = h.queue.list(&ListFilter::default().limit(2).after(page1[1].id)).await.unwrap();
    let page3 = h.queue.list(&ListFilter::default().limit(2).after(page2[1].id)).await.unwrap();
    let ids: Vec<i64> = [page1, page2, page3].concat().iter().map(|t: &TaskInfo| t.id).collect();
    assert_eq!(ids, vec![ok, bad, bad2, waiting, due]);
    assert_eq!(h.queue.list(&ListFilter::default().kind("other")).await.unwrap().len(), 2);
    // The dashboard pages back from the newest: descending, before an id.
    let newest = h.queue.list(&ListFilter::default().limit(2).newest_first(None)).await.unwrap();
    let older = h.queue.list(&ListFilter::default().limit(2).newest_first(Some(newest[1].id))).await.unwrap();
    let ids: Vec<i64> = [newest, older].concat().iter().map(|t: &TaskInfo| t.id).collect();
    assert_eq!(ids, vec![due, waiting, bad2, bad]);
    // A kind names itself and the kinds under it (`kind/…`), no other.
    let under = h.queue.enqueue(NewTask::new("other/sms", &3)).await.unwrap().id;
    h.queue.enqueue(NewTask::new("otherwise", &4)).await.unwrap();
    let others: Vec<i64> =
        h.queue.list(&ListFilter::default().kind("other")).await.unwrap().iter().map(|t| t.id).collect();
    assert_eq!(others, vec![waiting, due, under]);
    let by_key =
        h.queue.list(&ListFilter::default().kind("other/sms").state(TaskState::Pending)).await.unwrap();
    assert_eq!(by_key.iter().map(|t| t.id).collect::<Vec<_>>(), vec![under]);

    assert!(h.queue.retry(bad).await.unwrap());
    assert!(!h.queue.retry(ok).await.unwrap(), "only failed tasks are retried");
    let retried = h.queue.get(bad).await.unwrap().unwrap();
    assert_eq!((retried.state, retried.attempt, retried.finalized_at), (TaskState::Pending, 0, None));
    assert_eq!(retried.errors.len(), 1, "the history is kept");
    assert!(h.queue.cancel(bad).await.unwrap());
    assert_eq!(h.queue.retry_failed("job").await.unwrap(), 1);
    assert!(h.queue.cancel(waiting).await.unwrap());

    assert_eq!(h.queue.prune(Duration::from_secs(3600)).await.unwrap(), 0);
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Completed `ok`, cancelled `bad` and `waiting`: pruned; pending ones stay.
    assert_eq!(h.queue.prune(Duration::from_millis(1)).await.unwrap(), 3);
    assert_eq!(h.scalar("SELECT count(*) FROM ballast_tasks").await, 4);
}

/// Retention deletes final tasks by state, past each state's own age, a
/// bounded batch per statement, and never a live task.
async fn retention_prunes_by_state_in_batches(h: &Harness) {
    let handler = Scripted::default();
    let mut done = Vec::new();
    for _ in 0..5 {
        done.push(enqueue(&h.queue, "ok").await);
    }
    let failed = enqueue(&h.queue, "permanent").await;
    let w = start(worker(&h.queue, handler.clone()));
    for id in done.iter().chain([&failed]) {
        wait_for(&h.queue, *id, SOON, |t| t.state.is_final()).await;
    }
    w.stop().await;
    let cancelled = h.queue.enqueue(NewTask::new("other", &1)).await.unwrap().id;
    assert!(h.queue.cancel(cancelled).await.unwrap());
    let live =
        h.queue.enqueue(NewTask::new("other", &2).run_after(Duration::from_secs(60))).await.unwrap().id;
    tokio::time::sleep(Duration::from_millis(20)).await;

    let err = h.queue.prune_batch(TaskState::Pending, Duration::ZERO, 10).await.unwrap_err();
    assert!(err.to_string().contains("pending is not a final state"), "{err}");
    assert_eq!(h.queue.prune_batch(TaskState::Completed, Duration::from_secs(3600), 10).await.unwrap(), 0);
    assert_eq!(h.queue.prune_batch(TaskState::Completed, Duration::from_millis(1), 2).await.unwrap(), 2);

    let stop = tokio_util::sync::CancellationToken::new();
    let keep_failed = ballast_queue::Retention::default()
        .completed(Duration::from_millis(1))
        .failed(Duration::from_secs(3600))
        .batch(2);
    // Three completed left (two batches, the second short), one cancelled.
    assert_eq!(keep_failed.prune(&h.queue, &stop).await.unwrap(), 4);
    let left: Vec<i64> = h.queue.list(&ListFilter::default()).await.unwrap().iter().map(|t| t.id).collect();
    assert_eq!(left, vec![failed, live]);
    assert_eq!(keep_failed.failed(Duration::from_millis(1)).prune(&h.queue, &stop).await.unwrap(), 1);
    let left: Vec<i64> = h.queue.list(&ListFilter::default()).await.unwrap().iter().map(|t| t.id).collect();
    assert_eq!(left, vec![live], "a live task is never pruned");
}

/// A key is bound to its first request for its life, per system and
/// caller; an expired binding gives way to the next request and retention
/// deletes it.
async fn a_key_is_bound_to_its_first_request_for_its_life(h: &Harness) {
    let day = Duration::from_secs(24 * 3600);
    let binding = |system, caller, fingerprint, expires_in| KeyBinding {
        system,
        caller,
        key: "order-17-attempt-1",
        fingerprint,
        expires_in,
    };
    assert_eq!(h.queue.bind_key(&binding("pay", "c1", "fp-a", day)).await.unwrap(), "fp-a");
    // The same request again, and another request under the key.
    assert_eq!(h.queue.bind_key(&binding("pay", "c1", "fp-a", day)).await.unwrap(), "fp-a");
    assert_eq!(h.queue.bind_key(&binding("pay", "c1", "fp-b", day)).await.unwrap(), "fp-a");
    // Another system's key, another caller's key: their own.
    assert_eq!(h.queue.bind_key(&binding("crm", "c1", "fp-b", day)).await.unwrap(), "fp-b");
    assert_eq!(h.queue.bind_key(&binding("pay", "c2", "fp-b", day)).await.unwrap(), "fp-b");

    // Once its life is over, the key binds the next request.
    let short = Duration::from_millis(1);
    assert_eq!(h.queue.bind_key(&binding("sms", "c1", "fp-a", short)).await.unwrap(), "fp-a");
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(h.queue.bind_key(&binding("sms", "c1", "fp-b", short)).await.unwrap(), "fp-b");
    tokio::time::sleep(Duration::from_millis(20)).await;

    let stop = tokio_util::sync::CancellationToken::new();
    assert_eq!(ballast_queue::Retention::default().batch(1).prune(&h.queue, &stop).await.unwrap(), 1);
    assert_eq!(h.scalar("SELECT count(*) FROM ballast_bound_keys").await, 3);

    let empty = h.queue.bind_key(&binding("pay", "", "fp-a", day)).await.unwrap_err().to_string();
    assert!(empty.contains("the caller must be 1 to 512 bytes"), "{empty}");
}

async fn error_history_is_bounded(h: &Harness) {
    let handler = Scripted::default();
    let id = h.queue.enqueue(NewTask::new("job", &job("transient")).max_attempts(13)).await.unwrap().id;
    let w = start(worker(&h.queue, handler.clone()));
    for attempt in 1..=12u32 {
        wait_for(&h.queue, id, SOON, |t| t.attempt == attempt && t.state == TaskState::Pending).await;
        h.queue.run_now(id).await.unwrap();
    }
    let task = wait_for(&h.queue, id, SOON, |t| t.state == TaskState::Failed).await;
    w.stop().await;
    assert_eq!(task.errors.len(), ballast_queue::ERROR_HISTORY);
    assert_eq!(task.errors.first().unwrap().attempt, 4);
    assert_eq!(task.errors.last().unwrap().attempt, 13);
}

/// Many workers, each on its own pool: every task completes once and no task
/// is ever in two handlers at the same time.
async fn many_workers_never_share_a_task(h: &Harness) {
    let (workers, per_worker) = if h.is_pg() { (4, 5_000) } else { (4, 500) };
    let total = workers * per_worker;
    for chunk in (0..total).collect::<Vec<_>>().chunks(1_000) {
        let tasks =
            chunk.iter().map(|i| NewTask::new("count", i).key(IdempotencyKey::v5(i, "count"))).collect();
        h.queue.enqueue_batch(tasks).await.unwrap();
    }
    let counter = Counter::default();
    let mut running = Vec::new();
    for n in 0..workers {
        let queue = h.other_queue().await;
        let w = Worker::builder(queue)
            .handler("count", counter.clone())
            .concurrency(50)
            .batch(50)
            .poll_interval(Duration::from_millis(100))
            .owner(format!("w{n}"));
        running.push(start(w));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while h.scalar("SELECT count(*) FROM ballast_tasks WHERE state = 'completed'").await < total as i64 {
        assert!(tokio::time::Instant::now() < deadline, "tasks did not complete in time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut completed = 0;
    for w in running {
        completed += w.stop().await.completed;
    }
    assert_eq!(completed, total as u64);
    assert_eq!(counter.overlaps.load(Ordering::SeqCst), 0, "a task ran in two handlers at once");
    let handled = counter.handled.lock().unwrap();
    assert_eq!(handled.len(), total);
    assert!(handled.values().all(|&n| n == 1), "a task was handled twice");
}

#[derive(Clone, Default)]
struct Counter {
    in_flight: Arc<Mutex<HashSet<i64>>>,
    handled: Arc<Mutex<HashMap<i64, u32>>>,
    overlaps: Arc<AtomicUsize>,
}

impl Handler for Counter {
    type Payload = u64;
    type Error = TestError;

    async fn handle(&self, task: TaskContext, _: u64) -> Result<(), TestError> {
        if !self.in_flight.lock().unwrap().insert(task.id()) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::task::yield_now().await;
        *self.handled.lock().unwrap().entry(task.id()).or_default() += 1;
        self.in_flight.lock().unwrap().remove(&task.id());
        Ok(())
    }
}

/// With a 30 s poll interval, a task enqueued by another process is picked up
/// within seconds: LISTEN/NOTIFY on PostgreSQL. On SQLite the same holds
/// within one process (the queue wakes its own workers).
async fn new_task_wakes_an_idle_worker(h: &Harness) {
    let handler = Scripted::default();
    let w = start(worker(&h.queue, handler.clone()).poll_interval(Duration::from_secs(30)));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let producer = if h.is_pg() { h.other_queue().await } else { h.queue.clone() };
    let id = enqueue(&producer, "ok").await;
    let started = std::time::Instant::now();
    wait_for(&h.queue, id, Duration::from_secs(5), |t| t.state == TaskState::Completed).await;
    w.stop().await;
    assert!(started.elapsed() < Duration::from_secs(5));
}

async fn worker_configuration_is_checked(h: &Harness) {
    let none = Worker::builder(h.queue.clone()).build().unwrap_err();
    assert!(none.to_string().contains("no handlers"), "{none}");
    let twice =
        worker(&h.queue, Scripted::default()).handler("job", Scripted::default()).build().unwrap_err();
    assert!(twice.to_string().contains("two handlers"), "{twice}");
    assert!(worker(&h.queue, Scripted::default()).concurrency(0).build().is_err());

    let minutely = || h.queue.periodic("job", Schedule::every(Duration::from_secs(60)).unwrap());
    let unhandled = worker(&h.queue, Scripted::default())
        .periodic(h.queue.periodic("report", Schedule::every(Duration::from_secs(60)).unwrap()))
        .build()
        .unwrap_err();
    assert!(unhandled.to_string().contains("no handler on this worker runs kind \"report\""), "{unhandled}");
    // Ten attempts back off for far longer than a minute: periods would overlap.
    let overlap = worker(&h.queue, Scripted::default()).periodic(minutely()).build().unwrap_err();
    assert!(overlap.to_string().contains("two periods would run at once"), "{overlap}");
    assert!(worker(&h.queue, Scripted::default()).periodic(minutely().max_attempts(3)).build().is_ok());
    let twice = worker(&h.queue, Scripted::default())
        .periodic(minutely().max_attempts(3))
        .periodic(minutely().max_attempts(3))
        .build()
        .unwrap_err();
    assert!(twice.to_string().contains("same name"), "{twice}");
}

/// A periodic task registered with two workers (two processes' pools) runs
/// once a period: each period's key names its start.
async fn a_periodic_task_runs_once_a_period_on_two_workers(h: &Harness) {
    let handler = Scripted::default();
    let every = h
        .queue
        .periodic("job", Schedule::every(Duration::from_secs(1)).unwrap())
        .payload(&job("ok"))
        .max_attempts(1);
    let a = start(worker(&h.queue, handler.clone()).owner("a").periodic(every.clone()));
    let b = start(worker(&h.other_queue().await, handler.clone()).owner("b").periodic(every));
    poll_until("three periods ran", Duration::from_secs(20), || handler.calls().len() >= 3).await;
    let (a, b) = (a.stop().await, b.stop().await);
    let mut keys: Vec<String> =
        handler.calls().iter().filter_map(|c| c.key.as_ref().map(|k| k.as_str().to_owned())).collect();
    let ran = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), ran, "a period ran twice: {keys:?} ({a:?}, {b:?})");
    assert!(keys.iter().all(|k| k.starts_with("periodic:job:")), "{keys:?}");
    let starts: Vec<u64> = keys.iter().map(|k| k.rsplit(':').next().unwrap().parse().unwrap()).collect();
    assert!(starts.windows(2).all(|w| w[1] > w[0]), "{starts:?}");
}

fn policy() -> ballast::Policy {
    ballast::Policy::builder("gateway")
        .retry(ballast::Retry::attempts(2).backoff(ballast::Backoff::exponential(Duration::from_millis(100))))
        .breaker(ballast::Breaker::consecutive(2).half_open_after(Duration::from_secs(600)))
        .build()
        .expect("valid policy")
}

async fn write_or_defer_hands_over_with_the_same_key(h: &Harness) {
    let policy = policy();
    let key = IdempotencyKey::v5("order-9", "charge");
    let task = || NewTask::new("job", &job("ok"));

    let done =
        policy.write_or_defer(&key, &h.queue, task(), |_| async { Ok::<_, TestError>(7) }).await.unwrap();
    assert!(matches!(done, Handover::Done(7)));
    assert_eq!(h.scalar("SELECT count(*) FROM ballast_tasks").await, 0);

    let declined = policy
        .write_or_defer(&key, &h.queue, task(), |_| async { Err::<u32, _>(TestError::Permanent) })
        .await
        .unwrap_err();
    assert!(matches!(declined, HandoverError::Failed(_)), "{declined}");
    assert_eq!(
        h.scalar("SELECT count(*) FROM ballast_tasks").await,
        0,
        "a permanent error is never deferred"
    );

    let seen = Arc::new(Mutex::new(Vec::new()));
    let deferred = policy
        .write_or_defer(&key, &h.queue, task(), |ctx| {
            seen.lock().unwrap().push(ctx.key().cloned());
            async { Err::<u32, _>(TestError::Transient) }
        })
        .await
        .unwrap();
    let Handover::Deferred { task_id: deferred, .. } = deferred else { panic!("expected a deferral") };
    assert_eq!(seen.lock().unwrap().len(), 2, "both in-memory attempts ran before the hand-over");

    // The breaker is open now (2 failed attempts in a row): rejected, deferred again,
    // landing on the same task because the key is the same.
    let again =
        policy.write_or_defer(&key, &h.queue, task(), |_| async { Ok::<_, TestError>(1) }).await.unwrap();
    let Handover::Deferred { task_id: again, .. } = again else { panic!("expected a rejection to defer") };
    assert_eq!(again, deferred, "the same user action lands on the same task");
    assert_eq!(h.scalar("SELECT count(*) FROM ballast_tasks").await, 1);

    let handler = Scripted::default();
    let w = start(worker(&h.queue, handler.clone()));
    wait_for(&h.queue, deferred, SOON, |t| t.state == TaskState::Completed).await;
    w.stop().await;
    let calls = handler.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].key.as_ref(), Some(&key), "the task carries the in-memory key (R-RES-RE-1)");
    assert!(seen.lock().unwrap().iter().all(|k| k.as_ref() == Some(&key)));

    // A task deferred by an open breaker is due when the breaker lets a
    // delivery probe, not after its whole half_open_after.
    let other = IdempotencyKey::v5("order-10", "charge");
    let Handover::Deferred { task_id: later, .. } =
        policy.write_or_defer(&other, &h.queue, task(), |_| async { Ok::<_, TestError>(1) }).await.unwrap()
    else {
        panic!("breaker still open")
    };
    let stored = h.queue.get(later).await.unwrap().unwrap();
    let probe = ballast::breaker::BACKGROUND_PROBE_AFTER;
    assert!(stored.run_at > SystemTime::now() + probe / 4, "not at once: {stored:?}");
    assert!(stored.run_at <= SystemTime::now() + probe, "{stored:?}");
}

/// A sequence's tasks run one at a time in the order they were enqueued;
/// a task that failed for good holds the sequence until an operator takes
/// it out; a cancelled one lets the next go; other sequences and tasks
/// without one do not wait.
async fn a_sequence_runs_in_order_and_a_failure_holds_it(h: &Harness) {
    let handler = Scripted::default();
    let in_seq = |action: &str, sequence: &str| NewTask::new("job", &job(action)).sequence(sequence);
    let mut ids = Vec::new();
    for action in ["gate", "ok", "permanent", "ok"] {
        ids.push(h.queue.enqueue(in_seq(action, "customer/42")).await.unwrap().id);
    }
    let other = h.queue.enqueue(in_seq("ok", "customer/7")).await.unwrap().id;
    let free = enqueue(&h.queue, "ok").await;
    assert!(h.queue.get(ids[1]).await.unwrap().unwrap().is_held(), "behind the first");
    assert!(!h.queue.get(other).await.unwrap().unwrap().is_held(), "another sequence does not wait");
    assert!(!h.queue.run_now(ids[1]).await.unwrap(), "a held task cannot jump its sequence");
    let w = start(worker(&h.queue, handler.clone()).concurrency(8));
    wait_for(&h.queue, other, SOON, |t| t.state == TaskState::Completed).await;
    wait_for(&h.queue, free, SOON, |t| t.state == TaskState::Completed).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let called =
        |calls: Vec<Call>| calls.iter().map(|c| c.id).filter(|id| ids.contains(id)).collect::<Vec<_>>();
    assert_eq!(called(handler.calls()), [ids[0]], "the second waits while the first runs");
    handler.gate.add_permits(1);
    wait_for(&h.queue, ids[2], SOON, |t| t.state == TaskState::Failed).await;
    assert_eq!(h.queue.sequence_head("customer/42").await.unwrap(), Some(ids[2]), "the failure holds it");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(h.queue.get(ids[3]).await.unwrap().unwrap().is_held());
    assert!(!h.queue.release_from_sequence(ids[1]).await.unwrap(), "only a failed task of a sequence");
    assert!(h.queue.release_from_sequence(ids[2]).await.unwrap());
    wait_for(&h.queue, ids[3], SOON, |t| t.state == TaskState::Completed).await;
    assert_eq!(called(handler.calls()), ids, "in the order they were enqueued, each once");

    // A cancelled task lets the one behind it go; a sequence with nothing
    // left does not hold a new task.
    let later = SystemTime::now() + Duration::from_secs(3600);
    let first = h.queue.enqueue(in_seq("ok", "customer/9").run_at(later)).await.unwrap().id;
    let second = h.queue.enqueue(in_seq("ok", "customer/9")).await.unwrap().id;
    assert!(h.queue.cancel(first).await.unwrap());
    wait_for(&h.queue, second, SOON, |t| t.state == TaskState::Completed).await;
    let fresh = h.queue.enqueue(in_seq("ok", "customer/42")).await.unwrap().id;
    assert!(!h.queue.get(fresh).await.unwrap().unwrap().is_held());
    wait_for(&h.queue, fresh, SOON, |t| t.state == TaskState::Completed).await;
    w.stop().await;
    let bad = h.queue.enqueue(in_seq("ok", "customer 42")).await.unwrap_err().to_string();
    assert!(bad.contains("invalid sequence") && bad.contains("customer/42"), "{bad}");
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let h = super::Harness::sqlite().await;
                    super::$name(&h).await;
                    h.cleanup().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(h) = super::Harness::postgres().await else { return };
                    super::$name(&h).await;
                    h.cleanup().await;
                }
            )*
        }
    };
}

conformance!(
    migrate_is_idempotent,
    enqueue_dedupes_by_kind_and_key,
    invalid_tasks_are_refused_before_the_database,
    handler_gets_payload_key_and_attempt,
    scheduled_task_waits_for_run_at,
    enqueue_in_transaction_commits_or_vanishes,
    transient_errors_back_off_then_fail_with_alert,
    permanent_error_fails_at_once,
    a_successful_attempt_keeps_its_result,
    a_rescheduled_attempt_hands_its_next_payload_on,
    failure_stores_its_alert_tasks_keyed_by_the_failure,
    a_panic_is_an_unknown_outcome_tried_again_and_the_worker_goes_on,
    bad_payload_fails_with_a_clear_error,
    lost_lease_cannot_overwrite_the_newer_attempt,
    a_vanished_worker_s_task_runs_again_once_its_lease_ran_out,
    heartbeat_keeps_a_long_handler_s_lease,
    cancelled_task_is_fenced_too,
    handler_is_told_to_stop_when_its_lease_cannot_be_renewed,
    claim_answered_after_its_lease_starts_no_handler,
    shutdown_finishes_in_flight_then_releases_the_rest,
    admin_stats_list_retry_cancel_prune,
    retention_prunes_by_state_in_batches,
    a_key_is_bound_to_its_first_request_for_its_life,
    error_history_is_bounded,
    many_workers_never_share_a_task,
    new_task_wakes_an_idle_worker,
    worker_configuration_is_checked,
    a_periodic_task_runs_once_a_period_on_two_workers,
    write_or_defer_hands_over_with_the_same_key,
    a_sequence_runs_in_order_and_a_failure_holds_it,
);
