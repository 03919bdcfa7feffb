//! A [`Delivery`](crate::Delivery) on the wire: the task payload a deferred keyed write is
//! stored as — its method, path, query, headers and body, the credential
//! headers (and with a seal key the body and query) sealed in one envelope
//! bound to the rest.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ballast::IdempotencyKey;
use ballast_queue::NewTask;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use http::Method;
use serde::{Deserialize, Serialize};

use crate::{Fingerprint, HttpError, HttpSystem, Request};

/// A keyed write to a configured system, stored as a task's JSON payload.
///
/// The idempotency key is not part of it: it is the task's own key, so the
/// queue deduplicates deliveries of one user action and the handler sends the
/// key the in-memory attempts sent (R-RES-RE-1). Headers a system adds on its
/// own ([`HttpSystemBuilder::header`](crate::HttpSystemBuilder::header)) are
/// never part of it. [`HttpSystem::capture`] seals the caller's credential
/// headers (and, with a seal key, the body) before it is stored; other
/// headers are stored as given.
///
/// ```
/// use ballast_http::{delivery::Body, Delivery, Request};
///
/// let request = Request::post("payments").json(&serde_json::json!({ "amount": 100 }));
/// let delivery = Delivery::from_request("sber", &request).unwrap();
/// assert_eq!(delivery.body, Some(Body::Text(r#"{"amount":100}"#.into())));
/// assert_eq!(delivery.to_request().unwrap().path(), "payments");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// The name of the [`HttpSystem`] to send it to.
    pub system: String,
    /// The HTTP method.
    pub method: String,
    /// The path, relative to the system's base URL.
    pub path: String,
    /// A query string sent as given, before `query`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_query: Option<String>,
    /// Query parameters, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query: Vec<(String, String)>,
    /// Headers, in order (the idempotency header is added when sending).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// Credential headers, each sealed ([`crate::seal`]): only the worker
    /// that sends the delivery opens them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sealed_headers: Vec<SealedHeader>,
    /// The body; `None` when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Body>,
    /// When the write's first attempt was about to be made, in milliseconds
    /// since the Unix epoch. A delivery is never sent once its key may have
    /// expired — the system's [`key_ttl`](crate::HttpSystemBuilder::key_ttl)
    /// after this, less one in-memory window — nor, for a system without one,
    /// once it is older than [`DeliveryHandler::max_age`](crate::DeliveryHandler::max_age): it fails and alerts
    /// instead (R-RES-RE-1). `None` in deliveries stored before this field
    /// existed: they are bounded by their attempts alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_attempt_at: Option<u64>,
    /// A random secret ([`HttpSystem::capture`] makes one) that, with the
    /// task's id, forms the task's handle ([`Delivery::handle`]): the gateway
    /// shows a deferred write to whoever holds its handle, never by its
    /// sequential id alone. Stored only without a seal key: with one, the
    /// secret is made from the seal key, the system, the key and the task
    /// id whenever it is needed ([`HttpSystem::handle`]) and never stored,
    /// so a reader of the table cannot make a handle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<String>,
    /// Who asked for it ([`crate::caller`]): a digest of its credential and
    /// tenant headers, keyed under the seal key. A later request with the
    /// same key joins the task only when it is the same caller's. `None`
    /// in deliveries stored before it was kept: those are joined by nobody.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// The id of the seal key that sealed [`sealed`](Self::sealed)
    /// ([`SealKey::id`](crate::SealKey::id)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal_key: Option<String>,
    /// The sealed envelope ([`crate::seal`]): the credential headers, the
    /// body and the query, bound to every other field. With it, those
    /// fields above are empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<String>,
    /// What the envelope holds, by name — its header names, `body`,
    /// `query` — for an operator to see (bound to the envelope like the rest).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sealed_parts: Vec<String>,
    /// What the request asks for ([`Fingerprint`]): a later request with the
    /// same key and another fingerprint is refused, never merged into this
    /// task (R-RES-RE-1). `None` in deliveries stored before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Fingerprint>,
    /// Why the write was deferred rather than answered: set when it is
    /// handed to the queue. Not bound to the envelope: it says nothing
    /// about what is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred_because: Option<DeferredBecause>,
    /// Where to `POST` when the write ends for good ([`super::callback`]):
    /// the request's `Ballast-Callback`, checked against the callback
    /// hosts when it was accepted and again when it is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<String>,
    /// Set once the system accepted the write with a 202 whose operation
    /// its route follows: where the worker reads its status
    /// ([`Following`](super::Following)); the write itself is not sent again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub following: Option<super::Following>,
}

