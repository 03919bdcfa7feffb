//! [`WorkerBuilder`]: a worker's handlers and settings, checked before it
//! runs ([`WorkerBuildError`] says what cannot run and what to do).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::executor::Attempts;
use super::{Worker, MAX_PIPELINE};
use crate::alert::{Alert, LogAlert};
use crate::handler::{Erased, ErasedHandler, Handler};
use crate::lease::Held;
use crate::metrics::AttemptCounters;
use crate::store::ClaimRequest;
use crate::{DurableBackoff, Queue, DEFAULT_BATCH, DEFAULT_CONCURRENCY, DEFAULT_LEASE, MIN_LEASE};

/// Why a worker cannot be built: each says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerBuildError {
    /// Two handlers were registered for one kind.
    #[error("kind {kind:?} has two handlers: register one handler per kind")]
    DuplicateHandler {
        /// The kind.
        kind: String,
    },
    /// No handler was registered.
    #[error("no handlers: register one with .handler(kind, handler)")]
    NoHandlers,
    /// A handler's kind is not a task kind (see [`check_kind`](crate::check_kind)).
    #[error("{0}")]
    InvalidKind(String),
    /// The alert enqueues tasks of a kind this worker has no handler for.
    #[error(
        "the alert enqueues tasks of kind {kind:?}, which this worker has no handler for: they would \
         wait forever and nobody would be told of a failure (R-RES-RE-5); register its handler with \
         .handler({kind:?}, ..) on this worker"
    )]
    UnhandledAlert {
        /// The kind of the alert's tasks.
        kind: String,
    },
    /// A periodic task cannot run here as registered.
    #[error("periodic task {name:?}: {why}")]
    Periodic {
        /// Its name.
        name: String,
        /// Why.
        why: String,
    },
    /// `concurrency` or `batch` is zero.
    #[error("concurrency and batch must be at least 1")]
    Zero,
    /// The lease is too short, or the poll interval zero.
    #[error(
        "lease must be at least {MIN_LEASE:?} ({DEFAULT_LEASE:?} is typical) and poll_interval above zero"
    )]
    Timing,
}

/// Configures a [`Worker`]; see [`Worker::builder`].
#[derive(derive_setters::Setters)]
#[setters(generate = false)]
pub struct WorkerBuilder {
    queue: Queue,
    handlers: HashMap<String, Arc<dyn ErasedHandler>>,
    duplicate: Option<String>,
    /// Handlers running at once (default [`DEFAULT_CONCURRENCY`], 200). With
    /// room for several batches the worker keeps up to 4 round trips in
    /// flight, so one worker per process is enough.
    #[setters(generate)]
    concurrency: usize,
    /// Tasks claimed per round trip at most (default [`DEFAULT_BATCH`], 100;
    /// never more than the concurrency).
    #[setters(generate)]
    batch: usize,
    /// How often to look for due tasks when nothing wakes the worker
    /// (default: the queue's [`DurableSchedule`](crate::DurableSchedule), 5 s
    /// unless set; on PostgreSQL new tasks wake it through LISTEN/NOTIFY).
    #[setters(generate)]
    poll_interval: Duration,
    /// How long a claim holds a task without a heartbeat (default 30 s). The
    /// worker renews it every third of that while the handler runs; if the
    /// worker dies, the task is claimable again once the lease runs out. A
    /// handler whose lease could not be renewed in time is told to stop (see
    /// [`Worker`]).
    #[setters(generate)]
    lease: Duration,
    /// On shutdown, how long in-flight handlers may run before they are
    /// stopped and their tasks released (default 30 s).
    #[setters(generate, rename = "shutdown_grace")]
    grace: Duration,
    /// Delay between attempts after a transient error (default: the queue's
    /// [`DurableSchedule`](crate::DurableSchedule), 2^n s ≤ 1 h unless set).
    #[setters(generate)]
    backoff: DurableBackoff,
    alert: Arc<dyn Alert>,
    /// Names the worker in `lease_owner` (default: host, process id, random suffix).
    #[setters(generate, strip_option, into)]
    owner: Option<String>,
    /// Seeds the backoff jitter, for reproducible tests.
    #[setters(generate, strip_option)]
    seed: Option<u64>,
    periodic: Vec<crate::Periodic>,
}

