//! What runs a task: the [`Handler`] a caller implements per kind, what it
//! knows about the task ([`TaskContext`]), and the type-erased form the
//! worker keeps.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ballast::{Classification, Classify, IdempotencyKey};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

/// Runs the tasks of one kind.
///
/// The error type is classified with [`ballast::Classify`], the same notion the
/// in-memory policies use: a transient error reschedules the task with
/// backoff, a permanent one fails it at once (R-RES-RE-X2).
///
/// A handler must watch [`TaskContext::cancellation`] and stop at its next
/// safe point (before each request it sends) once it fires: the worker fires
/// it when the shutdown grace period is over, and as soon as the task's lease
/// may have run out, when another worker may be running the task. Return an
/// error then (a transient one reschedules the task if the lease still
/// holds). A request already sent is covered by the idempotency key.
///
/// ```
/// use ballast::{Classification, Classify};
/// use ballast_queue::{Handler, TaskContext};
///
/// #[derive(Debug)]
/// struct GatewayDown;
/// impl std::fmt::Display for GatewayDown {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("gateway down")
///     }
/// }
/// impl Classify for GatewayDown {
///     fn classify(&self) -> Classification {
///         Classification::transient()
///     }
/// }
///
/// struct Charge;
/// impl Handler for Charge {
///     type Payload = u64;
///     type Error = GatewayDown;
///     async fn handle(&self, task: TaskContext, cents: u64) -> Result<(), GatewayDown> {
///         if task.cancellation().is_cancelled() {
///             return Err(GatewayDown);
///         }
///         // Send `task.key()` as the Idempotency-Key so a repeat is harmless.
///         let _ = (task.key(), cents);
///         Ok(())
///     }
/// }
/// ```
pub trait Handler: Send + Sync + 'static {
    /// The payload type; a task whose JSON does not deserialize into it fails.
    type Payload: DeserializeOwned + Send + 'static;
    /// The handler's error.
    type Error: Classify + fmt::Display + Send + 'static;

    /// Handles one attempt of one task.
    fn handle(
        &self,
        task: TaskContext,
        payload: Self::Payload,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Tasks to enqueue when a task of this kind ends for good — completed,
    /// or failed after its last attempt — stored in the same transaction as
    /// its end, so neither is stored without the other: the way to tell
    /// whoever waits for the task (a callback), durably. Not called for a
    /// task an operator cancels. None by default.
    fn on_end(&self, end: &TaskEnd<'_>) -> Vec<crate::NewTask> {
        let _ = end;
        Vec::new()
    }

    /// Whether the kind this handler is registered for is a family: the
    /// handler then also runs every kind `{family}/{member}` no handler of
    /// its own is registered for — the way one handler runs tasks whose
    /// keys must not collide across its members (a key names one task of a
    /// kind), such as `ballast.http.delivery/pay` and
    /// `ballast.http.delivery/crm`, members added while the worker runs
    /// included. `false` by default.
    fn family(&self) -> bool {
        false
    }
}

/// How a task ended, for [`Handler::on_end`].
#[derive(Debug, Clone, Copy)]
pub struct TaskEnd<'a> {
    /// The task id.
    pub id: i64,
    /// The task kind.
    pub kind: &'a str,
    /// The task's idempotency key.
    pub key: Option<&'a str>,
    /// [`Completed`](crate::TaskState::Completed) or [`Failed`](crate::TaskState::Failed).
    pub state: crate::TaskState,
    /// The last error, for a failure.
    pub error: Option<&'a str>,
    /// The task's payload, as stored (JSON text).
    pub payload: &'a str,
}

/// What a handler knows about the task it runs.
#[derive(Debug, Clone)]
pub struct TaskContext {
    pub(crate) id: i64,
    pub(crate) kind: Arc<str>,
    pub(crate) attempt: u32,
    pub(crate) max_attempts: u32,
    pub(crate) key: Option<IdempotencyKey>,
    pub(crate) cancel: CancellationToken,
    pub(crate) result: Arc<Mutex<Option<String>>>,
    pub(crate) next_payload: Arc<Mutex<Option<String>>>,
    pub(crate) not_attempted: Arc<AtomicBool>,
    pub(crate) handed_back: Arc<AtomicBool>,
    pub(crate) gate: LeaseGate,
}

