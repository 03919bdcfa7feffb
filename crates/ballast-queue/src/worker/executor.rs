//! The executor: runs a claimed task's handler under its lease's
//! cancellation and turns how the attempt ended into the [`Outcome`] the
//! completer writes — completed with its result, rescheduled after the
//! durable backoff, or failed with the alert's follow-up tasks.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use ballast::{IdempotencyKey, Rule};
use futures_util::FutureExt;
use rand::rngs::SmallRng;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::alert::{Alert, FailReason, FailedTask};
use crate::handler::{AttemptError, ErasedHandler, TaskContext, TaskEnd};
use crate::lease::Held;
use crate::metrics::AttemptCounters;
use crate::outcome::Outcome;
use crate::store::{ClaimedTask, Lease, ValidTask};
use crate::{DurableBackoff, TaskState};

use super::completer::{Report, Settling};

/// The shortest wait of a task postponed unsent, so a refusal that names
/// no wait (a probe due now) cannot make the task spin through claims.
const MIN_POSTPONE: Duration = Duration::from_millis(100);

/// What an attempt needs besides its task; shared by the attempts running.
pub(super) struct Attempts {
    pub handlers: HashMap<String, Arc<dyn ErasedHandler>>,
    pub alert: Arc<dyn Alert>,
    pub backoff: DurableBackoff,
    pub rng: Mutex<SmallRng>,
    /// For the alert's tasks, as the queue's schedule says.
    pub max_attempts: u32,
    pub held: Held,
    /// How long before its lease's deadline a task's gate closes
    /// ([`LeaseGate`](crate::LeaseGate)).
    pub margin: Duration,
    /// The worker's lease, told to handlers ([`LeaseGate::lease`](crate::LeaseGate::lease)).
    pub lease: Duration,
}

impl Attempts {
    /// The handler of `kind`: its own, or its family's ([`Handler::family`](crate::Handler::family)).
    fn handler(&self, kind: &str) -> Option<&Arc<dyn ErasedHandler>> {
        self.handlers.get(kind).or_else(|| {
            let family = crate::task::family_of(kind)?;
            self.handlers.get(family).filter(|handler| handler.family())
        })
    }
}

/// How an attempt came back.
pub(super) enum Finished {
    /// The handler ran: its outcome, for the completer.
    Ran(Settling),
    /// The handler never started: the lease may have run out first. The
    /// task is no longer held; its lease lapses.
    NotStarted,
}

/// Runs attempts beside the worker's loop and hands back how they ended.
pub(super) struct Executor {
    attempts: Arc<Attempts>,
    running: JoinSet<()>,
    sender: mpsc::UnboundedSender<(Lease, Finished)>,
    finished: mpsc::UnboundedReceiver<(Lease, Finished)>,
}

impl Executor {
    pub fn new(attempts: Attempts) -> Self {
        let (sender, finished) = mpsc::unbounded_channel();
        Self { attempts: Arc::new(attempts), running: JoinSet::new(), sender, finished }
    }

    /// Starts the attempt of `task`, told to stop through `cancel`.
    pub fn start(&mut self, task: ClaimedTask, cancel: CancellationToken, counters: Arc<AttemptCounters>) {
        let attempts = Arc::clone(&self.attempts);
        let sender = self.sender.clone();
        self.running.spawn(async move {
            let lease = task.lease;
            let finished = attempts.attempt(task, cancel, counters).await;
            // The receiver lives until the worker's run returns, after every attempt.
            let _ = sender.send((lease, finished));
        });
    }

    /// An attempt that came back, if one did.
    pub fn try_next(&mut self) -> Option<(Lease, Finished)> {
        while self.running.try_join_next().is_some() {}
        self.finished.try_recv().ok()
    }

    /// The next attempt to come back (pending while none runs).
    pub async fn next(&mut self) -> Option<(Lease, Finished)> {
        self.finished.recv().await
    }

