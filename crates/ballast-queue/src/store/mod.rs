//! The driver interface: everything the queue, worker and admin API need from
//! a database. Each backend implements it with its own SQL; the conformance
//! suite in `tests/` runs against both.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::admin::{KindStats, ListFilter};
use crate::error::Result;
use crate::lease::Lease;
use crate::task::{EnqueueOutcome, TaskInfo, ValidTask};

pub(crate) mod postgres;
pub(crate) mod sqlite;

/// The database a queue stores its tasks in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Embedded SQLite file (the default).
    Sqlite,
    /// PostgreSQL, for many workers on many hosts.
    Postgres,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
        })
    }
}

/// A task handed to a worker, with the lease that fences its outcome.
#[derive(Debug)]
pub(crate) struct ClaimedTask {
    pub lease: Lease,
    pub kind: String,
    pub payload: String,
    pub key: Option<String>,
    pub attempt: i32,
    pub max_attempts: i32,
}

/// What a worker asks for when it claims.
#[derive(Debug, Clone)]
pub(crate) struct ClaimRequest {
    pub kinds: Arc<[String]>,
    pub owner: Arc<str>,
    pub limit: usize,
    pub lease: Duration,
}

/// The result of reporting completions and claiming in one go.
#[derive(Debug, Default)]
pub(crate) struct Exchange {
    /// Completions refused because the lease had been lost.
    pub refused: Vec<Lease>,
    pub claimed: Vec<ClaimedTask>,
}

/// One implementation per database. Every statement that finishes or extends
/// an attempt is fenced by its [`Lease`]: it changes the row only if the row is
/// still `running` under that lease token, and reports whether it did.
pub(crate) trait Store: Send + Sync {
    async fn migrate(&self) -> Result<()>;
    async fn enqueue(&self, tasks: Vec<ValidTask>) -> Result<Vec<EnqueueOutcome>>;
    /// Marks `completed` as done and claims up to `claim.limit` due tasks
    /// (pending and due, or running with an expired lease), in one round trip
    /// where the backend allows.
    async fn complete_and_claim(&self, completed: &[Lease], claim: &ClaimRequest) -> Result<Exchange>;
    /// Back to pending after `delay`, recording `error`.
    async fn reschedule(&self, lease: Lease, delay: Duration, error: &str) -> Result<bool>;
    /// To failed, recording `error`.
    async fn fail(&self, lease: Lease, error: &str) -> Result<bool>;
    /// Extends the leases still held; returns those extended.
    async fn heartbeat(&self, leases: &[Lease], lease: Duration) -> Result<Vec<Lease>>;
    /// Back to pending, due now, without counting the abandoned attempt;
    /// returns the ids released.
    async fn release(&self, leases: &[Lease]) -> Result<Vec<i64>>;
    /// Wakes `wake` whenever another process enqueues; `None` if the backend
    /// cannot tell.
    async fn listen(&self, wake: Arc<Notify>) -> Result<Option<JoinHandle<()>>>;

    async fn stats(&self) -> Result<Vec<KindStats>>;
    async fn list(&self, filter: &ListFilter) -> Result<Vec<TaskInfo>>;
    async fn get(&self, id: i64) -> Result<Option<TaskInfo>>;
    async fn retry(&self, id: Option<i64>, kind: Option<&str>) -> Result<u64>;
    async fn run_now(&self, id: i64) -> Result<bool>;
    async fn cancel(&self, id: i64) -> Result<bool>;
    async fn prune(&self, older_than: Duration) -> Result<u64>;
}

/// The backend a [`Queue`](crate::Queue) was connected to.
#[derive(Debug, Clone)]
pub(crate) enum AnyStore {
    Sqlite(sqlite::SqliteStore),
    Postgres(postgres::PgStore),
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            AnyStore::Sqlite($s) => $call.await,
            AnyStore::Postgres($s) => $call.await,
        }
    };
}

impl AnyStore {
    pub fn backend(&self) -> Backend {
        match self {
            AnyStore::Sqlite(_) => Backend::Sqlite,
            AnyStore::Postgres(_) => Backend::Postgres,
        }
    }
}

impl Store for AnyStore {
    async fn migrate(&self) -> Result<()> {
        dispatch!(self, s => s.migrate())
    }
    async fn enqueue(&self, tasks: Vec<ValidTask>) -> Result<Vec<EnqueueOutcome>> {
        dispatch!(self, s => s.enqueue(tasks))
    }
    async fn complete_and_claim(&self, completed: &[Lease], claim: &ClaimRequest) -> Result<Exchange> {
        dispatch!(self, s => s.complete_and_claim(completed, claim))
    }
    async fn reschedule(&self, lease: Lease, delay: Duration, error: &str) -> Result<bool> {
        dispatch!(self, s => s.reschedule(lease, delay, error))
    }
    async fn fail(&self, lease: Lease, error: &str) -> Result<bool> {
        dispatch!(self, s => s.fail(lease, error))
    }
    async fn heartbeat(&self, leases: &[Lease], lease: Duration) -> Result<Vec<Lease>> {
        dispatch!(self, s => s.heartbeat(leases, lease))
    }
    async fn release(&self, leases: &[Lease]) -> Result<Vec<i64>> {
        dispatch!(self, s => s.release(leases))
    }
    async fn listen(&self, wake: Arc<Notify>) -> Result<Option<JoinHandle<()>>> {
        dispatch!(self, s => s.listen(wake))
    }
    async fn stats(&self) -> Result<Vec<KindStats>> {
        dispatch!(self, s => s.stats())
    }
    async fn list(&self, filter: &ListFilter) -> Result<Vec<TaskInfo>> {
        dispatch!(self, s => s.list(filter))
    }
    async fn get(&self, id: i64) -> Result<Option<TaskInfo>> {
        dispatch!(self, s => s.get(id))
    }
    async fn retry(&self, id: Option<i64>, kind: Option<&str>) -> Result<u64> {
        dispatch!(self, s => s.retry(id, kind))
    }
    async fn run_now(&self, id: i64) -> Result<bool> {
        dispatch!(self, s => s.run_now(id))
    }
    async fn cancel(&self, id: i64) -> Result<bool> {
        dispatch!(self, s => s.cancel(id))
    }
    async fn prune(&self, older_than: Duration) -> Result<u64> {
        dispatch!(self, s => s.prune(older_than))
    }
}
