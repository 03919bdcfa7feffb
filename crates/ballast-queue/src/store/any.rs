//! Either backend behind one value: what a [`Queue`](crate::Queue) holds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

#[cfg(feature = "postgres")]
use super::postgres;
#[cfg(feature = "sqlite")]
use super::sqlite;
use super::{ClaimRequest, Exchange, Lease, Store, ValidTask};
use crate::bound_keys::KeyBinding;
use crate::error::Result;
use crate::outcome::Outcome;
use crate::types::{EnqueueOutcome, KindStats, ListFilter, TaskInfo, TaskState};
use crate::Backend;

/// The backend a [`Queue`](crate::Queue) was connected to.
#[derive(Debug, Clone)]
pub(crate) enum AnyStore {
    #[cfg(feature = "sqlite")]
    Sqlite(sqlite::SqliteStore),
    #[cfg(feature = "postgres")]
    Postgres(postgres::PgStore),
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite($s) => $call.await,
            #[cfg(feature = "postgres")]
            AnyStore::Postgres($s) => $call.await,
        }
    };
}

impl AnyStore {
    pub fn backend(&self) -> Backend {
        match self {
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(_) => Backend::Sqlite,
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(_) => Backend::Postgres,
        }
    }
}

impl Store for AnyStore {
    async fn migrate(&self) -> Result<()> {
        dispatch!(self, s => s.migrate())
    }
    async fn is_migrated(&self) -> Result<bool> {
        dispatch!(self, s => s.is_migrated())
    }
    async fn applied_schema(&self) -> Result<i64> {
        dispatch!(self, s => s.applied_schema())
    }
    async fn enqueue(&self, tasks: Vec<ValidTask>) -> Result<Vec<EnqueueOutcome>> {
        dispatch!(self, s => s.enqueue(tasks))
    }
    async fn settle_and_claim(&self, outcomes: &[Outcome], claim: &ClaimRequest) -> Result<Exchange> {
        dispatch!(self, s => s.settle_and_claim(outcomes, claim))
    }
    async fn heartbeat(&self, leases: &[Lease], lease: Duration) -> Result<Vec<Lease>> {
        dispatch!(self, s => s.heartbeat(leases, lease))
    }
    async fn probe_write(&self) -> Result<()> {
        dispatch!(self, s => s.probe_write())
    }
    async fn listen(&self, wake: Arc<Notify>) -> Result<Option<JoinHandle<()>>> {
        dispatch!(self, s => s.listen(wake))
    }
    async fn stats(&self) -> Result<Vec<KindStats>> {
        dispatch!(self, s => s.stats())
    }

    async fn unfinished_by(&self, kind: &str, field: &str) -> Result<BTreeMap<String, u64>> {
        dispatch!(self, s => s.unfinished_by(kind, field))
    }
    async fn list(&self, filter: &ListFilter) -> Result<Vec<TaskInfo>> {
        dispatch!(self, s => s.list(filter))
    }
    async fn get(&self, id: i64) -> Result<Option<TaskInfo>> {
        dispatch!(self, s => s.get(id))
    }
    async fn get_by_key(&self, kind: &str, key: &str) -> Result<Option<TaskInfo>> {
        dispatch!(self, s => s.get_by_key(kind, key))
    }
    async fn ended_among(&self, ids: &[i64]) -> Result<Vec<i64>> {
        dispatch!(self, s => s.ended_among(ids))
    }
    async fn release_held(&self, sequences: Option<&[String]>) -> Result<u64> {
        dispatch!(self, s => s.release_held(sequences))
    }
    async fn sequence_head(&self, sequence: &str) -> Result<Option<i64>> {
        dispatch!(self, s => s.sequence_head(sequence))
    }
    async fn leave_sequence(&self, id: i64) -> Result<Option<String>> {
        dispatch!(self, s => s.leave_sequence(id))
    }
    async fn retry(&self, id: Option<i64>, kind: Option<&str>) -> Result<u64> {
        dispatch!(self, s => s.retry(id, kind))
    }
    async fn run_now(&self, id: i64) -> Result<bool> {
        dispatch!(self, s => s.run_now(id))
    }
    async fn cancel(&self, id: i64) -> Result<Option<Option<String>>> {
        dispatch!(self, s => s.cancel(id))
    }
    async fn prune(&self, state: Option<TaskState>, older_than: Duration, limit: Option<u32>) -> Result<u64> {
        dispatch!(self, s => s.prune(state, older_than, limit))
    }
    async fn bind_key(&self, scope: &[u8; 16], binding: &KeyBinding<'_>) -> Result<String> {
        dispatch!(self, s => s.bind_key(scope, binding))
    }
    async fn prune_bound_keys(&self, limit: u32) -> Result<u64> {
        dispatch!(self, s => s.prune_bound_keys(limit))
    }
}
