//! The queue's counts, kept fresh in the background, so that a metrics
//! scrape, a readiness probe or a dashboard page reads memory and never the
//! database.
//!
//! Counting the table is a scan over it: done per scrape, on the worker's own
//! pool, it slows the deliveries it reports on, and a database that stopped
//! answering makes every scrape hang for the pool's whole acquire timeout.
//! A [`QueueMonitor`] runs one refresh at a time on a queue connection of its
//! own, bounds each by a timeout, and keeps the last counts together with
//! whether the last refresh reached the database.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ::metrics::Gauge;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::metrics::REACHABLE;
use crate::types::KindStats;
use crate::Queue;

/// The queue as the monitor last saw it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueSnapshot {
    /// Counts per kind from the last refresh that succeeded (empty before one did).
    pub stats: Vec<KindStats>,
    /// When those counts were read.
    pub taken_at: Option<SystemTime>,
    /// Whether the last refresh reached the database.
    pub reachable: bool,
    /// Why the last refresh failed, while it does.
    pub error: Option<String>,
    /// When the last refresh ended, successful or not.
    pub checked_at: Option<SystemTime>,
    /// Why the queue cannot store a task, when the monitor checks storage
    /// ([`QueueMonitorBuilder::storage`]) and the last check failed: a disk
    /// that refuses writes, a SQLite file removed or replaced.
    pub storage_error: Option<String>,
}

/// Configures a [`QueueMonitor`]; see [`QueueMonitor::builder`].
#[derive(Debug, derive_setters::Setters)]
#[setters(generate = false)]
pub struct QueueMonitorBuilder {
    queue: Queue,
    /// Time between refreshes (default 5 s).
    #[setters(generate)]
    every: Duration,
    /// How long one refresh may take before the database counts as
    /// unreachable (default 5 s).
    #[setters(generate)]
    timeout: Duration,
    /// Also checks at each refresh that this queue — the one tasks are
    /// stored through — can store one ([`Queue::check_storage`]): readiness
    /// then fails on a full disk or a removed file, not only on a database
    /// that does not answer (default: not checked).
    #[setters(generate, strip_option)]
    storage: Option<Queue>,
    /// Time between the probes that tell, between two refreshes, whether
    /// the database still answers (default [`PROBE_EVERY`]): readiness
    /// follows a database that went away within a probe and its timeout,
    /// not a whole refresh interval.
    #[setters(generate)]
    probe_every: Duration,
}

/// How often a [`QueueMonitor`] asks the database whether it answers,
/// between two refreshes of its counts.
pub const PROBE_EVERY: Duration = Duration::from_millis(500);

/// How long a probe may take before the database counts as unreachable.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

impl QueueMonitorBuilder {
    /// Starts refreshing at once, until `shutdown` is cancelled. Also records
    /// the queue gauges (`ballast_queue_tasks`, `ballast_queue_lag_seconds`)
    /// and `ballast_queue_reachable` after each refresh.
    pub fn spawn(self, shutdown: CancellationToken) -> QueueMonitor {
        let shared = Arc::new(Published {
            snapshot: watch::Sender::new(Arc::new(QueueSnapshot::default())),
            nudged: Notify::new(),
            reachable: ::metrics::gauge!(REACHABLE),
        });
        let monitor = QueueMonitor { shared: Arc::clone(&shared) };
        let every = self.every.max(Duration::from_millis(10));
        let timing = Timing {
            every,
            timeout: self.timeout,
            probe_every: self.probe_every.max(Duration::from_millis(10)),
        };
        tokio::spawn(refresh_loop(self.queue, self.storage, shared, timing, shutdown));
        monitor
    }
}

/// What the refresh loop publishes to every clone of the monitor.
struct Published {
    snapshot: watch::Sender<Arc<QueueSnapshot>>,
    nudged: Notify,
    reachable: Gauge,
}

/// Counts of the queue refreshed in the background; cheap to clone, and
/// every clone sees the same snapshot.
///
/// ```no_run
/// # async fn f() -> Result<(), ballast_queue::Error> {
/// use std::time::Duration;
/// use ballast_queue::{Queue, QueueMonitor};
/// use tokio_util::sync::CancellationToken;
///
/// // A connection of its own, so counting never waits behind the workers.
/// let counts = Queue::connect("postgres://app@db/app").await?;
/// let monitor = QueueMonitor::builder(counts).every(Duration::from_secs(5)).spawn(CancellationToken::new());
/// let snapshot = monitor.snapshot();
/// println!("reachable: {}, kinds: {}", snapshot.reachable, snapshot.stats.len());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct QueueMonitor {
    shared: Arc<Published>,
}

impl std::fmt::Debug for QueueMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueMonitor").field("snapshot", &self.snapshot()).finish()
    }
}

impl QueueMonitor {
    /// Starts configuring a monitor that counts through `queue` — best a
    /// queue connected for it alone, so its scan never takes a connection a
    /// worker is waiting for.
    pub fn builder(queue: Queue) -> QueueMonitorBuilder {
        QueueMonitorBuilder {
            queue,
            every: Duration::from_secs(5),
            timeout: Duration::from_secs(5),
            storage: None,
            probe_every: PROBE_EVERY,
        }
    }

