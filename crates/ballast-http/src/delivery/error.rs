//! Why a delivery did not deliver ([`DeliveryError`](crate::DeliveryError)), and how each reason
//! is classified for the queue: held, retried with the key, or failed and
//! alerted.

use ballast::{Classification, Classify, Failure};

use super::handler::{HOLD_SEALED, HOLD_UNKNOWN};
use crate::seal::SealError;
use crate::HttpError;

/// Why a [`DeliveryHandler`](crate::DeliveryHandler) attempt did not deliver.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// The delivery names a system that is not configured (a reload removed
    /// it, or it was never given to the handler): held, not failed, until
    /// the system returns or the delivery is too old.
    #[error(
        "unknown system {system:?}: the delivery is held until a system of that name is configured again \
         (give its HttpSystem to the DeliveryHandler, or restore its [systems] section)"
    )]
    UnknownSystem {
        /// The system named by the delivery.
        system: String,
    },
    /// The delivery is too old to be sent: its key may have expired, or it
    /// outlived the handler's `max_age`. It was not sent.
    #[error("{}", expired_message(system, *bound))]
    Expired {
        /// The system named by the delivery.
        system: String,
        /// What bounded it.
        bound: ExpiredBy,
    },
    /// The task carries no idempotency key.
    #[error(
        "task {task_id} has no idempotency key: a write without a key is never retried (R-RES-RE-X1); \
         enqueue deliveries with Delivery::task(&key)"
    )]
    NoKey {
        /// The task's id.
        task_id: i64,
    },
    /// The stored delivery is not a valid request.
    #[error("the stored delivery is not a valid request: {0}")]
    Invalid(#[source] HttpError),
    /// The stored delivery does not open (a seal key no longer configured,
    /// or the delivery changed since it was stored): held, not failed, until
    /// the key returns or the delivery may no longer be sent.
    #[error("delivery to {system} held: {source}")]
    Sealed {
        /// The system named by the delivery.
        system: String,
        /// Why it does not open.
        source: SealError,
    },
    /// The system answered the write with a 4xx or 5xx.
    #[error("{}", answered_message(system, *dedupes_by_key, *status, *verdict, *attempts))]
    Answered {
        /// The system's name.
        system: String,
        /// Whether the system deduplicates by key, which a durable retry needs.
        dedupes_by_key: bool,
        /// Its last answer's status.
        status: http::StatusCode,
        /// What the policy made of it.
        verdict: Classification,
        /// The attempts this delivery made.
        attempts: u32,
    },
    /// The operation the write started still runs: looked at again after
    /// `retry_in` ([`Follow`](crate::routes::Follow)).
    #[error("the operation {system} accepted still runs; looked at again in {retry_in:?}")]
    Running {
        /// The system's name.
        system: String,
        /// When it is looked at next.
        retry_in: std::time::Duration,
    },
    /// The operation the write started did not end within its route's
    /// follow deadline: the task fails, and alerts.
    #[error(
        "the operation {system} accepted did not end within {deadline:?} (the route's follow deadline); \
         check its status at {system} ({status_path})"
    )]
    FollowDeadline {
        /// The system's name.
        system: String,
        /// The route's deadline.
        deadline: std::time::Duration,
        /// Where its status was read, relative to the system's base URL.
        status_path: String,
    },
    /// This worker already holds as many deliveries to the system as its
    /// share of the system's rate limit sends within the pace: this one is
    /// handed back to the queue unsent, the attempt not counted, for
    /// whichever worker has room.
    #[error(
        "delivery to {system} handed back to the queue unsent: {waiting} deliveries to it already wait on this \
         worker, what its share of the rate limit sends in half a lease; any worker takes it again in {retry_in:?}"
    )]
    HandedBack {
        /// The system's name.
        system: String,
        /// Deliveries to it waiting on this worker.
        waiting: usize,
        /// When it is looked at again.
        retry_in: std::time::Duration,
    },
    /// The system gave no answer to the write.
    #[error("{}", failed_message(system, *dedupes_by_key, failure))]
    Failed {
        /// The system's name.
        system: String,
        /// Whether the system deduplicates by key, which a durable retry needs.
        dedupes_by_key: bool,
        /// What the call reported.
        failure: Failure<HttpError>,
    },
}

/// What ended a delivery that was never sent: see [`Delivery::send_by`](crate::Delivery::send_by).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiredBy {
    /// The system's `key_ttl`: a later attempt might no longer be deduplicated.
    KeyTtl,
    /// The handler's `max_age` (`[queue] max_age`).
    MaxAge,
}

fn expired_message(system: &str, bound: ExpiredBy) -> String {
    match bound {
        ExpiredBy::KeyTtl => format!(
            "not sent: the idempotency key of this write to {system} may have expired (its key_ttl since the \
             first attempt, less one in-memory window), and a later attempt could apply the write twice \
             (R-RES-RE-1); check with {system} whether the write was applied"
        ),
        ExpiredBy::MaxAge => format!(
            "not sent: this delivery to {system} is older than [queue] max_age; check with {system} \
             whether it is still wanted, and send it anew with its key if so"
        ),
    }
}

