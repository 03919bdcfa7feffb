//! The worker's side: [`DeliveryHandler`](crate::DeliveryHandler) sends each stored [`Delivery`](crate::Delivery)
//! with its task's key, holds what cannot be sent yet, and stores the
//! upstream's final answer as the task's result.

use std::time::{Duration, SystemTime};

use ballast::{Failure, Operation};
use ballast_queue::{Handler, TaskContext, DEFAULT_MAX_AGE};
use tracing::Instrument;

use crate::{HttpError, HttpSystem, Systems};

use super::line::Lines;
use super::{Delivery, DeliveryError, ExpiredBy, Following};

/// Runs [`Delivery`](crate::Delivery) tasks ([`DELIVERY_KIND`](crate::DELIVERY_KIND)): sends each with
/// [`HttpSystem::write`] and the task's idempotency key.
///
/// Success completes the task. A transient failure reschedules it with the
/// queue's `2^n s` backoff; a permanent one (a 4xx) fails it and fires the
/// queue's alert — but a `429`, or a `503` with `Retry-After`, says the
/// system did not take the write: it is sent again when the system says,
/// the attempt not counted (the adaptive rate limit hears it too). For a system that does not deduplicate by key, only a
/// failure that sent nothing (a rejection, a refused connection) is tried
/// again.
///
/// Each delivery is [paced](ballast::background_within) background work:
/// it waits its turn — a bulkhead slot outside the share reserved for live
/// calls, then a rate-limit permit, first come first served — for up to
/// half the worker's lease, rather than being refused, so a backlog drains
/// at the system's allowed rate; its total timeout counts from its turn. A
/// worker holds at most what its share of the rate sends in that time, per
/// system: one more is handed back to the queue, unsent and not counted,
/// for whichever worker has room ([`DeliveryError::HandedBack`](crate::DeliveryError::HandedBack)) — a
/// backlog spreads over the live replicas, and one that dies strands only
/// that share until its lease runs out.
///
/// An attempt the breaker or the rate limit refused before anything was sent,
/// one whose system is not configured (a reload removed it), and, for a
/// system that deduplicates by key, one that failed while the system's
/// breaker is open (the outage failed it, not the write) is
/// postponed — to the breaker's next probe, when it says — without counting
/// against the task's `max_attempts`
/// ([`TaskContext::not_attempted`]): a long outage cannot use up a
/// delivery's attempts without a single request. What bounds it instead is
/// [`Delivery::send_by`](crate::Delivery::send_by): the key's TTL where the system deduplicates and
/// declares one, [`max_age`](Self::max_age) otherwise. Past it the delivery
/// fails with [`DeliveryError::Expired`](crate::DeliveryError::Expired), unsent, and alerts.
///
/// ```no_run
/// # fn f(queue: ballast_queue::Queue, sber: ballast_http::HttpSystem) -> Result<(), ballast_queue::WorkerBuildError> {
/// use ballast_http::{DeliveryHandler, DELIVERY_KIND};
/// use ballast_queue::Worker;
///
/// let worker = Worker::builder(queue).handler(DELIVERY_KIND, DeliveryHandler::new([sber])).build()?;
/// # let _ = worker; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DeliveryHandler {
    systems: Systems,
    max_age: Duration,
    lines: Lines,
}

/// How long a delivery whose system is not configured waits before it is
/// looked at again.
pub(super) const HOLD_UNKNOWN: Duration = Duration::from_secs(30);

/// How long a delivery that does not open waits before it is tried again.
pub(super) const HOLD_SEALED: Duration = Duration::from_secs(300);

impl DeliveryHandler {
    /// Delivers to `systems`, found by name.
    pub fn new(systems: impl IntoIterator<Item = HttpSystem>) -> Self {
        Self::shared(Systems::new(systems))
    }

    /// Delivers to the systems of `systems` as they are at each delivery, so
    /// a reload that replaces them reaches the worker too.
    pub fn shared(systems: Systems) -> Self {
        Self { systems, max_age: DEFAULT_MAX_AGE, lines: Lines::default() }
    }

    /// How long after its first attempt a delivery may still be sent when
    /// its system declares no key TTL, or is not configured (default
    /// [`DEFAULT_MAX_AGE`], 24 h; `ballast serve` takes `[queue] max_age`).
    pub fn max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }
}

impl Handler for DeliveryHandler {
    type Payload = Delivery;
    type Error = DeliveryError;

    /// The [callback](super::callback) its request asked for, if any.
    fn on_end(&self, end: &ballast_queue::TaskEnd<'_>) -> Vec<ballast_queue::NewTask> {
        super::callback::Callback::for_end(end).into_iter().collect()
    }

    /// Registered under [`DELIVERY_KIND`](crate::DELIVERY_KIND), it runs
    /// every system's deliveries ([`delivery_kind`](super::delivery_kind)).
    fn family(&self) -> bool {
        true
    }

