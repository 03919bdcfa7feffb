//! Periodic tasks: "reconcile every pending payment each minute", "pull the
//! report at 06:00" — ordinary tasks whose idempotency key names their
//! period (`periodic:reconcile:1764900000`, the period's start in Unix
//! seconds), so the queue's deduplication by `(kind, key)` makes each period
//! run once however many workers and replicas on one database enqueue it.
//! No leader is elected and no lock is held: every worker registered with a
//! [`Periodic`] enqueues each period's task when the period starts, and all
//! but the first insert find the task already there.
//!
//! Periods are a grid every replica computes alike: multiples of the
//! interval since the Unix epoch ([`Schedule::every`]), or a cron
//! expression's times in UTC ([`Schedule::cron`]). A worker that starts
//! after periods went by enqueues what [`CatchUp`] says (by default the
//! latest missed period only: no storm of stale runs after a long stop),
//! and a restart loses nothing: the current period's task is either stored
//! already or enqueued at start. Periods missed while a worker ran (its
//! database was away, its process paused) are caught up the same way.
//!
//! Periods never overlap: a period's task is enqueued only once the task
//! of the period before it has ended, so missed periods caught up run one
//! after another, never side by side, and a period whose task outlasts
//! the interval delays the next instead of running beside it.

use std::hash::{Hash as _, Hasher as _};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ballast::IdempotencyKey;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

pub use ballast_vocab::queue::{CatchUp, Schedule, ScheduleError, MAX_CATCH_UP, MIN_PERIOD};

use crate::task::NewTask;
use crate::Queue;

/// A task of `kind` enqueued once per period of its [`Schedule`], made by
/// [`Queue::periodic`] and run by the workers it is registered with
/// ([`WorkerBuilder::periodic`](crate::WorkerBuilder::periodic)).
///
/// ```no_run
/// # async fn run(queue: ballast_queue::Queue, reconcile: impl ballast_queue::Handler) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use ballast_queue::{CatchUp, Schedule, Worker};
///
/// let every_minute = queue
///     .periodic("reconcile", Schedule::every(Duration::from_secs(60))?)
///     .payload(&serde_json::json!({ "state": "pending" }))
///     .max_attempts(3)
///     .jitter(Duration::from_secs(5))
///     .catch_up(CatchUp::Latest);
/// let worker = Worker::builder(queue).handler("reconcile", reconcile).periodic(every_minute).build()?;
/// # let _ = worker; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Periodic {
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) schedule: Schedule,
    payload: Result<serde_json::Value, String>,
    pub(crate) catch_up: CatchUp,
    pub(crate) jitter: Duration,
    pub(crate) max_attempts: Option<u32>,
}

impl Queue {
    /// A periodic task of `kind` on `schedule`, named `kind` (see
    /// [`Periodic`]); register it with the workers that run `kind`.
    pub fn periodic(&self, kind: impl Into<String>, schedule: Schedule) -> Periodic {
        let kind = kind.into();
        Periodic {
            name: kind.clone(),
            kind,
            schedule,
            payload: Ok(serde_json::Value::Null),
            catch_up: CatchUp::default(),
            jitter: Duration::ZERO,
            max_attempts: None,
        }
    }
}

impl Periodic {
    /// Names it (default: its kind): the name is in each period's key, so two
    /// periodic tasks of one kind need names of their own.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The payload every period's task carries (default `null`).
    #[must_use]
    pub fn payload<P: Serialize + ?Sized>(mut self, payload: &P) -> Self {
        self.payload = serde_json::to_value(payload).map_err(|e| e.to_string());
        self
    }