fn answered_message(
    system: &str,
    dedupes_by_key: bool,
    status: http::StatusCode,
    verdict: Classification,
    attempts: u32,
) -> String {
    if verdict.throttled {
        // Not "a contract error": a 429 here says the write was not taken.
        let when = verdict
            .retry_after
            .map_or_else(|| "after the queue's backoff".to_owned(), |d| format!("in {d:?}"));
        return format!(
            "delivery to {system}: the system answered {status} and did not take it (too many requests); \
             sent again {when}, the attempt not counted, until it may no longer be sent"
        );
    }
    let said = crate::error::status_message(status, verdict.class);
    match verdict.class {
        ballast::Class::Permanent => format!("delivery to {system}: {said} ({attempts} attempt(s); R-RES-RE-X2)"),
        ballast::Class::Transient if dedupes_by_key => format!("delivery to {system}: {said} ({attempts} attempt(s))"),
        ballast::Class::Transient => format!(
            "delivery to {system}: {said} ({attempts} attempt(s)); not retried: {system} does not deduplicate by \
             key, and the write may have been applied (R-RES-RE-1)"
        ),
    }
}

fn failed_message(system: &str, dedupes_by_key: bool, failure: &Failure<HttpError>) -> String {
    if dedupes_by_key || matches!(failure, Failure::Rejected { .. }) {
        format!("delivery to {system} failed: {failure}")
    } else {
        format!(
            "delivery to {system} failed: {failure}; not retried: {system} does not deduplicate by key, \
             and retrying a write needs that guarantee (R-RES-RE-1)"
        )
    }
}

/// How soon a delivery refused while its system's probe is out looks
/// again: between this and twice it.
pub(crate) const PROBE_LOOK: std::time::Duration = std::time::Duration::from_secs(1);

impl Classify for DeliveryError {
    fn classify(&self) -> Classification {
        let (dedupes_by_key, failure) = match self {
            // The system did not take the write (a 429, a 503 with
            // Retry-After): sent again when it says, whatever its contract.
            DeliveryError::Answered { verdict, .. } if verdict.throttled => {
                let again = Classification::transient();
                return verdict.retry_after.map_or(again, |after| again.with_retry_after(after));
            }
            DeliveryError::Answered { dedupes_by_key: true, verdict, .. } if verdict.is_transient() => {
                return *verdict;
            }
            DeliveryError::Answered { .. } => return Classification::permanent(),
            DeliveryError::Failed { dedupes_by_key, failure, .. } => (dedupes_by_key, failure),
            DeliveryError::UnknownSystem { .. } => {
                return Classification::transient().with_retry_after(HOLD_UNKNOWN)
            }
            DeliveryError::Sealed { .. } => return Classification::transient().with_retry_after(HOLD_SEALED),
            DeliveryError::Running { retry_in, .. } | DeliveryError::HandedBack { retry_in, .. } => {
                return Classification::transient().with_retry_after(*retry_in)
            }
            _ => return Classification::permanent(),
        };
        match failure {
            // The system's probe is out: its result decides, and it comes
            // within an attempt. Looked at again just after it, spread out
            // so the backlog does not wake at once — not a whole
            // `half_open_after` later, which is only what a failed probe costs.
            Failure::Rejected { rejection: ballast::Rejection::BreakerHalfOpen { retry_in }, .. } => {
                let after_probe = PROBE_LOOK.mul_f64(rand::Rng::random_range(&mut rand::rng(), 1.0..2.0));
                Classification::transient().with_retry_after((*retry_in).min(after_probe))
            }
            // Nothing was sent: safe to try again whatever the system's contract.
            Failure::Rejected { rejection, .. } => match rejection.retry_in() {
                Some(retry_in) => Classification::transient().with_retry_after(retry_in),
                None => Classification::transient(),
            },
            // A configuration error (TLS, proxy or token credentials) would
            // fail the same way next time: the task fails and alerts.
            _ if failure
                .error()
                .and_then(HttpError::transport_kind)
                .is_some_and(|k| k.is_configuration()) =>
            {
                Classification::permanent()
            }
            _ if failure.error().is_some_and(HttpError::nothing_sent) => Classification::transient(),
            _ if !dedupes_by_key => Classification::permanent(),
            Failure::Cancelled { .. } => Classification::transient(),
            _ if failure.is_deferrable() => match failure.error().map(Classify::classify) {
                Some(Classification { retry_after: Some(after), .. }) => {
                    Classification::transient().with_retry_after(after)
                }
                _ => Classification::transient(),
            },
            _ => Classification::permanent(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 429 to a delivery says the write was not taken and when it goes
    /// again — not that the request is wrong.
    #[test]
    fn a_throttled_delivery_says_it_was_not_taken_not_a_contract_error() {
        let verdict = Classification {
            throttled: true,
            ..Classification::transient().with_retry_after(std::time::Duration::from_secs(1))
        };
        let said = DeliveryError::Answered {
            system: "pay".into(),
            dedupes_by_key: true,
            status: http::StatusCode::TOO_MANY_REQUESTS,
            verdict,
            attempts: 1,
        }
        .to_string();
        assert!(!said.contains("contract error"), "{said}");
        assert!(
            said.contains("429 Too Many Requests and did not take it") && said.contains("in 1s"),
            "{said}"
        );
    }
}
