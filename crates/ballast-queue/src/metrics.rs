//! Prometheus metrics through the [`metrics`] facade. Handles are registered
//! once per kind (when a worker is built, or when [`Queue::record_metrics`]
//! first sees a kind), so running a task allocates nothing for metrics.
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `ballast_task_attempts_total` | counter | `kind`, `outcome` | finished attempts of this process's workers; `outcome` is `completed`, `retried` (transient error, rescheduled), `postponed` (refused before anything was sent, rescheduled without counting the attempt), `failed` (marked failed: permanent error, panic, bad payload, last attempt), `lost` (outcome refused: the lease had expired and been taken over, or the task was cancelled) or `released` (handed back at shutdown) |
//! | `ballast_queue_tasks` | gauge | `kind`, `state` | tasks in the table per state, as of the last [`Queue::record_metrics`] |
//! | `ballast_queue_lag_seconds` | gauge | `kind` | age of the oldest due pending task (0 when none), as of the last [`Queue::record_metrics`] |
//! | `ballast_queue_reachable` | gauge | — | 1 while a [`QueueMonitor`](crate::QueueMonitor)'s last refresh reached the database, else 0 |
//! | `ballast_queue_pruned_total` | counter | `state` | final tasks deleted by [`Retention`] |
//!
//! The gauges come from [`Queue::stats`], a `GROUP BY` over the whole table:
//! they are refreshed when the application calls [`Queue::record_metrics`],
//! or in the background by a [`QueueMonitor`](crate::QueueMonitor) — never
//! by a scrape itself, nor by every worker poll.
//!
//! At most [`MAX_KINDS`](crate::metrics::MAX_KINDS) kinds get series of their own, in the order they
//! are first seen; the counts of any further kind are added to the kind
//! [`OTHER_KINDS`](crate::metrics::OTHER_KINDS), so a table holding thousands of kinds cannot blow up a
//! scrape.
//!
//! Handles bind to the recorder installed when they are registered: install
//! the recorder (e.g. `metrics_exporter_prometheus`) before building workers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use ::metrics::{Counter, Gauge};

use crate::types::{KindStats, TaskState};

/// Counter of finished attempts.
pub const ATTEMPTS: &str = "ballast_task_attempts_total";
/// Gauge of tasks per kind and state.
pub const TASKS: &str = "ballast_queue_tasks";
/// Gauge of the age of the oldest due pending task per kind.
pub const LAG: &str = "ballast_queue_lag_seconds";
/// Gauge: 1 while a monitor's last refresh reached the queue database, else 0.
pub const REACHABLE: &str = "ballast_queue_reachable";
/// Counter of final tasks deleted past their retention, by `state`, and of
/// expired key bindings ([`crate::bound_keys`]), `state="key_binding"`.
pub const PRUNED: &str = "ballast_queue_pruned_total";
/// The name of every metric this crate records.
pub const NAMES: [&str; 5] = [ATTEMPTS, TASKS, LAG, REACHABLE, PRUNED];
/// Kinds with gauges of their own; the rest share [`OTHER_KINDS`].
pub const MAX_KINDS: usize = 100;
/// The `kind` label of the gauges that sum every kind past [`MAX_KINDS`]
/// (not a valid kind name, so it cannot collide with one).
pub const OTHER_KINDS: &str = "(other)";

/// The attempt counters of one kind.
#[derive(Debug)]
pub(crate) struct AttemptCounters {
    pub completed: Counter,
    pub retried: Counter,
    pub postponed: Counter,
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
            postponed: counter("postponed"),
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

/// The queue gauges, registered once per kind seen, [`MAX_KINDS`] at most.
#[derive(Default)]
pub(crate) struct QueueGauges(Mutex<Registered>);

#[derive(Default)]
struct Registered {
    kinds: HashMap<String, KindGauges>,
    other: Option<KindGauges>,
}

impl std::fmt::Debug for QueueGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueGauges").finish_non_exhaustive()
    }
}

impl QueueGauges {
    pub(crate) fn record(&self, stats: &[KindStats]) {
        let mut registered = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Registered { kinds, other } = &mut *registered;
        let mut overflow: Option<KindStats> = None;
        for s in stats {
            if !kinds.contains_key(&s.kind) {
                if kinds.len() < MAX_KINDS {
                    kinds.insert(s.kind.clone(), KindGauges::register(&s.kind));
                } else {
                    overflow.get_or_insert_with(|| KindStats::new(OTHER_KINDS.to_owned())).absorb(s);
                }
            }
        }
        // Kinds gone from the table (pruned) drop to zero.
        for (kind, gauges) in kinds.iter() {
            gauges.set(stats.iter().find(|s| &s.kind == kind));
        }
        if overflow.is_some() || other.is_some() {
            other.get_or_insert_with(|| KindGauges::register(OTHER_KINDS)).set(overflow.as_ref());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_exporter_prometheus::PrometheusBuilder;

    fn stats(kind: String, pending: i64, lag_secs: u64) -> KindStats {
        let mut s = KindStats::new(kind);
        s.add(TaskState::Pending, pending);
        s.oldest_due_age = Some(std::time::Duration::from_secs(lag_secs));
        s
    }

    #[test]
    fn ten_thousand_kinds_make_a_bounded_number_of_series() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let gauges = QueueGauges::default();
        let all: Vec<KindStats> = (0..10_000).map(|i| stats(format!("kind-{i:05}"), 2, i)).collect();
        metrics::with_local_recorder(&recorder, || gauges.record(&all));

        let text = handle.render();
        let series = |name: &str| text.lines().filter(|l| l.starts_with(name)).count();
        assert_eq!(series(&format!("{TASKS}{{")), (MAX_KINDS + 1) * TaskState::ALL.len());
        assert_eq!(series(&format!("{LAG}{{")), MAX_KINDS + 1);
        let other = format!("{TASKS}{{kind=\"{OTHER_KINDS}\",state=\"pending\"}} ");
        let summed = text.lines().find_map(|l| l.strip_prefix(other.as_str())).expect("overflow series");
        assert_eq!(summed.trim(), ((10_000 - MAX_KINDS) * 2).to_string(), "nothing is lost in the overflow");
        assert!(text.contains(&format!("{LAG}{{kind=\"{OTHER_KINDS}\"}} 9999")), "the longest lag is kept");
    }
}
