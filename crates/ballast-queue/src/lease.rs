//! Leases: the claim a worker holds on a running task, the heartbeat that
//! keeps it while a long handler runs, the watchdog that tells a handler
//! to stop once its lease may have run out, and how often a worker sweeps
//! for tasks whose lease ran out. What this guarantees is documented on
//! [`Worker`](crate::Worker).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics::AttemptCounters;
use crate::store::any::AnyStore;
use crate::store::{Lease, Store};

/// The instant, on this process's monotonic clock, by which a lease asked for
/// (claimed or renewed) at `asked` may have run out in the database.
///
/// The database starts counting when it runs the statement, after `asked`, so
/// `asked + lease` is never late. It counts on its own clock, though
/// (PostgreSQL's `now()`, or on SQLite each writer's wall clock): the margin
/// of 1/500 of the lease (2 ms per second) covers clocks whose rates differ
/// by up to 2,000 ppm, twice the most two clocks disciplined by NTP can
/// (500 ppm each way).
pub(crate) fn deadline(asked: Instant, lease: Duration) -> Instant {
    asked + lease - lease / 500
}

/// A held lease's deadline ([`deadline`]), shared by the worker that moves
/// it on at each renewal and the handler that reads it before it sends
/// ([`LeaseGate`](crate::LeaseGate)).
#[derive(Debug, Clone)]
pub(crate) struct Deadline(Arc<Mutex<Instant>>);

impl Deadline {
    fn new(at: Instant) -> Self {
        Self(Arc::new(Mutex::new(at)))
    }

    pub(crate) fn get(&self) -> Instant {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn extend_to(&self, at: Instant) {
        let mut deadline = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *deadline = (*deadline).max(at);
    }
}

/// The tasks a worker holds, with what it needs to renew or abandon them.
/// A task leaves it when its handler returns (its outcome then waits for the
/// completer, unrenewed: it is written within milliseconds) or when its
/// handler may not start.
#[derive(Debug, Default, Clone)]
pub(crate) struct Held {
    inner: Arc<Mutex<HeldState>>,
    /// Wakes the watchdog when a task's deadline comes before the one it
    /// sleeps until.
    earlier: Arc<Notify>,
}

#[derive(Debug, Default)]
struct HeldState {
    tasks: HashMap<Lease, HeldTask>,
    /// The deadline the watchdog sleeps until, if any.
    watching: Option<Instant>,
}

/// What the worker keeps about a task it holds.
#[derive(Debug)]
struct HeldTask {
    cancel: CancellationToken,
    counters: Arc<AttemptCounters>,
    /// See [`deadline`]; moved on by each renewal.
    deadline: Deadline,
    /// A renewal found the lease taken: the handler was told to stop.
    lost: bool,
}

impl Held {
    fn inner(&self) -> std::sync::MutexGuard<'_, HeldState> {
        // Nothing panics under the lock; a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds `lease` until `deadline` unless renewed.
    pub fn insert(
        &self,
        lease: Lease,
        cancel: CancellationToken,
        counters: Arc<AttemptCounters>,
        deadline: Instant,
    ) {
        let mut inner = self.inner();
        inner
            .tasks
            .insert(lease, HeldTask { cancel, counters, deadline: Deadline::new(deadline), lost: false });
        // A claim's tasks share one deadline, later than any held before:
        // the watchdog is woken only when it would otherwise sleep too long.
        if inner.watching.is_none_or(|at| deadline < at) {
            inner.watching = Some(deadline);
            self.earlier.notify_one();
        }
    }

    /// Whether the handler of `lease` may start: yes while the lease cannot
    /// have run out and the handler was not told to stop already — the
    /// answer is then the lease's deadline, for the handler to read before
    /// it sends. Otherwise the task is forgotten (its lease lapses and any
    /// worker may claim it) and the answer is how late it is.
    pub fn start(&self, lease: Lease) -> Result<Deadline, Duration> {
        let mut inner = self.inner();
        let now = Instant::now();
        match inner.tasks.get(&lease) {
            Some(task) if now < task.deadline.get() && !task.cancel.is_cancelled() => {
                Ok(task.deadline.clone())
            }
            Some(task) => {
                let late = now.saturating_duration_since(task.deadline.get());
                inner.tasks.remove(&lease);
                Err(late)
            }
            None => Err(Duration::ZERO),
        }
    }

    /// Lets go of `lease` (its handler returned); its attempt counters.
    pub fn remove(&self, lease: Lease) -> Option<Arc<AttemptCounters>> {
        self.inner().tasks.remove(&lease).map(|task| task.counters)
    }

