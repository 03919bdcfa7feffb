//! A call still in flight when a drain's deadline comes
//! ([`crate::drain`]): answered, never reset. What the caller can do next
//! depends on what the call is:
//!
//! | call | at the deadline | the caller learns |
//! |---|---|---|
//! | a keyed write to a system that deduplicates by key | handed to the durable queue with its key (and sequence) | 202 and its task with `Prefer: respond-async`; else `503 draining`: it may have been applied, resending it with the same key is safe |
//! | any other write | its attempt abandoned | `503 draining`, `sent: true`: the outcome is unknown; the answer names the call's id, as the log does |
//! | a read | its attempt abandoned | `503 draining`, `Retry-After`: ask again (another replica) |

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use ballast::IdempotencyKey;
use ballast_http::delivery::DeferOptions;
use ballast_http::{DeferredBecause, HttpSystem};

use super::problem::{Problem, Reason};
use super::Gateway;

/// When a caller refused at the deadline may ask again: another replica
/// takes it at once.
const ASK_AGAIN: Duration = Duration::from_secs(1);

/// What a call is, as its answer at the deadline needs it.
pub(super) enum AtTheCut {
    /// A keyed write the system deduplicates by key.
    HandOver {
        /// The request, to store.
        request: Box<ballast_http::Request>,
        /// Its key.
        key: IdempotencyKey,
        /// Its sequence, if it has one.
        sequence: Option<String>,
        /// Whether the caller takes a 202 (`Prefer: respond-async`), and
        /// the callback it asked for.
        accepts: Option<Option<String>>,
    },
    /// A write that may have been applied.
    Unknown {
        /// `POST payments`, for the answer and the log.
        call: String,
    },
    /// A read.
    Read,
}

impl AtTheCut {
    /// What `request`, planned as a keyed write the system deduplicates
    /// (`deduplicated`) or a read (`read`), would be at the deadline.
    pub(super) fn of(
        request: &ballast_http::Request,
        key: Option<&IdempotencyKey>,
        deduplicated: bool,
        read: bool,
        sequence: Option<String>,
        accepts: Option<Option<String>>,
    ) -> AtTheCut {
        match key {
            Some(key) if deduplicated => {
                AtTheCut::HandOver { request: Box::new(request.clone()), key: key.clone(), sequence, accepts }
            }
            _ if read => AtTheCut::Read,
            _ => AtTheCut::Unknown { call: format!("{} {}", request.method(), request.path()) },
        }
    }

    /// The answer at the deadline (see the module's table).
    pub(super) async fn answer(self, gateway: &Gateway, system: &HttpSystem) -> Response {
        let drain = gateway.drain_state();
        match self {
            AtTheCut::Read => {
                drain.refused();
                let detail = format!(
                    "this gateway is shutting down and the read from {} did not finish in time; nothing was changed: \
                     ask again (another replica answers)",
                    system.name()
                );
                Problem::new(Reason::Draining, detail).retry_after(ASK_AGAIN).into_response()
            }
            AtTheCut::Unknown { call } => {
                drain.refused();
                let id = uuid::Uuid::now_v7();
                tracing::warn!(
                    call_id = %id,
                    system = system.name(),
                    call,
                    "a write still in flight at the drain's deadline: its outcome is unknown"
                );
                let detail = format!(
                    "this gateway is shutting down and the write {call} to {} did not finish in time: it may have been \
                     applied, and its outcome is unknown (call {id}); check with {} before sending it again",
                    system.name(),
                    system.name()
                );
                Problem::new(Reason::Draining, detail).sent(true).call_id(id).into_response()
            }
            AtTheCut::HandOver { request, key, sequence, accepts } => {
                hand_over(gateway, system, &request, &key, sequence.as_deref(), accepts).await
            }
        }
    }
}

/// A keyed write handed to the queue with its key at the deadline.
async fn hand_over(
    gateway: &Gateway,
    system: &HttpSystem,
    request: &ballast_http::Request,
    key: &IdempotencyKey,
    sequence: Option<&str>,
    accepts: Option<Option<String>>,
) -> Response {
    let drain = gateway.drain_state();
    let resend = format!(
        "this gateway is shutting down and the write to {} did not finish in time: it may have been applied; {} \
         deduplicates by key, so resending it with the same Idempotency-Key is safe",
        system.name(),
        system.name()
    );
    let callback = accepts.clone().flatten().or_else(|| system.default_callback().map(str::to_owned));
    let options = callback.map_or_else(DeferOptions::default, |url| DeferOptions::default().callback(url));
    let stored = match system.capture_with(key, request, &options) {
        Ok(mut delivery) => {
            delivery.deferred_because = Some(DeferredBecause::Draining);
            let task = delivery.task(key);
            let task = match sequence {
                Some(name) => {
                    system.sequence_in(gateway.queue(), name).await.map(|stored| task.sequence(stored))
                }
                None => Ok(task),
            };
            match task {
                Ok(task) => gateway.queue().enqueue(task).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
        Err(e) => Err(e.to_string()),
    };
    match stored {
        Ok(outcome) => {
            drain.handed_over();
            tracing::info!(
                task_id = outcome.id,
                system = system.name(),
                "a keyed write still in flight at the drain's deadline handed to the queue with its key"
            );
            if accepts.is_some() {
                return super::call::accepted(gateway, outcome.id, 0).await;
            }
            let detail = format!("{resend}; the durable queue sends it with that key meanwhile");
            Problem::new(Reason::Draining, detail).sent(true).retry_after(ASK_AGAIN).into_response()
        }
        Err(why) => {
            drain.refused();
            tracing::warn!(system = system.name(), error = %why, "a keyed write at the drain's deadline could not be handed to the queue");
            Problem::new(Reason::Draining, resend).sent(true).retry_after(ASK_AGAIN).into_response()
        }
    }
}