    async fn handle(&self, task: TaskContext, delivery: Delivery) -> Result<(), DeliveryError> {
        let system = self.systems.get(&delivery.system);
        // An accepted write is not sent again: its follow deadline bounds it.
        if let Some(by) =
            delivery.send_by(system.as_ref(), self.max_age).filter(|_| delivery.following.is_none())
        {
            if SystemTime::now() > by {
                return Err(DeliveryError::Expired {
                    system: delivery.system.clone(),
                    bound: match &system {
                        Some(s) if s.dedupes_by_key() && s.key_ttl().is_some() => ExpiredBy::KeyTtl,
                        _ => ExpiredBy::MaxAge,
                    },
                });
            }
        }
        let Some(system) = system else {
            task.not_attempted();
            tracing::warn!(
                system = %delivery.system,
                task_id = task.id(),
                "delivery held: no system of that name is configured; it is looked at again in {HOLD_UNKNOWN:?}"
            );
            return Err(DeliveryError::UnknownSystem { system: delivery.system.clone() });
        };
        let key = task.key().ok_or(DeliveryError::NoKey { task_id: task.id() })?;
        if let Some(following) = &delivery.following {
            let answer = system.look(&task, &delivery, following).await?;
            tracing::info!(
                system = %delivery.system,
                task_id = task.id(),
                status = answer.status().as_u16(),
                "the operation the write started ended"
            );
            let _ = task.set_result(&system.keep_answer_of(key, &delivery, &answer));
            return Ok(());
        }
        let request = match system.open_delivery(key, &delivery) {
            Ok(request) => request.gate(lease_gate(&task)),
            Err(HttpError::Unseal { source, .. }) => {
                // Held, not failed: the key may come back (a rotation that
                // dropped the old key too soon); bounded by send_by.
                task.not_attempted();
                tracing::warn!(
                    system = %delivery.system,
                    task_id = task.id(),
                    error = %source,
                    "delivery held: it does not open; looked at again in {HOLD_SEALED:?}, until it may no longer be sent"
                );
                return Err(DeliveryError::Sealed { system: delivery.system.clone(), source });
            }
            Err(e) => return Err(DeliveryError::Invalid(e)),
        };
        let span = if tracing::dispatcher::has_been_set() {
            tracing::info_span!(
                "ballast.delivery",
                otel.kind = "consumer",
                ballast.system = %delivery.system,
                ballast.task.id = task.id(),
                ballast.task.attempt = i64::from(task.attempt()),
            )
        } else {
            tracing::Span::none()
        };
        #[cfg(feature = "otel")]
        crate::otel::continue_trace(&span, &delivery.headers);
        // Background work: no caller waits for it, so it waits its turn
        // for a slot and a permit instead of being refused — a backlog
        // drains at the system's pace — well within the lease.
        let pace = task.lease().lease() / 2;
        let _place = self.lines.join(&system, pace).map_err(|full| {
            task.hand_back();
            DeliveryError::HandedBack {
                system: delivery.system.clone(),
                waiting: full.waiting,
                retry_in: full.retry_in,
            }
        })?;
        let plan =
            system.plan_declared(Operation::KeyedWrite(key), &request).map_err(DeliveryError::Invalid)?;
        let follow = plan.route().and_then(|r| r.followed()).cloned();
        let path = request.path().to_owned();
        // An outage the breaker knew of before this delivery: its failure is
        // the outage's, not the write's.
        let outage_before = system.breaker_state().is_some_and(|s| s != ballast::BreakerState::Closed);
        let sent = ballast::background_within(pace, system.send_planned(plan, request));
        let response = sent.instrument(span).await.map_err(|failure| {
            let stopped =
                matches!(failure.error(), Some(HttpError::Stopped { .. })) && failure.attempts() <= 1;
            if stopped
                || matches!(
                    failure,
                    Failure::Rejected { attempts: 0, .. } | Failure::Timeout { attempts: 0, .. }
                )
                || met_an_outage(&system, outage_before)
            {
                task.not_attempted();
            }
            DeliveryError::Failed {
                system: delivery.system.clone(),
                dedupes_by_key: system.dedupes_by_key(),
                failure,
            }
        })?;
        if let Some(verdict) = response.verdict() {
            // A 429 (or a 503 with Retry-After) says the write was not
            // taken: tried again when the system says, bounded by send_by,
            // not by max_attempts — a rate-limited backlog never fails a
            // write the system never processed.
            if verdict.throttled || (verdict.is_transient() && met_an_outage(&system, outage_before)) {
                task.not_attempted();
            }
            return Err(DeliveryError::Answered {
                system: delivery.system.clone(),
                dedupes_by_key: system.dedupes_by_key(),
                status: response.status(),
                verdict,
                attempts: response.attempts(),
            });
        }
        if let Some(following) = follow.and_then(|f| Following::accepted(&system, &f, &path, &response)) {
            return Err(system.start_following(&task, &delivery, following, &response));
        }
        tracing::info!(
            system = %delivery.system,
            task_id = task.id(),
            attempt = task.attempt(),
            status = response.status().as_u16(),
            "deferred write delivered"
        );
        // A result of strings and numbers always serializes; the task completes either way.
        let _ = task.set_result(&system.keep_answer_of(key, &delivery, &response));
        Ok(())
    }
}

/// Whether an attempt failed in an outage the breaker had declared before
/// the delivery began (`before`) and still holds: the outage failed it, not
/// the write. Such an attempt — most often the probe a delivery makes of an
/// open breaker every few seconds — is not counted against `max_attempts`
/// for a system that deduplicates by key (resending is safe): a long outage
/// cannot fail the deliveries that probe it; `send_by` bounds them instead.
/// A write whose own failures opened the breaker is counted as before.
fn met_an_outage(system: &HttpSystem, before: bool) -> bool {
    before && system.dedupes_by_key() && system.breaker_state() == Some(ballast::BreakerState::Open)
}

/// The task's lease as a [`SendGate`](crate::SendGate) (C4, C6): every
/// attempt of a delivery, and every look at an operation it follows, is
/// sent only while the lease holds by the clock read at that moment — a
/// worker paused past its lease, or cut from the database while the lease
/// ran out, sends nothing that another worker may have sent, and followed
/// with the sequence's next write, since.
pub(super) fn lease_gate(task: &TaskContext) -> crate::SendGate {
    let lease = task.lease();
    crate::SendGate::new(move || lease.check().map_err(|lost| lost.to_string()))
}