/// Whether a running task's lease still holds, asked right before a side
/// effect leaves ([`TaskContext::lease`]). The lease's deadline is read on
/// this process's monotonic clock at the moment of asking — not when a
/// timer or the watchdog gets round to it — so a process paused past its
/// lease (`SIGSTOP`, a long GC-like stall, a VM migration) and resumed
/// sends nothing: by then another worker may hold the task and have sent
/// the writes after it. The gate is closed a margin before the deadline (a
/// quarter of the lease), time for the request to leave, and once the
/// worker told the handler to stop.
///
/// ```
/// # fn f(task: ballast_queue::TaskContext) -> Result<(), ballast_queue::LeaseLost> {
/// let gate = task.lease();
/// // … prepare the request …
/// gate.check()?; // the last thing before it is sent
/// // … send it …
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LeaseGate {
    deadline: crate::lease::Deadline,
    cancel: CancellationToken,
    margin: std::time::Duration,
    lease: std::time::Duration,
}

impl LeaseGate {
    pub(crate) fn new(
        deadline: crate::lease::Deadline,
        cancel: CancellationToken,
        margin: std::time::Duration,
        lease: std::time::Duration,
    ) -> Self {
        Self { deadline, cancel, margin, lease }
    }

    /// The worker's lease: how long a claim holds without a renewal. A
    /// handler that waits for its turn (a rate-limit permit, a slot) keeps
    /// the wait well within it, so what it holds it can send before another
    /// worker could take it.
    pub fn lease(&self) -> std::time::Duration {
        self.lease
    }

    /// `Ok` while the lease holds for longer than the margin, by the clock
    /// read now, and the worker has not told the handler to stop.
    pub fn check(&self) -> Result<(), LeaseLost> {
        if self.cancel.is_cancelled() {
            return Err(LeaseLost::Stopped);
        }
        let left = self.deadline.get().saturating_duration_since(tokio::time::Instant::now());
        if left <= self.margin {
            return Err(LeaseLost::RunningOut { left, margin: self.margin });
        }
        Ok(())
    }
}

/// Why a [`LeaseGate`] is closed: nothing may be sent for the task now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseLost {
    /// The worker told the handler to stop: the lease was lost or may have
    /// run out, or the worker shuts down.
    #[error("the worker told this attempt to stop (its lease was lost, or the worker is shutting down)")]
    Stopped,
    /// The lease runs out within the margin (or ran out: this process was
    /// paused or overloaded past it).
    #[error("the task's lease has {left:?} left, within the {margin:?} a send needs: another worker may take the task")]
    RunningOut {
        /// What was left of the lease.
        left: std::time::Duration,
        /// The margin a send needs.
        margin: std::time::Duration,
    },
}

impl TaskContext {
    /// The task id.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The task kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// This attempt's number, starting at 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The attempts the task is allowed.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The idempotency key the task was enqueued with: the same key for every
    /// attempt, and the same one an in-memory policy used before handing over
    /// (R-RES-RE-1).
    pub fn key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }

    /// The gate to ask right before each side effect leaves ([`LeaseGate`]):
    /// closed once the lease may run out before the request is out.
    pub fn lease(&self) -> LeaseGate {
        self.gate.clone()
    }

    /// Cancelled when this attempt should stop: the worker's shutdown grace
    /// period ended, or the lease may have run out (it could not be renewed
    /// in time, or another worker claimed the task). Watch it and stop at the
    /// next safe point; see [`Handler`].
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Records what this attempt achieved, stored with the task if the
    /// attempt succeeds and shown as [`TaskInfo::result`](crate::TaskInfo::result)
    /// (a deferred HTTP write records its upstream's status). The last value
    /// set wins; a failed attempt's is dropped. Keep it small: it is a column
    /// of the task's row.
    ///
    /// Fails only if `value` does not serialize to JSON.
    pub fn set_result<T: serde::Serialize + ?Sized>(&self, value: &T) -> serde_json::Result<()> {
        let text = serde_json::to_string(value)?;
        *self.result.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(text);
        Ok(())
    }
}

