//! A durable task queue for the work that in-memory retry must not hold on
//! to: failures longer than a few seconds go to a database table polled by
//! workers, survive restarts, and do not keep requests open (R-RES-RE-4,
//! R-RES-RE-5).
//!
//! - **Backends**: embedded SQLite (the default, `sqlite://file.db`) and
//!   PostgreSQL (`postgres://…`, over TLS with `?sslmode=verify-full&sslrootcert=ca.pem`,
//!   see [`Queue::connect`]) for many workers on many hosts, with the same
//!   semantics. The table, its states and indexes are described in [`schema`].
//! - **Fenced leases**: a claim gives each task a fresh lease token, and every
//!   statement that completes, fails, reschedules or renews an attempt names
//!   that token. A worker whose lease expired and was taken over changes
//!   nothing: the newer attempt's outcome stands. A worker paused past its
//!   lease starts no handler for the tasks it no longer holds, and tells the
//!   running ones to stop ([`Worker`] says exactly what is guaranteed).
//! - **Deduplication**: a task enqueued with an [`IdempotencyKey`](ballast::IdempotencyKey)
//!   exists once per `(kind, key)`, and the handler receives the key.
//! - **Periodic tasks**: [`Queue::periodic`] makes a task of a kind once per
//!   period ([`Schedule::every`], [`Schedule::cron`]) across every worker and
//!   replica on the database, the period's start in its key ([`Periodic`]).
//! - **Outcomes**: success completes the task; a transient error reschedules
//!   it after `2^n s` with jitter ([`DurableBackoff`]); a permanent error, a panic, a
//!   payload of the wrong type or the last failed attempt marks it failed and
//!   fires the [`Alert`].
//!
//! ```no_run
//! use ballast::{Classification, Classify, IdempotencyKey};
//! use ballast_queue::{Handler, NewTask, Queue, TaskContext, Worker};
//! use tokio_util::sync::CancellationToken;
//!
//! #[derive(Debug)]
//! struct SmsError(String);
//! impl std::fmt::Display for SmsError {
//!     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
//!         f.write_str(&self.0)
//!     }
//! }
//! impl Classify for SmsError {
//!     fn classify(&self) -> Classification {
//!         Classification::transient()
//!     }
//! }
//!
//! struct SendSms;
//! impl Handler for SendSms {
//!     type Payload = String;
//!     type Error = SmsError;
//!     async fn handle(&self, task: TaskContext, text: String) -> Result<(), SmsError> {
//!         println!("sending {text:?} with key {:?}", task.key());
//!         Ok(())
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let queue = Queue::connect("sqlite://tasks.db").await?;
//! queue.migrate().await?;
//! let key = IdempotencyKey::v5("order-17", "send-sms");
//! queue.enqueue(NewTask::new("send-sms", "your order shipped").key(key)).await?;
//!
//! let worker = Worker::builder(queue).handler("send-sms", SendSms).concurrency(8).build()?;
//! let shutdown = CancellationToken::new();
//! worker.run(shutdown).await;
//! # Ok(()) }
//! ```

#[cfg(not(any(feature = "sqlite", feature = "postgres")))]
compile_error!("ballast-queue needs a backend: enable its `sqlite` (default) or `postgres` feature");

/// The `ballast_tasks` table: every column, state and index, and the claim SQL.
pub mod schema {
    #![doc = include_str!("../SCHEMA.md")]
}
mod admin;
mod alert;
pub mod bound_keys;
mod error;
mod handler;
mod handover;
mod lease;
/// The queue's Prometheus metrics: names, labels, and when they are updated.
pub mod metrics;
pub mod migrations;
mod monitor;
mod outcome;
mod periodic;
#[cfg(test)]
mod periodic_fleet;
mod queue;
mod quiet;
mod retention;
mod store;
mod task;
#[cfg(all(test, feature = "postgres"))]
mod test_schema;
mod types;
mod worker;

// The schedule, backends, defaults and bounds live below the queue, where
// `ballast lint` reads them too.
pub use ballast_vocab::queue::{
    Backend, DurableBackoff, DurableSchedule, DEFAULT_BATCH, DEFAULT_CONCURRENCY, DEFAULT_LEASE,
    DEFAULT_MAX_AGE, DEFAULT_MAX_ATTEMPTS, DEFAULT_POLL_INTERVAL, MAX_KIND_LEN, MIN_LEASE, RETAIN_COMPLETED,
    RETAIN_FAILED,
};

pub use alert::{Alert, FailReason, FailedTask, LogAlert};
pub use bound_keys::KeyBinding;
pub use error::{Error, Result};
pub use handler::{Handler, LeaseGate, LeaseLost, TaskContext, TaskEnd};
pub use handover::{hand_over, Handover, HandoverError, WriteOrDefer};
pub use migrations::SCHEMA;
pub use monitor::{QueueMonitor, QueueMonitorBuilder, QueueSnapshot, PROBE_EVERY, PROBE_TIMEOUT};
pub use periodic::{CatchUp, Periodic, PeriodicStatus, Schedule, ScheduleError, MAX_CATCH_UP, MIN_PERIOD};
pub use queue::{Queue, TxConnection};
pub use retention::Retention;
pub use task::{check_kind, check_sequence, NewTask, MAX_SEQUENCE_LEN};
pub use types::{
    EnqueueOutcome, ErrorRecord, KindStats, ListFilter, TaskInfo, TaskState, UnknownState, ERROR_HISTORY,
    TABLE,
};
pub use worker::{RunSummary, Worker, WorkerBuildError, WorkerBuilder};

/// The README's example, compiled and run as a doc test so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