    pub fn len(&self) -> usize {
        self.inner().tasks.len()
    }

    /// Every held lease.
    #[cfg(test)]
    pub fn leases(&self) -> Vec<Lease> {
        self.inner().tasks.keys().copied().collect()
    }

    /// Lets go of every held task (shutdown): their leases and counters.
    pub fn drain(&self) -> Vec<(Lease, Arc<AttemptCounters>)> {
        self.inner().tasks.drain().map(|(lease, task)| (lease, task.counters)).collect()
    }

    /// The leases worth renewing: all but those already found taken.
    fn renewable(&self) -> Vec<Lease> {
        self.inner().tasks.iter().filter(|(_, task)| !task.lost).map(|(lease, _)| *lease).collect()
    }

    pub fn cancel_all(&self) {
        self.inner().tasks.values().for_each(|task| task.cancel.cancel());
    }

    /// Applies a heartbeat round asked for at `asked` over `round`: moves the
    /// deadlines of the leases `extended`, and tells the handlers of the
    /// others to stop.
    fn renewed(&self, asked: Instant, lease: Duration, round: &[Lease], extended: &[Lease]) {
        let mut inner = self.inner();
        for held in round {
            // Absent: the handler returned and its outcome went to the
            // completer, which may have released the lease already.
            let Some(task) = inner.tasks.get_mut(held) else { continue };
            if extended.contains(held) {
                task.deadline.extend_to(deadline(asked, lease));
            } else if !task.lost {
                tracing::warn!(
                    task_id = held.id,
                    "lease lost (it expired and another worker claimed the task, or the task was cancelled): telling the handler to stop; this worker's outcome will be ignored"
                );
                task.cancel.cancel();
                task.lost = true;
            }
        }
    }