/// Why a keyed write went to the queue instead of being answered: what the
/// 202 and `GET /tasks/{handle}` say as `deferred_because`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeferredBecause {
    /// The system's breaker is open (or half-open with its probes taken,
    /// or isolated): nothing was sent.
    BreakerOpen,
    /// The system's bulkhead had no slot: nothing was sent.
    BulkheadFull,
    /// The system's rate limit (or its own `Retry-After`) gave no permit
    /// in time: nothing was sent.
    RateLimited,
    /// The retry budget was spent: no further in-memory attempt.
    BudgetExhausted,
    /// Every in-memory attempt failed transiently (R-RES-RE-3).
    AttemptsExhausted,
    /// The call's total deadline passed.
    Timeout,
    /// An earlier write of its sequence still waits in the queue: sent now,
    /// it would overtake it.
    SequencePending,
    /// The system accepted it (`202 Accepted` with a status URL) and works
    /// on it: its route follows the operation to its end.
    Accepted,
    /// The gateway that was sending it shut down before an answer came:
    /// it may have been applied, and is sent again with its key.
    Draining,
}

impl DeferredBecause {
    /// Why `failure` deferred a write.
    pub fn of<E>(failure: &ballast::Failure<E>) -> DeferredBecause {
        use ballast::{Failure, Rejection, StopReason};
        match failure {
            Failure::Rejected { rejection, .. } => match rejection {
                Rejection::BulkheadFull => DeferredBecause::BulkheadFull,
                Rejection::RateLimited { .. } => DeferredBecause::RateLimited,
                _ => DeferredBecause::BreakerOpen,
            },
            Failure::Timeout { .. } => DeferredBecause::Timeout,
            Failure::Operation { stop: StopReason::BudgetExhausted, .. } => DeferredBecause::BudgetExhausted,
            Failure::Operation {
                stop: StopReason::TotalTimeout | StopReason::DeadlineWouldOverrun, ..
            } => DeferredBecause::Timeout,
            _ => DeferredBecause::AttemptsExhausted,
        }
    }

    /// Its name, as the 202 spells it (`breaker_open`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            DeferredBecause::BreakerOpen => "breaker_open",
            DeferredBecause::BulkheadFull => "bulkhead_full",
            DeferredBecause::RateLimited => "rate_limited",
            DeferredBecause::BudgetExhausted => "budget_exhausted",
            DeferredBecause::AttemptsExhausted => "attempts_exhausted",
            DeferredBecause::Timeout => "timeout",
            DeferredBecause::SequencePending => "sequence_pending",
            DeferredBecause::Accepted => "accepted",
            DeferredBecause::Draining => "draining",
        }
    }
}

/// What a delivery's envelope holds, sealed.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Envelope {
    #[serde(default)]
    pub(super) headers: Vec<(String, String)>,
    /// The body's bytes, base64.
    #[serde(default)]
    pub(super) body: Option<String>,
    #[serde(default)]
    pub(super) raw_query: Option<String>,
    #[serde(default)]
    pub(super) query: Vec<(String, String)>,
    /// Where to `POST` when the write ends ([`super::callback`]): its
    /// query may hold the receiver's token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) callback: Option<String>,
}

/// A header stored sealed: its name in clear, its value sealed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedHeader {
    /// The header's name.
    pub name: String,
    /// Its value, sealed (`base64(nonce ‖ ciphertext ‖ tag)`).
    pub sealed: String,
}

/// A request body as stored in JSON: text when it is UTF-8, so an operator
/// can read the payload, base64 otherwise, sealed when the system has a seal key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "encoding", content = "data", rename_all = "lowercase")]
pub enum Body {
    /// A UTF-8 body, as is.
    Text(String),
    /// Any other body, base64 (standard alphabet, padded).
    Base64(String),
    /// A body sealed with the system's seal key ([`crate::seal`]).
    Sealed(String),
}

impl Body {
    /// Text if `bytes` are UTF-8, base64 otherwise; `None` when empty.
    pub fn from_bytes(bytes: &[u8]) -> Option<Body> {
        if bytes.is_empty() {
            return None;
        }
        Some(match std::str::from_utf8(bytes) {
            Ok(text) => Body::Text(text.to_owned()),
            Err(_) => Body::Base64(BASE64.encode(bytes)),
        })
    }

