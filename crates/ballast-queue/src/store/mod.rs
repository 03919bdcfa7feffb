//! The driver interface: everything the queue, worker and admin API need from
//! a database. Each backend implements it with its own SQL; the conformance
//! suite in `tests/` runs against both.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use uuid::Uuid;

use crate::bound_keys::KeyBinding;
use crate::error::Result;
use crate::outcome::Outcome;
use crate::types::{EnqueueOutcome, KindStats, ListFilter, TaskInfo, TaskState};

pub(crate) mod any;
#[cfg(test)]
mod fenced_batch;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
mod reads;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

/// A task id with the token of the claim that holds it. Every statement that
/// finishes or extends the attempt carries both, so a worker whose lease was
/// taken over changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Lease {
    pub id: i64,
    pub token: Uuid,
}

/// A task checked for enqueueing, in the types the stores bind. `pub` only
/// because the sealed [`TxConnection`](crate::TxConnection) names it; the
/// crate does not export it.
#[derive(Debug, Clone)]
pub struct ValidTask {
    /// A valid kind (see [`check_kind`](crate::check_kind)).
    pub kind: String,
    /// The payload's JSON text.
    pub payload: String,
    /// The idempotency key's text.
    pub key: Option<String>,
    /// When it is due, in microseconds since the Unix epoch; `None`: now.
    pub run_at: Option<i64>,
    /// Attempts allowed, 1..=`i32::MAX`.
    pub max_attempts: i32,
    /// A valid sequence name (see [`check_sequence`](crate::check_sequence)).
    pub sequence: Option<String>,
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
    pub sequence: Option<String>,
}

/// What a worker asks for when it claims.
#[derive(Debug, Clone)]
pub(crate) struct ClaimRequest {
    pub kinds: Arc<[String]>,
    /// Kinds whose members (`{family}/…`) are claimed too
    /// ([`Handler::family`](crate::Handler::family)).
    pub families: Arc<[String]>,
    pub owner: Arc<str>,
    pub limit: usize,
    pub lease: Duration,
    /// Also return running tasks whose lease expired to pending, their lease
    /// tokens dropped (so the workers that lost them write no outcome): a
    /// claim takes pending tasks only, so this sweep, sent every so often
    /// ([`crate::lease::sweep_interval`]), is how an abandoned task runs
    /// again. Rows settled in the same round trip are not swept. Read by
    /// PostgreSQL's claim alone: SQLite's claim takes expired leases itself.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub sweep: bool,
}

/// The result of settling outcomes and claiming in one go.
#[derive(Debug, Default)]
pub(crate) struct Exchange {
    /// Outcomes refused because the lease had been lost.
    pub refused: Vec<Lease>,
    pub claimed: Vec<ClaimedTask>,
    /// Tasks the completions made due, held behind them in their sequences
    /// until now: a worker asks for them at once rather than at its next poll.
    pub released: u64,
}

/// One implementation per database. Every statement that finishes or extends
/// an attempt is fenced by its [`Lease`]: it changes the row only if the row is
/// still `running` under that lease token, and reports whether it did.
pub(crate) trait Store: Send + Sync {
    async fn migrate(&self) -> Result<()>;
    /// Whether every migration this version knows has been applied; reads
    /// only, never creates.
    async fn is_migrated(&self) -> Result<bool>;

    /// The highest migration applied (0 before the first); reads only.
    async fn applied_schema(&self) -> Result<i64>;
    async fn enqueue(&self, tasks: Vec<ValidTask>) -> Result<Vec<EnqueueOutcome>>;
    /// Writes `outcomes` (each fenced by its lease; a failure's follow-ups
    /// only with it) and claims up to `claim.limit` due tasks (pending and
    /// due, or running with an expired lease), in one transaction, and in
    /// one round trip where the backend allows. A task settled here is never
    /// claimed by the same call.
    async fn settle_and_claim(&self, outcomes: &[Outcome], claim: &ClaimRequest) -> Result<Exchange>;
    /// Extends the leases still held; returns those extended.
    async fn heartbeat(&self, leases: &[Lease], lease: Duration) -> Result<Vec<Lease>>;
    /// Writes one row that must reach the disk, and checks that the
    /// database is still the one opened (a SQLite file removed or replaced
    /// under the process is [`Error::FileGone`](crate::Error::FileGone)).
    async fn probe_write(&self) -> Result<()>;
    /// Wakes `wake` whenever another process enqueues; `None` if the backend
    /// cannot tell.
    async fn listen(&self, wake: Arc<Notify>) -> Result<Option<JoinHandle<()>>>;

    async fn stats(&self) -> Result<Vec<KindStats>>;
    /// Unfinished tasks of `kind` counted by their payload's `field` (a
    /// plain name, checked by the caller).
    async fn unfinished_by(&self, kind: &str, field: &str) -> Result<BTreeMap<String, u64>>;
    async fn list(&self, filter: &ListFilter) -> Result<Vec<TaskInfo>>;
    async fn get(&self, id: i64) -> Result<Option<TaskInfo>>;
    /// The task of `kind` enqueued with idempotency key `key`, if any.
    async fn get_by_key(&self, kind: &str, key: &str) -> Result<Option<TaskInfo>>;
    /// Those of `ids` whose task is final (completed, failed or cancelled)
    /// or gone: one statement for any number of waiters.
    async fn ended_among(&self, ids: &[i64]) -> Result<Vec<i64>>;
    /// Makes due the first task of each sequence (of `sequences`, or of
    /// every sequence with a held task) if it waits held and nothing before
    /// it holds it any more; how many it made due.
    async fn release_held(&self, sequences: Option<&[String]>) -> Result<u64>;
    /// The first task of `sequence` that holds it: pending, running, or
    /// failed and still in it.
    async fn sequence_head(&self, sequence: &str) -> Result<Option<i64>>;
    /// Takes a failed task out of its sequence: the sequence it left, or
    /// `None` if it is not a failed task of one. The task held behind it is
    /// the caller's to release.
    async fn leave_sequence(&self, id: i64) -> Result<Option<String>>;
    async fn retry(&self, id: Option<i64>, kind: Option<&str>) -> Result<u64>;
    /// Makes a pending task due now, unless it waits held behind its sequence.
    async fn run_now(&self, id: i64) -> Result<bool>;
    /// Cancels a pending or running task: `None` if it was final already,
    /// else the sequence it was in, whose next task the caller releases.
    async fn cancel(&self, id: i64) -> Result<Option<Option<String>>>;
    /// Deletes final tasks (of `state` only, when given) finalized more than
    /// `older_than` ago, oldest first, at most `limit` of them when given.
    async fn prune(&self, state: Option<TaskState>, older_than: Duration, limit: Option<u32>) -> Result<u64>;
    /// Binds a key (its `scope`) to its request unless it is bound and not
    /// expired; the fingerprint it is bound to ([`crate::bound_keys`]).
    async fn bind_key(&self, scope: &[u8; 16], binding: &KeyBinding<'_>) -> Result<String>;
    /// Deletes at most `limit` expired key bindings, oldest first.
    async fn prune_bound_keys(&self, limit: u32) -> Result<u64>;
}