    /// Tells every running handler whose deadline has passed to stop; returns
    /// the next deadline to watch.
    fn cancel_overdue(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut inner = self.inner();
        let mut next: Option<Instant> = None;
        for (lease, task) in &inner.tasks {
            if task.lost || task.cancel.is_cancelled() {
                continue;
            }
            let at = task.deadline.get();
            if at <= now {
                tracing::warn!(
                    task_id = lease.id,
                    late = ?now - at,
                    "lease not renewed in time (the database is unreachable or slow, or this process was paused): telling the handler to stop, another worker may claim the task"
                );
                task.cancel.cancel();
            } else {
                next = Some(next.map_or(at, |next| next.min(at)));
            }
        }
        inner.watching = next;
        next
    }
}

/// How often a worker with leases of `lease` sweeps for expired ones (with
/// the next round trip it makes then, [`ClaimRequest::sweep`]): a quarter of
/// the lease, between 100 ms and 5 s. A task whose worker vanished is
/// pending again within `lease` plus this (plus the poll interval, for a
/// worker with nothing to do).
///
/// [`ClaimRequest::sweep`]: crate::store::ClaimRequest::sweep
pub(crate) fn sweep_interval(lease: Duration) -> Duration {
    (lease / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
}

/// Renews every held lease every third of the lease duration, until `stop`
/// is cancelled.
pub(crate) async fn heartbeat(store: AnyStore, held: Held, lease: Duration, stop: CancellationToken) {
    let period = lease / 3;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
        let round = held.renewable();
        if round.is_empty() {
            continue;
        }
        renew(&store, &held, &round, lease).await;
    }
}

/// One heartbeat round over `round`, the held set as it was when the round began.
pub(crate) async fn renew(store: &AnyStore, held: &Held, round: &[Lease], lease: Duration) {
    let asked = Instant::now();
    match store.heartbeat(round, lease).await {
        Ok(extended) => held.renewed(asked, lease, round, &extended),
        Err(e) => tracing::warn!(
            error = %e,
            "lease heartbeat failed; will try again (handlers whose lease runs out meanwhile are told to stop)"
        ),
    }
}

/// Tells a handler to stop as soon as its lease may have run out without a
/// renewal, whatever the heartbeat is waiting for; until `stop` is cancelled.
pub(crate) async fn watchdog(held: Held, stop: CancellationToken) {
    loop {
        let next = held.cancel_overdue();
        let overdue = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = held.earlier.notified() => {}
            _ = overdue => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    const LEASE: Duration = Duration::from_secs(30);

    fn lease(id: i64) -> Lease {
        Lease { id, token: uuid::Uuid::now_v7() }
    }

    fn hold(held: &Held, lease: Lease, deadline: Instant) -> CancellationToken {
        let cancel = CancellationToken::new();
        held.insert(lease, cancel.clone(), AttemptCounters::register("test"), deadline);
        cancel
    }

    #[test]
    fn the_local_deadline_comes_before_the_database_s() {
        let asked = Instant::now();
        assert_eq!(deadline(asked, LEASE), asked + LEASE - Duration::from_millis(60));
        assert_eq!(deadline(asked, Duration::from_secs(1)), asked + Duration::from_millis(998));
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_starts_only_before_its_deadline() {
        let held = Held::default();
        let (on_time, late) = (lease(1), lease(2));
        hold(&held, on_time, Instant::now() + LEASE);
        hold(&held, late, Instant::now() + Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(
            held.start(on_time).map(|d| d.get()).ok(),
            Some(Instant::now() - Duration::from_secs(3) + LEASE)
        );
        assert_eq!(held.start(late).err(), Some(Duration::from_secs(2)));
        assert_eq!(held.leases(), vec![on_time], "the late task is no longer held");
        assert_eq!(held.start(late).err(), Some(Duration::ZERO));
        // Told to stop (the watchdog fired before a renewal came back): never started.
        let told = lease(3);
        hold(&held, told, Instant::now() + LEASE).cancel();
        assert_eq!(held.start(told).err(), Some(Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn the_watchdog_cancels_at_the_deadline_unless_renewed() {
        let held = Held::default();
        let stop = CancellationToken::new();
        let watchdog = tokio::spawn(watchdog(held.clone(), stop.clone()));
        let start = Instant::now();
        let (renewed, stale) = (lease(1), lease(2));
        let keeps = hold(&held, renewed, deadline(start, LEASE));
        let loses = hold(&held, stale, deadline(start, LEASE));
        tokio::time::sleep(LEASE / 3).await;
        held.renewed(Instant::now(), LEASE, &[renewed, stale], &[renewed, stale]);
        // The stale lease's renewals stop getting through (the database is down).
        let due = deadline(start + LEASE / 3, LEASE);
        tokio::time::sleep_until(due - Duration::from_millis(1)).await;
        assert!(!loses.is_cancelled(), "cancelled before its deadline");
        held.renewed(Instant::now(), LEASE, &[renewed], &[renewed]);
        tokio::time::timeout(LEASE, loses.cancelled()).await.expect("never cancelled");
        assert_eq!(Instant::now(), due, "cancelled at its deadline");
        assert!(!keeps.is_cancelled(), "renewed, so not cancelled");
        // Added later, with an earlier deadline than any held: watched too.
        let due = Instant::now() + Duration::from_millis(5);
        let soon = hold(&held, lease(3), due);
        tokio::time::timeout(LEASE, soon.cancelled()).await.expect("never cancelled");
        assert_eq!(Instant::now(), due);
        stop.cancel();
        watchdog.await.unwrap();
    }

    #[test]
    fn a_lease_found_taken_cancels_the_handler_once_and_is_not_renewed_again() {
        let held = Held::default();
        let (lost, finished) = (lease(1), lease(2));
        let now = Instant::now();
        let cancel = hold(&held, lost, now + LEASE);
        let done = hold(&held, finished, now + LEASE);
        // A round that began while both handlers ran; one of them returned
        // and its outcome was stored (releasing the lease) before the round came back.
        let round = held.leases();
        assert!(held.remove(finished).is_some());
        held.renewed(now, LEASE, &round, &[]);
        assert!(cancel.is_cancelled());
        assert!(!done.is_cancelled(), "its handler already returned");
        assert_eq!(held.renewable(), Vec::<Lease>::new(), "the lost lease is not renewed again");
        held.renewed(now, LEASE, &[lost], &[]);
        assert_eq!(held.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_watchdog_is_woken_only_for_an_earlier_deadline() {
        let held = Held::default();
        let at = Instant::now() + LEASE;
        hold(&held, lease(1), at);
        assert_eq!(held.inner().watching, Some(at));
        let woken = held.earlier.notified();
        tokio::pin!(woken);
        // Consumes the permit the first insert stored.
        assert!(woken.as_mut().now_or_never().is_some());
        let woken = held.earlier.notified();
        tokio::pin!(woken);
        hold(&held, lease(2), at + Duration::from_secs(1));
        assert!(woken.as_mut().now_or_never().is_none(), "a later deadline wakes nobody");
        hold(&held, lease(3), at - Duration::from_secs(1));
        assert!(woken.as_mut().now_or_never().is_some(), "an earlier one does");
    }
}