    /// What to enqueue for periods missed while no worker ran (default
    /// [`CatchUp::Latest`]).
    #[must_use]
    pub fn catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = catch_up;
        self
    }

    /// Runs each period's task up to `jitter` after the period starts (the
    /// same offset on every replica for one period), so that many periodic
    /// tasks on one schedule do not all reach a system at the same second.
    /// The jitter and the retries together must end before the next period.
    #[must_use]
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }

    /// Attempts each period's task gets (default: the queue's schedule). Its
    /// retries must end before the next period starts: the worker refuses a
    /// periodic task whose worst-case retry window reaches the next period.
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// The key of the period starting at `start`.
    pub fn key(&self, start: SystemTime) -> IdempotencyKey {
        let secs = start.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        IdempotencyKey::parse(&format!("periodic:{}:{secs}", self.name))
            .unwrap_or_else(|_| IdempotencyKey::v5(&self.name, &format!("periodic:{secs}")))
    }

    /// Where it stands at `now`: when its next task is due, and the latest
    /// period's task that has run (of the current period or the one
    /// before), whichever worker or replica ran it. What the dashboard shows
    /// of each periodic task.
    ///
    /// ```no_run
    /// # async fn show(queue: ballast_queue::Queue, periodic: ballast_queue::Periodic) -> ballast_queue::Result<()> {
    /// let status = periodic.status(&queue, std::time::SystemTime::now()).await?;
    /// if let Some(task) = &status.last {
    ///     println!("{}: last run #{} is {}", status.name, task.id, task.state.as_str());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn status(&self, queue: &Queue, now: SystemTime) -> crate::Result<PeriodicStatus> {
        let schedule = &self.schedule;
        let current = schedule.at_or_before(now);
        let previous = current.and_then(|at| schedule.before(at));
        let mut next_run = schedule.after(now).map(|start| start + self.offset(start));
        let mut last = None;
        for start in [current, previous].into_iter().flatten() {
            let Some(task) = queue.get_by_key(&self.kind, self.key(start).as_str()).await? else { continue };
            if task.state == crate::TaskState::Pending && task.attempt == 0 {
                // Enqueued, not run yet (its jitter, or a backlog): the next run.
                next_run = Some(next_run.map_or(task.run_at, |next| next.min(task.run_at)));
                continue;
            }
            last = Some(task);
            break;
        }
        Ok(PeriodicStatus {
            name: self.name.clone(),
            kind: self.kind.clone(),
            schedule: schedule.to_string(),
            catch_up: self.catch_up,
            next_run,
            last,
        })
    }

    /// Why it cannot be run, if it cannot.
    pub(crate) fn check(&self) -> Result<(), String> {
        crate::task::check_kind(&self.kind).map_err(|e| e.to_string())?;
        self.payload.as_ref().map(drop).map_err(|e| format!("its payload does not serialize: {e}"))?;
        ballast_vocab::queue::check_periodic_name(&self.name)
    }

    /// The task of the period starting at `start`.
    fn task(&self, start: SystemTime) -> NewTask {
        let payload = self.payload.as_ref().unwrap_or(&serde_json::Value::Null);
        let mut task =
            NewTask::new(&self.kind, payload).key(self.key(start)).run_at(start + self.offset(start));
        if let Some(attempts) = self.max_attempts {
            task = task.max_attempts(attempts);
        }
        task
    }

    /// This period's share of the jitter: the same on every replica.
    fn offset(&self, start: SystemTime) -> Duration {
        if self.jitter.is_zero() {
            return Duration::ZERO;
        }
        let secs = start.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        // SipHash with fixed keys: the same offset in every process.
        let mut hasher = std::hash::DefaultHasher::new();
        (self.name.as_str(), secs).hash(&mut hasher);
        let fraction = (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64;
        self.jitter.mul_f64(fraction)
    }
}

/// A periodic task at one moment ([`Periodic::status`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PeriodicStatus {
    /// Its name, as in its periods' keys.
    pub name: String,
    /// The kind of its tasks.
    pub kind: String,
    /// Its schedule, as a configuration could write it (`every 1m`,
    /// `every 1m 30s`, `cron "0 6 * * *"`).
    pub schedule: String,
    /// What a worker enqueues for periods missed while none ran.
    pub catch_up: CatchUp,
    /// When the next task is due: a period's task enqueued and not run
    /// yet (in the past when it waits behind a backlog), else the next
    /// period's start plus its share of the jitter; `None` when no period
    /// is left.
    pub next_run: Option<SystemTime>,
    /// The latest task that has run, or is running, of the current period
    /// or the one before; `None` when neither has one (no worker ran them:
    /// `catch_up = "none"` after a stop, say).
    pub last: Option<crate::TaskInfo>,
}

/// How soon a period waiting for the one before it to end is looked at again.
const WAIT_FOR_EARLIER: Duration = Duration::from_secs(1);

/// One periodic task's enqueuing in one worker: what is due, given the time.
#[derive(Debug)]
pub(crate) struct Runner {
    periodic: Periodic,
    /// The next period start to enqueue; `None` before the first call.
    next: Option<SystemTime>,
}

impl Runner {
    pub(crate) fn new(periodic: Periodic) -> Self {
        Self { periodic, next: None }
    }