impl TaskContext {
    /// The payload the task's next attempt gets, if this attempt ends
    /// rescheduled (a transient failure): how a handler that works in steps
    /// records where it is — a poller that sent its write and now follows
    /// the operation it started. Stored with the reschedule, fenced by the
    /// lease like every outcome; dropped when the attempt completes or
    /// fails. The task's kind and key stay. The last value set wins.
    ///
    /// Fails only if `value` does not serialize to JSON.
    pub fn set_next_payload<T: serde::Serialize + ?Sized>(&self, value: &T) -> serde_json::Result<()> {
        let text = serde_json::to_string(value)?;
        *self.next_payload.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(text);
        Ok(())
    }

    /// Says that this attempt reached nothing outside the process — a
    /// breaker or a bulkhead refused it, or what it would call is not
    /// configured — so that, if the handler then fails transiently, the task
    /// is rescheduled without counting the attempt against its
    /// `max_attempts`: an outage cannot use up a task's attempts without a
    /// single request reaching the system. The task's attempt number stays
    /// as it was.
    ///
    /// Nothing else bounds such postponements: the handler must stop calling
    /// this once the task is too old to be worth sending (the HTTP delivery
    /// handler fails a keyed write once its key may have expired, any other
    /// after the schedule's [`max_age`](crate::DurableSchedule::max_age)).
    pub fn not_attempted(&self) {
        self.not_attempted.store(true, Ordering::Relaxed);
    }

    /// [`not_attempted`](Self::not_attempted), and the task is handed back
    /// for any worker to take when it is due — this one has no room for it
    /// now (what it holds of the system's backlog already fills its share) —
    /// rather than looked for again by this worker first.
    pub fn hand_back(&self) {
        self.not_attempted();
        self.handed_back.store(true, Ordering::Relaxed);
    }

    pub(crate) fn was_handed_back(&self) -> bool {
        self.handed_back.load(Ordering::Relaxed)
    }

    pub(crate) fn was_attempted(&self) -> bool {
        !self.not_attempted.load(Ordering::Relaxed)
    }
}

/// How one attempt ended, before the worker decides the task's next state.
#[derive(Debug)]
pub(crate) enum AttemptError {
    BadPayload(String),
    Failed { message: String, class: Classification },
}

pub(crate) type AttemptFuture = Pin<Box<dyn Future<Output = Result<(), AttemptError>> + Send>>;

/// A handler with its payload type erased, so handlers of all kinds share one map.
pub(crate) trait ErasedHandler: Send + Sync {
    fn call(&self, task: TaskContext, payload: &str) -> AttemptFuture;
    fn on_end(&self, end: &TaskEnd<'_>) -> Vec<crate::NewTask>;
    fn family(&self) -> bool;
}

pub(crate) struct Erased<H>(pub Arc<H>);

impl<H: Handler> ErasedHandler for Erased<H> {
    fn on_end(&self, end: &TaskEnd<'_>) -> Vec<crate::NewTask> {
        self.0.on_end(end)
    }

    fn family(&self) -> bool {
        self.0.family()
    }

    fn call(&self, task: TaskContext, payload: &str) -> AttemptFuture {
        let payload = match serde_json::from_str::<H::Payload>(payload) {
            Ok(p) => p,
            Err(e) => {
                let message = format!(
                    "payload does not match the handler's type {} for kind {:?}: {e}",
                    std::any::type_name::<H::Payload>(),
                    task.kind()
                );
                return Box::pin(std::future::ready(Err(AttemptError::BadPayload(message))));
            }
        };
        let handler = Arc::clone(&self.0);
        Box::pin(async move {
            handler
                .handle(task, payload)
                .await
                .map_err(|e| AttemptError::Failed { class: e.classify(), message: e.to_string() })
        })
    }
}