    /// The latest snapshot. Never touches the database.
    pub fn snapshot(&self) -> Arc<QueueSnapshot> {
        Arc::clone(&self.shared.snapshot.borrow())
    }

    /// Waits until the first refresh has ended, successful or not (at most
    /// the monitor's timeout after it started), and returns its snapshot.
    pub async fn first_refresh(&self) -> Arc<QueueSnapshot> {
        let mut seen = self.shared.snapshot.subscribe();
        // An error means the refresh task stopped (shutdown) before its first refresh.
        let first = seen.wait_for(|s| s.checked_at.is_some()).await.map(|s| Arc::clone(&s));
        first.unwrap_or_else(|_| self.snapshot())
    }

    /// Asks for a refresh now rather than at the next interval (after an
    /// operator retried or cancelled tasks, say). Returns at once.
    pub fn refresh_soon(&self) {
        self.shared.nudged.notify_one();
    }
}

/// When the monitor refreshes and probes.
#[derive(Debug, Clone, Copy)]
struct Timing {
    every: Duration,
    timeout: Duration,
    probe_every: Duration,
}

async fn refresh_loop(
    queue: Queue,
    storage: Option<Queue>,
    shared: Arc<Published>,
    timing: Timing,
    shutdown: CancellationToken,
) {
    let timeout = timing.timeout;
    loop {
        let outcome = tokio::select! {
            () = shutdown.cancelled() => return,
            outcome = tokio::time::timeout(timeout, queue.stats()) => outcome,
        };
        let storage_error = match &storage {
            None => None,
            Some(storage) => tokio::select! {
                () = shutdown.cancelled() => return,
                checked = tokio::time::timeout(timeout, storage.check_storage()) => match checked {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(_) => Some(format!("a write took longer than {timeout:?}")),
                },
            },
        };
        let previous = Arc::clone(&shared.snapshot.borrow());
        let now = SystemTime::now();
        let next = match outcome {
            Ok(Ok(stats)) => {
                queue.gauges.record(&stats);
                QueueSnapshot {
                    stats,
                    taken_at: Some(now),
                    reachable: true,
                    error: None,
                    checked_at: Some(now),
                    storage_error,
                }
            }
            Ok(Err(e)) => QueueSnapshot { storage_error, ..unreachable(&previous, e.to_string(), now) },
            Err(_) => QueueSnapshot {
                storage_error,
                ..unreachable(&previous, format!("no answer within {timeout:?}"), now)
            },
        };
        if next.reachable != previous.reachable || previous.checked_at.is_none() {
            match &next.error {
                None => tracing::info!("queue database reachable"),
                Some(e) => tracing::warn!(error = %e, "queue database unreachable; readiness reports it"),
            }
        }
        if next.storage_error != previous.storage_error {
            match &next.storage_error {
                None => tracing::info!("the queue stores tasks again"),
                Some(e) => tracing::error!(error = %e, "the queue cannot store a task; readiness reports it"),
            }
        }
        shared.reachable.set(if next.reachable { 1.0 } else { 0.0 });
        shared.snapshot.send_replace(Arc::new(next));
        if !probe_until_refresh(&queue, &shared, timing, &shutdown).await {
            return;
        }
    }
}

/// Between two refreshes, asks the database every `probe_every` whether
/// it answers: one that stops is published unreachable at once, one that
/// comes back ends the wait (the counts are read again now). False on
/// shutdown.
async fn probe_until_refresh(
    queue: &Queue,
    shared: &Published,
    timing: Timing,
    shutdown: &CancellationToken,
) -> bool {
    let refresh_at = tokio::time::Instant::now() + timing.every;
    loop {
        let wait = timing.probe_every.min(refresh_at.saturating_duration_since(tokio::time::Instant::now()));
        tokio::select! {
            () = shutdown.cancelled() => return false,
            () = tokio::time::sleep(wait) => {}
            () = shared.nudged.notified() => return true,
        }
        if tokio::time::Instant::now() >= refresh_at {
            return true;
        }
        let answered = tokio::select! {
            () = shutdown.cancelled() => return false,
            probed = tokio::time::timeout(PROBE_TIMEOUT, queue.is_migrated()) => match probed {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
            },
        };
        let previous = Arc::clone(&shared.snapshot.borrow());
        match answered {
            Ok(()) if !previous.reachable => return true,
            Ok(()) => {}
            Err(error) if previous.reachable => {
                tracing::warn!(%error, "queue database unreachable; readiness reports it");
                shared.reachable.set(0.0);
                let now = SystemTime::now();
                shared.snapshot.send_replace(Arc::new(unreachable(&previous, error, now)));
            }
            Err(_) => {}
        }
    }
}

/// The last counts, marked as stale: the database did not answer.
fn unreachable(previous: &QueueSnapshot, error: String, now: SystemTime) -> QueueSnapshot {
    QueueSnapshot { reachable: false, error: Some(error), checked_at: Some(now), ..previous.clone() }
}