    /// The bytes to send.
    pub fn to_bytes(&self) -> Result<Vec<u8>, HttpError> {
        match self {
            Body::Text(text) => Ok(text.as_bytes().to_vec()),
            Body::Base64(data) => {
                BASE64.decode(data).map_err(|e| HttpError::invalid(format!("base64 body: {e}")))
            }
            Body::Sealed(_) => Err(HttpError::invalid(
                "the body is sealed: open the delivery with HttpSystem::open_delivery",
            )),
        }
    }
}

impl Delivery {
    /// Captures `request` for `system`. Fails, as sending it would, if the
    /// request was built with a mistake, and if a header value is not UTF-8
    /// (headers are stored as text).
    pub fn from_request(system: impl Into<String>, request: &Request) -> Result<Delivery, HttpError> {
        let head = &request.head;
        head.check()?;
        let headers = head
            .headers
            .iter()
            .map(|(name, value)| match std::str::from_utf8(value.as_bytes()) {
                Ok(value) => Ok((name.as_str().to_owned(), value.to_owned())),
                Err(_) => Err(HttpError::invalid(format!(
                    "header {name} is not UTF-8 and cannot be stored for a later delivery"
                ))),
            })
            .collect::<Result<_, _>>()?;
        Ok(Delivery {
            system: system.into(),
            method: head.method.as_str().to_owned(),
            path: head.path.clone(),
            raw_query: head.raw_query.clone(),
            query: head.query.clone(),
            headers,
            sealed_headers: Vec::new(),
            body: Body::from_bytes(&request.body),
            first_attempt_at: Some(unix_millis(SystemTime::now())),
            access: None,
            caller: None,
            seal_key: None,
            sealed: None,
            sealed_parts: Vec::new(),
            fingerprint: Some(Fingerprint::of(request)),
            deferred_because: None,
            callback: None,
            following: None,
        })
    }

    /// What an envelope of this delivery, sealed with `key`, is bound to:
    /// every part stored in clear that sending it reads.
    pub(super) fn bound(&self, key: &IdempotencyKey) -> Vec<u8> {
        let first = self.first_attempt_at.map(|at| at.to_string()).unwrap_or_default();
        let mut parts = vec![self.system.as_str(), key.as_str(), &self.method, &self.path, &first];
        for (name, value) in &self.headers {
            parts.push(name);
            parts.push(value);
        }
        // Bound only where it is kept, so that a delivery stored before
        // opens as it did: a writer cannot make another caller's request
        // join the task.
        if let Some(caller) = &self.caller {
            parts.push("caller:");
            parts.push(caller);
        }
        parts.push("sealed:");
        parts.extend(self.sealed_parts.iter().map(String::as_str));
        crate::seal::bound(&parts)
    }

    /// The handle of the task `task_id` holding this delivery, when its
    /// access secret is stored (a delivery stored without a seal key):
    /// `{task_id}.{access}`, or `None`. [`HttpSystem::handle`] makes the
    /// handle of every delivery.
    pub fn handle(&self, task_id: i64) -> Option<String> {
        self.access.as_ref().map(|access| format!("{task_id}.{access}"))
    }

    /// Whether `payload` (that of the task [`handle_id`](Self::handle_id)
    /// names) holds the handle's secret, compared in constant time: for a
    /// delivery whose secret is stored ([`Systems::opens`](crate::Systems::opens)
    /// checks every delivery).
    pub fn opens(handle: &str, payload: &serde_json::Value) -> bool {
        let Some((_, secret)) = handle.split_once('.') else { return false };
        let stored = payload.get("access").and_then(|a| a.as_str()).unwrap_or_default();
        !stored.is_empty() && bool::from(subtle::ConstantTimeEq::ct_eq(stored.as_bytes(), secret.as_bytes()))
    }

    /// The task id of a handle made by [`handle`](Self::handle).
    pub fn handle_id(handle: &str) -> Option<i64> {
        handle.split_once('.')?.0.parse().ok()
    }