    /// Stops the attempts still running (after the shutdown grace period).
    pub async fn abort(&mut self) {
        self.running.abort_all();
        while self.running.join_next().await.is_some() {}
    }
}

fn count(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("non-string panic payload")
}

impl Attempts {
    /// Runs one attempt and decides the task's next state.
    pub async fn attempt(
        &self,
        task: ClaimedTask,
        cancel: CancellationToken,
        counters: Arc<AttemptCounters>,
    ) -> Finished {
        // Checked here, as late as possible before the handler: spawning can
        // be delayed, and the process paused, past the lease.
        let deadline = match self.held.start(task.lease) {
            Ok(deadline) => deadline,
            Err(late) => {
                tracing::warn!(
                    task_id = task.lease.id,
                    kind = %task.kind,
                    ?late,
                    "lease may have run out before the handler started (this process was paused or overloaded): not starting it; any worker may claim the task"
                );
                return Finished::NotStarted;
            }
        };
        let settle = |outcome, report| {
            let due_in = match (&outcome, &report) {
                (Outcome::Rescheduled { delay, .. }, Report::Rescheduled { .. }) => Some(*delay),
                _ => None,
            };
            Finished::Ran(Settling { outcome, due_in, counters: Arc::clone(&counters), report })
        };
        let (attempt, max) = (count(task.attempt), count(task.max_attempts));
        if attempt > max {
            let error =
                format!("the lease of the last attempt ({max} of {max}) expired: its worker died or hung");
            let (outcome, report) = self.fail(&task, FailReason::LeaseExpired, error);
            return settle(outcome, report);
        }
        let Some(handler) = self.handler(&task.kind) else {
            // Claims filter on this worker's kinds, so this only follows a kind rename mid-flight.
            let error = format!("no handler registered for kind {:?}", task.kind);
            let (outcome, report) = self.fail(&task, FailReason::Permanent, error);
            return settle(outcome, report);
        };
        let key = match task.key.as_deref().map(IdempotencyKey::parse).transpose() {
            Ok(key) => key,
            Err(e) => {
                let error = format!("stored idempotency key is invalid: {e}");
                let (outcome, report) = self.fail(&task, FailReason::BadPayload, error);
                return settle(outcome, report);
            }
        };
        let context = TaskContext {
            id: task.lease.id,
            kind: Arc::from(task.kind.as_str()),
            attempt,
            max_attempts: max,
            key,
            result: Arc::default(),
            next_payload: Arc::default(),
            not_attempted: Arc::default(),
            handed_back: Arc::default(),
            gate: crate::handler::LeaseGate::new(deadline, cancel.clone(), self.margin, self.lease),
            cancel,
        };
        let result = Arc::clone(&context.result);
        let next_payload = Arc::clone(&context.next_payload);
        let probe = context.clone();
        let ran = AssertUnwindSafe(handler.call(context, &task.payload)).catch_unwind().await;
        // A handler that panicked may have done its work (a delivery whose
        // upstream applied the write): its outcome is unknown, so it is
        // tried again like a transient failure — with the same key — and
        // only fails, as `panicked`, when its attempts are spent.
        let panicked = ran.is_err();
        let ran = ran.unwrap_or_else(|panic| {
            let message =
                format!("handler panicked: {}; the attempt's outcome is unknown", panic_message(&*panic));
            Err(AttemptError::Failed { message, class: ballast::Classification::transient() })
        });
        let (outcome, report) = match ran {
            Ok(()) => {
                let result = result.lock().unwrap_or_else(PoisonError::into_inner).take();
                let follow_ups = self.on_end(&task, TaskState::Completed, None);
                (Outcome::Completed { lease: task.lease, result, follow_ups }, Report::Completed)
            }
            Err(AttemptError::BadPayload(error)) => self.fail(&task, FailReason::BadPayload, error),
            Err(AttemptError::Failed { message, class })
                if class.is_transient() && (attempt < max || !probe.was_attempted()) =>
            {
                let counted = probe.was_attempted();
                let delay = match class.retry_after {
                    // Refused unsent, with a time it will be let through: then, not later.
                    Some(after) if !counted => after.max(MIN_POSTPONE),
                    retry_after => {
                        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
                        let delay = self.backoff.delay(attempt, &mut *rng);
                        retry_after.map_or(delay, |after| after.max(delay))
                    }
                };
                let payload = next_payload.lock().unwrap_or_else(PoisonError::into_inner).take();
                let outcome =
                    Outcome::Rescheduled { lease: task.lease, delay, error: message, counted, payload };
                let report = if probe.was_handed_back() {
                    Report::HandedBack { kind: task.kind, attempt, delay }
                } else {
                    Report::Rescheduled { kind: task.kind, attempt, delay }
                };
                (outcome, report)
            }
            Err(AttemptError::Failed { message, .. }) if panicked => {
                self.fail(&task, FailReason::Panicked, message)
            }
            Err(AttemptError::Failed { message, class }) if class.is_transient() => {
                self.fail(&task, FailReason::Exhausted, message)
            }
            Err(AttemptError::Failed { message, .. }) => self.fail(&task, FailReason::Permanent, message),
        };
        settle(outcome, report)
    }