    /// Enqueues what is due at `now` — on the first call, and after periods
    /// went by unseen, the missed periods [`CatchUp`] asks for — and says
    /// when to look again: the next period's start, or in a second while
    /// the task of the period before the due one has not ended. A failed
    /// enqueue leaves its period to the next call.
    pub(crate) async fn due(&mut self, queue: &Queue, now: SystemTime) -> crate::Result<Option<SystemTime>> {
        let schedule = self.periodic.schedule.clone();
        let next = match self.next {
            Some(next) => next,
            None => {
                let first = match self.first_missed(queue, now).await? {
                    Some(start) => Some(start),
                    None => schedule.after(now),
                };
                let Some(first) = first else { return Ok(None) };
                self.next = Some(first);
                first
            }
        };
        let mut next = next;
        while next <= now {
            // Periods that went by unseen are caught up as at a start: only
            // the latest, unless every one is asked for.
            if self.periodic.catch_up != CatchUp::All {
                if let Some(latest) = schedule.at_or_before(now) {
                    next = next.max(latest);
                }
            }
            if self.earlier_unfinished(queue, next).await? {
                self.next = Some(next);
                return Ok(Some(now + WAIT_FOR_EARLIER));
            }
            self.enqueue(queue, next).await?;
            match schedule.after(next) {
                Some(after) => next = after,
                None => {
                    self.next = None;
                    return Ok(None);
                }
            }
            self.next = Some(next);
        }
        metrics::gauge!("ballast_queue_periodic_next_run_timestamp_seconds", "name" => self.periodic.name.clone())
            .set(next.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()));
        Ok(Some(next))
    }

    /// The oldest period start to enqueue when a worker starts at `now` (the
    /// later ones follow it, one at a time); `None` when nothing is missed.
    async fn first_missed(&self, queue: &Queue, now: SystemTime) -> crate::Result<Option<SystemTime>> {
        let schedule = &self.periodic.schedule;
        let Some(current) = schedule.at_or_before(now) else { return Ok(None) };
        Ok(match self.periodic.catch_up {
            CatchUp::None => None,
            CatchUp::Latest => Some(current),
            CatchUp::All => {
                let (mut oldest, mut reached) = (None, 0);
                let mut start = Some(current);
                while let Some(at) = start.filter(|_| reached < MAX_CATCH_UP) {
                    let key = self.periodic.key(at);
                    if queue.get_by_key(&self.periodic.kind, key.as_str()).await?.is_some() {
                        return Ok(oldest);
                    }
                    oldest = Some(at);
                    reached += 1;
                    start = schedule.before(at);
                }
                // No earlier period ran within reach: a first start has
                // nothing to catch up on.
                Some(current)
            }
        })
    }

    /// Whether the task of the period before `start` is still to end
    /// (pending, held back by its jitter or its retries, or running): the
    /// period starting at `start` waits for it (C7).
    async fn earlier_unfinished(&self, queue: &Queue, start: SystemTime) -> crate::Result<bool> {
        let Some(before) = self.periodic.schedule.before(start) else { return Ok(false) };
        let key = self.periodic.key(before);
        let task = queue.get_by_key(&self.periodic.kind, key.as_str()).await?;
        Ok(task.is_some_and(|task| !task.state.is_final()))
    }

    async fn enqueue(&self, queue: &Queue, start: SystemTime) -> crate::Result<()> {
        let outcome = queue.enqueue(self.periodic.task(start)).await?;
        if outcome.created {
            metrics::counter!("ballast_queue_periodic_enqueued_total", "name" => self.periodic.name.clone())
                .increment(1);
            tracing::debug!(name = %self.periodic.name, task_id = outcome.id, "periodic task enqueued");
        }
        Ok(())
    }
}

/// Enqueues every period of `periodic` as it starts, until `stop`. Time is
/// the wall clock at start carried on by tokio's clock (so tests run it on
/// the paused clock); the periods are the wall clock's grid, so replicas
/// whose clocks differ by seconds still enqueue the same keys.
pub(crate) async fn run(queue: Queue, periodic: Vec<Periodic>, stop: CancellationToken) {
    let (wall, started) = (SystemTime::now(), tokio::time::Instant::now());
    let now = || wall + started.elapsed();
    let mut runners: Vec<Runner> = periodic.into_iter().map(Runner::new).collect();
    loop {
        let mut wake = now() + Duration::from_secs(3600);
        for runner in &mut runners {
            match runner.due(&queue, now()).await {
                Ok(Some(next)) => wake = wake.min(next),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(name = %runner.periodic.name, error = %e, "cannot enqueue a periodic task; trying again in a second");
                    wake = wake.min(now() + Duration::from_secs(1));
                }
            }
        }
        let wait = wake.duration_since(now()).unwrap_or_default();
        if stop.run_until_cancelled(tokio::time::sleep(wait)).await.is_none() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_period_s_key_and_jitter_are_the_same_everywhere() {
        let queue_less = Periodic {
            name: "reconcile".into(),
            kind: "reconcile".into(),
            schedule: Schedule::every(Duration::from_secs(60)).unwrap(),
            payload: Ok(serde_json::Value::Null),
            catch_up: CatchUp::Latest,
            jitter: Duration::from_secs(10),
            max_attempts: None,
        };
        assert_eq!(queue_less.key(at(999_960)).as_str(), "periodic:reconcile:999960");
        let offsets: Vec<Duration> = (0..20).map(|i| queue_less.offset(at(999_960 + 60 * i))).collect();
        assert_eq!(offsets, (0..20).map(|i| queue_less.offset(at(999_960 + 60 * i))).collect::<Vec<_>>());
        assert!(offsets.iter().all(|o| *o <= Duration::from_secs(10)));
        assert!(offsets.windows(2).any(|w| w[0] != w[1]), "spread: {offsets:?}");
    }
}