    /// The payload as an operator may see it (the dashboard's task page):
    /// sealed values shown as `"(sealed)"`, names kept; query values in
    /// clear (a delivery stored without a seal key) masked, as errors and
    /// spans mask them.
    pub fn shown(payload: &serde_json::Value) -> serde_json::Value {
        let mut shown = payload.clone();
        if let Some(sealed) = shown.get_mut("sealed") {
            *sealed = serde_json::Value::from("(sealed)");
        }
        if let Some(raw) = shown.get_mut("raw_query") {
            if let Some(text) = raw.as_str() {
                *raw =
                    serde_json::Value::from(ballast::redact_url(&format!("?{text}")).trim_start_matches('?'));
            }
        }
        if let Some(pairs) = shown.get_mut("query").and_then(|q| q.as_array_mut()) {
            for pair in pairs {
                if let Some(value) = pair.get_mut(1) {
                    *value = serde_json::Value::from("***");
                }
            }
        }
        if let Some(sealed) = shown.get_mut("sealed_headers").and_then(|h| h.as_array_mut()) {
            for header in sealed {
                if let Some(value) = header.get_mut("sealed") {
                    *value = serde_json::Value::from("(sealed)");
                }
            }
        }
        if let Some(body) = shown.get_mut("body").filter(|b| b["encoding"] == "sealed") {
            body["data"] = serde_json::Value::from("(sealed)");
        }
        if let Some(access) = shown.get_mut("access") {
            *access = serde_json::Value::from("(hidden)");
        }
        // A callback's or a status URL's query may be the receiver's token.
        if let Some(callback) = shown.get_mut("callback") {
            if let Some(url) = callback.as_str() {
                *callback = serde_json::Value::from(ballast::redact_url(url));
            }
        }
        if let Some(query) = shown.get_mut("following").and_then(|f| f.get_mut("query")) {
            if let Some(text) = query.as_str() {
                *query =
                    serde_json::Value::from(ballast::redact_url(&format!("?{text}")).trim_start_matches('?'));
            }
        }
        shown
    }

    /// The latest moment this delivery may still be sent to `system`: its
    /// key's TTL after the first attempt, less one in-memory window, where
    /// the system deduplicates and declares a TTL; `max_age` after the
    /// first attempt otherwise. `None` for a delivery without
    /// [`first_attempt_at`](Self::first_attempt_at).
    pub fn send_by(&self, system: Option<&HttpSystem>, max_age: Duration) -> Option<SystemTime> {
        let first = UNIX_EPOCH + Duration::from_millis(self.first_attempt_at?);
        let lasts = match system {
            Some(system) if system.dedupes_by_key() => match system.key_ttl() {
                Some(ttl) => ttl.saturating_sub(system.policy().worst_case()),
                None => max_age,
            },
            _ => max_age,
        };
        first.checked_add(lasts)
    }

    /// The request to send, or why the stored delivery is not a valid one
    /// (a sealed delivery is opened with [`HttpSystem::open_delivery`]).
    pub fn to_request(&self) -> Result<Request, HttpError> {
        if let Some(header) = self.sealed_headers.first() {
            return Err(HttpError::invalid(format!(
                "header {} is sealed: open the delivery with HttpSystem::open_delivery",
                header.name
            )));
        }
        if self.sealed.is_some() {
            return Err(HttpError::invalid("the delivery is sealed: open it with HttpSystem::open_delivery"));
        }
        self.plain_request()
    }

    pub(super) fn plain_request(&self) -> Result<Request, HttpError> {
        let method = Method::from_bytes(self.method.as_bytes())
            .map_err(|_| HttpError::invalid(format!("method {:?}", self.method)))?;
        let mut request = Request::new(method, &self.path);
        request.head.query.clone_from(&self.query);
        request.head.raw_query.clone_from(&self.raw_query);
        for (name, value) in &self.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        if let Some(body) = &self.body {
            request = request.body(body.to_bytes()?);
        }
        request.head.check()?;
        Ok(request)
    }

    /// The queue task that delivers it with `key`, of its system's kind
    /// ([`delivery_kind`](super::delivery_kind)): the key names one task of
    /// that system alone.
    pub fn task(&self, key: &IdempotencyKey) -> NewTask {
        NewTask::new(super::delivery_kind(&self.system), self).key(key.clone())
    }
}

pub(super) fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::Delivery;

    #[test]
    fn an_operator_sees_no_token_of_a_callback_or_a_status_url() {
        let payload = serde_json::json!({
            "system": "pay", "method": "POST", "path": "payments", "access": "ab12",
            "callback": "https://hooks.example/paid?token=s3cret",
            "following": { "path": "operations/7", "query": "sig=s3cret", "accepted_at": 1, "until": 2 },
        });
        let shown = Delivery::shown(&payload).to_string();
        assert!(!shown.contains("s3cret") && !shown.contains("ab12"), "{shown}");
        assert!(shown.contains("hooks.example/paid") && shown.contains("operations/7"), "{shown}");
    }
}
