//! Leases: the claim a worker holds on a running task, and the heartbeat that
//! keeps it while a long handler runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::metrics::AttemptCounters;
use crate::store::{AnyStore, Store};

/// A task id with the token of the claim that holds it. Every statement that
/// finishes or extends the attempt carries both, so a worker whose lease was
/// taken over changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Lease {
    pub id: i64,
    pub token: Uuid,
}

/// The tasks a worker is running, with what it needs to renew or abandon them.
#[derive(Debug, Default, Clone)]
pub(crate) struct Held(Arc<Mutex<HashMap<i64, HeldTask>>>);

/// What the worker keeps about a running task.
#[derive(Debug)]
struct HeldTask {
    token: Uuid,
    cancel: CancellationToken,
    counters: Arc<AttemptCounters>,
}

impl Held {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<i64, HeldTask>> {
        // Only inserts and removes happen under the lock; a panic there leaves
        // the map consistent, so a poisoned lock is still usable.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn insert(&self, lease: Lease, cancel: CancellationToken, counters: Arc<AttemptCounters>) {
        self.map().insert(lease.id, HeldTask { token: lease.token, cancel, counters });
    }

    /// The attempt counters of the kind of task `id`, while held.
    pub fn counters(&self, id: i64) -> Option<Arc<AttemptCounters>> {
        self.map().get(&id).map(|held| Arc::clone(&held.counters))
    }

    pub fn remove(&self, id: i64) {
        self.map().remove(&id);
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn leases(&self) -> Vec<Lease> {
        self.map().iter().map(|(&id, held)| Lease { id, token: held.token }).collect()
    }

    pub fn cancel_all(&self) {
        self.map().values().for_each(|held| held.cancel.cancel());
    }

    /// Tells the handlers whose lease could not be renewed to stop.
    fn lost(&self, leases: &[Lease]) {
        let map = self.map();
        for lease in leases {
            if let Some(held) = map.get(&lease.id) {
                if held.token == lease.token {
                    tracing::warn!(
                        task_id = lease.id,
                        "lease lost (it expired and another worker claimed the task, or the task was cancelled); this worker's outcome will be ignored"
                    );
                    held.cancel.cancel();
                }
            }
        }
    }
}

/// Renews every held lease a third of the lease duration before it runs out,
/// until `stop` is cancelled.
pub(crate) async fn heartbeat(store: AnyStore, held: Held, lease: Duration, stop: CancellationToken) {
    let period = lease / 3;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
        let leases = held.leases();
        if leases.is_empty() {
            continue;
        }
        match store.heartbeat(&leases, lease).await {
            Ok(extended) => {
                let lost: Vec<Lease> = leases.into_iter().filter(|l| !extended.contains(&l.id)).collect();
                held.lost(&lost);
            }
            Err(e) => tracing::warn!(error = %e, "lease heartbeat failed; will try again"),
        }
    }
}