    /// The task fails for good, with the alert's tasks.
    fn fail(&self, task: &ClaimedTask, reason: FailReason, error: String) -> (Outcome, Report) {
        let failed = FailedTask {
            id: task.lease.id,
            kind: task.kind.clone(),
            key: task.key.clone(),
            attempt: count(task.attempt),
            max_attempts: count(task.max_attempts),
            reason,
            error: error.clone(),
            failed_at: SystemTime::now(),
            failure_id: task.lease.token,
            sequence: task.sequence.clone(),
        };
        let mut follow_ups = self.follow_ups(&failed);
        follow_ups.extend(self.on_end(task, TaskState::Failed, Some(&error)));
        (Outcome::Failed { lease: task.lease, error, follow_ups }, Report::Failed(Box::new(failed)))
    }

    /// The handler's [`on_end`](crate::Handler::on_end) tasks for `task`,
    /// validated; one that cannot be stored is logged and left out, so
    /// that the task's end is still recorded.
    fn on_end(&self, task: &ClaimedTask, state: TaskState, error: Option<&str>) -> Vec<ValidTask> {
        let Some(handler) = self.handler(&task.kind) else { return Vec::new() };
        let end = TaskEnd {
            id: task.lease.id,
            kind: &task.kind,
            key: task.key.as_deref(),
            state,
            error,
            payload: &task.payload,
        };
        let tasks = handler.on_end(&end);
        let mut valid = Vec::with_capacity(tasks.len());
        for follow_up in tasks {
            let kind = follow_up.kind().to_owned();
            match follow_up.validate(self.max_attempts) {
                Ok(follow_up) => valid.push(follow_up),
                Err(e) => tracing::error!(
                    task_id = task.lease.id,
                    follow_up_kind = %kind,
                    error = %e,
                    "a task to enqueue when this task ended is invalid and was not enqueued"
                ),
            }
        }
        valid
    }

    /// The alert's tasks for `failed`, validated; one that cannot be stored
    /// is logged and left out so that the failure itself is still recorded.
    fn follow_ups(&self, failed: &FailedTask) -> Vec<ValidTask> {
        let tasks = self.alert.enqueue(failed);
        let mut valid = Vec::with_capacity(tasks.len());
        for task in tasks {
            let kind = task.kind().to_owned();
            match task.validate(self.max_attempts) {
                Ok(task) => valid.push(task),
                Err(e) => tracing::error!(
                    rule = Rule::Re5.id(),
                    task_id = failed.id,
                    alert_kind = %kind,
                    error = %e,
                    "the alert's task is invalid and was not enqueued; only the log line tells of this failure"
                ),
            }
        }
        valid
    }
}