impl fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("kinds", &self.handlers.keys().collect::<Vec<_>>())
            .field("concurrency", &self.concurrency)
            .field("batch", &self.batch)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    pub(super) fn new(queue: Queue) -> Self {
        let schedule = queue.schedule;
        WorkerBuilder {
            queue,
            handlers: HashMap::new(),
            duplicate: None,
            concurrency: DEFAULT_CONCURRENCY,
            batch: DEFAULT_BATCH,
            poll_interval: schedule.poll_interval,
            lease: DEFAULT_LEASE,
            grace: Duration::from_secs(30),
            backoff: schedule.backoff,
            alert: Arc::new(LogAlert),
            owner: None,
            seed: None,
            periodic: Vec::new(),
        }
    }

    /// Enqueues `periodic`'s task every period while this worker runs (see
    /// [`Periodic`](crate::Periodic)): every worker of a fleet may register
    /// it, each period still runs once. Its kind needs a handler here.
    #[must_use]
    pub fn periodic(mut self, periodic: crate::Periodic) -> Self {
        self.periodic.push(periodic);
        self
    }

    /// Runs tasks of `kind` with `handler`.
    #[must_use]
    pub fn handler<H: Handler>(mut self, kind: impl Into<String>, handler: H) -> Self {
        let kind = kind.into();
        let erased: Arc<dyn ErasedHandler> = Arc::new(Erased(Arc::new(handler)));
        if self.handlers.insert(kind.clone(), erased).is_some() {
            self.duplicate = Some(kind);
        }
        self
    }

    /// Told about every task that fails for good (default: [`LogAlert`]).
    #[must_use]
    pub fn alert(mut self, alert: impl Alert) -> Self {
        self.alert = Arc::new(alert);
        self
    }

    /// Checks the settings and builds the worker.
    pub fn build(self) -> Result<Worker, WorkerBuildError> {
        if let Some(kind) = self.duplicate {
            return Err(WorkerBuildError::DuplicateHandler { kind });
        }
        if self.handlers.is_empty() {
            return Err(WorkerBuildError::NoHandlers);
        }
        for kind in self.handlers.keys() {
            crate::task::check_kind(kind).map_err(|e| WorkerBuildError::InvalidKind(e.to_string()))?;
        }
        // An alert whose tasks no handler runs would page nobody, silently:
        // its tasks would wait forever. Asked with a failure of a kind no
        // alert keeps to itself.
        let probe = crate::alert::FailedTask::probe();
        let handled = |kind: &str| {
            self.handlers.contains_key(kind)
                || crate::task::family_of(kind)
                    .and_then(|family| self.handlers.get(family))
                    .is_some_and(|handler| handler.family())
        };
        let unhandled = |kind: &&str| crate::task::check_kind(kind).is_ok() && !handled(kind);
        if let Some(kind) = self.alert.enqueue(&probe).iter().map(|t| t.kind()).find(unhandled) {
            return Err(WorkerBuildError::UnhandledAlert { kind: kind.to_owned() });
        }
        if self.concurrency == 0 || self.batch == 0 {
            return Err(WorkerBuildError::Zero);
        }
        self.check_periodic()?;
        if self.lease < MIN_LEASE || self.poll_interval.is_zero() {
            return Err(WorkerBuildError::Timing);
        }
        let owner = self.owner.unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".into());
            let suffix = uuid::Uuid::now_v7().simple().to_string();
            format!("{host}:{}:{}", std::process::id(), &suffix[suffix.len() - 6..])
        });
        let rng = match self.seed {
            Some(seed) => SmallRng::seed_from_u64(seed),
            None => SmallRng::from_rng(&mut rand::rng()),
        };
        let mut kinds: Vec<String> = self.handlers.keys().cloned().collect();
        kinds.sort();
        let families: Vec<String> =
            kinds.iter().filter(|kind| self.handlers[*kind].family()).cloned().collect();
        Ok(Worker {
            counters: kinds.iter().map(|kind| (kind.clone(), AttemptCounters::register(kind))).collect(),
            attempts: Attempts {
                handlers: self.handlers,
                alert: self.alert,
                backoff: self.backoff,
                rng: Mutex::new(rng),
                max_attempts: self.queue.schedule.max_attempts,
                held: Held::default(),
                // Time for a request to leave once the gate let it: a renewal
                // comes every third of the lease, so a held lease has more.
                margin: self.lease / 4,
                lease: self.lease,
            },
            claim: ClaimRequest {
                kinds: kinds.into(),
                families: families.into(),
                owner: owner.into(),
                limit: 0,
                lease: self.lease,
                sweep: false,
            },
            queue: self.queue,
            concurrency: self.concurrency,
            batch: self.batch.min(self.concurrency),
            pipeline: (self.concurrency / self.batch.min(self.concurrency)).clamp(1, MAX_PIPELINE),
            poll_interval: self.poll_interval,
            grace: self.grace,
            periodic: self.periodic,
        })
    }

    /// Each periodic task runnable here, named once, and done — retries
    /// included — before its next period starts.
    fn check_periodic(&self) -> Result<(), WorkerBuildError> {
        let mut names = std::collections::HashSet::new();
        for periodic in &self.periodic {
            let refuse = |why: String| WorkerBuildError::Periodic { name: periodic.name.clone(), why };
            periodic.check().map_err(refuse)?;
            if !names.insert(periodic.name.as_str()) {
                return Err(refuse(
                    "another periodic task has the same name: name each with .name(..)".into(),
                ));
            }
            if !self.handlers.contains_key(&periodic.kind) {
                return Err(refuse(format!(
                    "no handler on this worker runs kind {:?}: its tasks would wait forever; register one with \
                     .handler({:?}, ..)",
                    periodic.kind, periodic.kind
                )));
            }
            let schedule = crate::DurableSchedule {
                max_attempts: periodic.max_attempts.unwrap_or(self.queue.schedule.max_attempts),
                poll_interval: self.poll_interval,
                backoff: self.backoff,
                ..self.queue.schedule
            };
            let window = schedule.waits_total().saturating_add(periodic.jitter);
            let period = periodic.schedule.shortest_period();
            if window >= period {
                return Err(refuse(format!(
                    "a period's task may still be retrying {window:?} after its period started (its jitter and \
                     the waits between its attempts), past the next period {period:?} later: two periods would \
                     run at once; give it fewer attempts with .max_attempts(..), less jitter or a longer period"
                )));
            }
        }
        Ok(())
    }
}
