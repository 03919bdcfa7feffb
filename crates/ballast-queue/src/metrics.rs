//! Prometheus metrics through the [`metrics`] facade. Handles are registered
//! once per kind (when a worker is built, or when [`Queue::record_metrics`]
//! first sees a kind), so running a task allocates nothing for metrics.
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `ballast_task_attempts_total` | counter | `kind`, `outcome` | finished attempts of this process's workers; `outcome` is `completed`, `retried` (transient error, rescheduled), `failed` (marked failed: permanent error, panic, bad payload, last attempt), `lost` (outcome refused: the lease had expired and been taken over, or the task was cancelled) or `released` (handed back at shutdown) |
//! | `ballast_queue_tasks` | gauge | `kind`, `state` | tasks in the table per state, as of the last [`Queue::record_metrics`] |
//! | `ballast_queue_lag_seconds` | gauge | `kind` | age of the oldest due pending task (0 when none), as of the last [`Queue::record_metrics`] |
//!
//! The gauges come from [`Queue::stats`], a `GROUP BY` over the whole table:
//! they are refreshed when the application calls [`Queue::record_metrics`]
//! (e.g. before each scrape, or every few seconds), not by every worker poll.
//!
//! Handles bind to the recorder installed when they are registered: install
//! the recorder (e.g. `metrics_exporter_prometheus`) before building workers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use ::metrics::{Counter, Gauge};

use crate::admin::KindStats;
use crate::error::Result;
use crate::task::TaskState;
use crate::Queue;

/// Counter of finished attempts.
pub const ATTEMPTS: &str = "ballast_task_attempts_total";
/// Gauge of tasks per kind and state.
pub const TASKS: &str = "ballast_queue_tasks";
/// Gauge of the age of the oldest due pending task per kind.
pub const LAG: &str = "ballast_queue_lag_seconds";

/// The attempt counters of one kind.
#[derive(Debug)]
pub(crate) struct AttemptCounters {
    pub completed: Counter,
    pub retried: Counter,
    pub failed: Counter,
    pub lost: Counter,
    pub released: Counter,
}

impl AttemptCounters {
    pub fn register(kind: &str) -> Arc<Self> {
        let counter = |outcome: &'static str| ::metrics::counter!(ATTEMPTS, "kind" => kind.to_owned(), "outcome" => outcome);
        Arc::new(Self {
            completed: counter("completed"),
            retried: counter("retried"),
            failed: counter("failed"),
            lost: counter("lost"),
            released: counter("released"),
        })
    }
}

struct KindGauges {
    states: [Gauge; 5],
    lag: Gauge,
}

impl KindGauges {
    fn register(kind: &str) -> Self {
        let state =
            |state: TaskState| ::metrics::gauge!(TASKS, "kind" => kind.to_owned(), "state" => state.as_str());
        Self { states: TaskState::ALL.map(state), lag: ::metrics::gauge!(LAG, "kind" => kind.to_owned()) }
    }

    fn set(&self, stats: Option<&KindStats>) {
        for (gauge, state) in self.states.iter().zip(TaskState::ALL) {
            gauge.set(stats.map_or(0, |s| s.count(state)) as f64);
        }
        self.lag.set(stats.and_then(|s| s.oldest_due_age).map_or(0.0, |age| age.as_secs_f64()));
    }
}

/// The queue gauges, registered once per kind seen.
#[derive(Default)]
pub(crate) struct QueueGauges(Mutex<HashMap<String, KindGauges>>);

impl std::fmt::Debug for QueueGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueGauges").finish_non_exhaustive()
    }
}

impl QueueGauges {
    fn record(&self, stats: &[KindStats]) {
        let mut kinds = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for s in stats {
            if !kinds.contains_key(&s.kind) {
                kinds.insert(s.kind.clone(), KindGauges::register(&s.kind));
            }
        }
        // Kinds gone from the table (pruned) drop to zero.
        for (kind, gauges) in kinds.iter() {
            gauges.set(stats.iter().find(|s| &s.kind == kind));
        }
    }
}

impl Queue {
    /// Refreshes the `ballast_queue_tasks{kind,state}` and
    /// `ballast_queue_lag_seconds{kind}` gauges from [`Queue::stats`] and
    /// returns those stats. One `GROUP BY` over the table: call it before a
    /// scrape or on an interval, not per task. Attempt counters
    /// (`ballast_task_attempts_total`) are kept by the workers themselves.
    pub async fn record_metrics(&self) -> Result<Vec<KindStats>> {
        let stats = self.stats().await?;
        self.gauges.record(&stats);
        Ok(stats)
    }
}
