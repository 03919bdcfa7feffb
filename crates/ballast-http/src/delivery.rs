//! Durable delivery of keyed writes: an HTTP write that in-memory retry could
//! not finish becomes a [`Delivery`] task in a [`ballast_queue::Queue`],
//! carrying the same idempotency key, and a worker running a
//! [`DeliveryHandler`] sends it again later (R-RES-RE-4, R-RES-RE-1).
//! Available with the crate's `queue` feature.
//!
//! ```no_run
//! use ballast::IdempotencyKey;
//! use ballast_http::{DeliveryHandler, HttpSystem, Request, DELIVERY_KIND};
//! use ballast_queue::{Handover, Queue, Worker};
//!
//! # async fn run(sber: HttpSystem) -> Result<(), Box<dyn std::error::Error>> {
//! let queue = Queue::connect("sqlite://tasks.db").await?;
//! queue.migrate().await?;
//!
//! let key = IdempotencyKey::v5("order-42", "register-payment"); // stored with the order
//! let pay = Request::post("payments").json(&serde_json::json!({ "amount": 100 }));
//! match sber.write_or_defer(&key, &queue, pay).await? {
//!     Handover::Done(response) => println!("paid: {}", response.status()),
//!     Handover::Deferred { task_id, .. } => println!("in progress, task {task_id}"),
//! }
//!
//! // In the worker process (or the same one):
//! let worker = Worker::builder(queue).handler(DELIVERY_KIND, DeliveryHandler::new([sber])).build()?;
//! # let _ = worker;
//! # Ok(()) }
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ballast::{Classification, Classify, Failure, IdempotencyKey, Operation};
use ballast_queue::{Handler, Handover, HandoverError, NewTask, Queue, TaskContext, DEFAULT_MAX_AGE};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use http::Method;
use serde::{Deserialize, Serialize};
use tracing::Instrument;

use crate::seal::SealError;
use crate::{HttpError, HttpSystem, Request, Response, Systems};

/// The task kind of a [`Delivery`]: register a [`DeliveryHandler`] under it.
pub const DELIVERY_KIND: &str = "ballast.http.delivery";

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
    /// once it is older than [`DeliveryHandler::max_age`]: it fails and alerts
    /// instead (R-RES-RE-1). `None` in deliveries stored before this field
    /// existed: they are bounded by their attempts alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_attempt_at: Option<u64>,
    /// A random secret ([`HttpSystem::capture`] makes one) that, with the
    /// task's id, forms the task's handle ([`Delivery::handle`]): the gateway
    /// shows a deferred write to whoever holds its handle, never by its
    /// sequential id alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<String>,
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
}

/// What a delivery's envelope holds, sealed.
#[derive(Debug, Serialize, Deserialize)]
struct Envelope {
    #[serde(default)]
    headers: Vec<(String, String)>,
    /// The body's bytes, base64.
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    raw_query: Option<String>,
    #[serde(default)]
    query: Vec<(String, String)>,
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
            seal_key: None,
            sealed: None,
            sealed_parts: Vec::new(),
        })
    }

    /// What an envelope of this delivery, sealed with `key`, is bound to:
    /// every part stored in clear that sending it reads.
    fn bound(&self, key: &IdempotencyKey) -> Vec<u8> {
        let first = self.first_attempt_at.map(|at| at.to_string()).unwrap_or_default();
        let mut parts = vec![self.system.as_str(), key.as_str(), &self.method, &self.path, &first];
        for (name, value) in &self.headers {
            parts.push(name);
            parts.push(value);
        }
        parts.push("sealed:");
        parts.extend(self.sealed_parts.iter().map(String::as_str));
        crate::seal::bound(&parts)
    }

    /// The handle of the task `task_id` holding this delivery:
    /// `{task_id}.{access}`, or `None` without an access secret.
    pub fn handle(&self, task_id: i64) -> Option<String> {
        self.access.as_ref().map(|access| format!("{task_id}.{access}"))
    }

    /// Whether `payload` (that of the task [`handle_id`](Self::handle_id)
    /// names) holds the handle's secret, compared in constant time.
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

    fn plain_request(&self) -> Result<Request, HttpError> {
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

    /// The queue task that delivers it with `key`, of kind [`DELIVERY_KIND`].
    pub fn task(&self, key: &IdempotencyKey) -> NewTask {
        NewTask::new(DELIVERY_KIND, self).key(key.clone())
    }
}

impl HttpSystem {
    /// `request` as a [`Delivery`] to store for a later send with `key`:
    /// with the system's [seal key](crate::HttpSystemBuilder::seal_key), the
    /// caller's credential headers (`Authorization`, `Proxy-Authorization`,
    /// `Cookie`, `X-Api-Key` and those of
    /// [`seal_headers`](crate::HttpSystemBuilder::seal_headers)), the body
    /// and the query sealed in one envelope bound to everything else
    /// ([`crate::seal`]); the trace context added with the `otel` feature.
    /// Refused ([`HttpError::SealKeyMissing`]) when a credential header
    /// would have to be stored and there is no key: nothing is stored in clear.
    pub fn capture(&self, key: &IdempotencyKey, request: &Request) -> Result<Delivery, HttpError> {
        let mut delivery = Delivery::from_request(self.name(), request)?;
        let mut access = [0u8; 16];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut access);
        delivery.access = Some(access.iter().map(|b| format!("{b:02x}")).collect());
        let sealed = self.sealed_headers();
        let (secret, plain): (Vec<_>, Vec<_>) = std::mem::take(&mut delivery.headers)
            .into_iter()
            .partition(|(name, _)| sealed.iter().any(|s| s.as_str().eq_ignore_ascii_case(name)));
        delivery.headers = plain;
        #[cfg(feature = "otel")]
        crate::otel::store(&mut delivery.headers);
        let Some(seal) = self.seal_key() else {
            return match secret.first() {
                Some((name, _)) => Err(HttpError::SealKeyMissing { header: name.clone() }),
                None => Ok(delivery),
            };
        };
        let envelope = Envelope {
            headers: secret,
            body: (!request.body.is_empty()).then(|| BASE64.encode(&request.body)),
            raw_query: delivery.raw_query.take(),
            query: std::mem::take(&mut delivery.query),
        };
        delivery.sealed_parts = envelope.headers.iter().map(|(name, _)| name.clone()).collect();
        if envelope.body.is_some() {
            delivery.sealed_parts.push("body".to_owned());
        }
        if envelope.raw_query.is_some() || !envelope.query.is_empty() {
            delivery.sealed_parts.push("query".to_owned());
        }
        delivery.body = None;
        let plain = serde_json::to_vec(&envelope).map_err(HttpError::invalid)?;
        delivery.sealed = Some(seal.seal(&delivery.bound(key), &plain));
        delivery.seal_key = Some(seal.id().to_owned());
        Ok(delivery)
    }

    /// The request a stored `delivery` with `key` sends: its sealed parts
    /// opened with the system's seal keys. A delivery that does not open —
    /// sealed with a key no longer configured, or changed since it was
    /// stored — is [`HttpError::Unseal`]: never sent.
    pub fn open_delivery(&self, key: &IdempotencyKey, delivery: &Delivery) -> Result<Request, HttpError> {
        let unsealed = |source| HttpError::Unseal { part: "envelope".to_owned(), source };
        if let Some(sealed) = &delivery.sealed {
            let seal = self.seal_key().ok_or(unsealed(SealError::NoKey))?;
            let opened =
                seal.open(delivery.seal_key.as_deref(), &delivery.bound(key), sealed).map_err(unsealed)?;
            let envelope: Envelope = serde_json::from_slice(&opened)
                .map_err(|e| HttpError::invalid(format!("the sealed envelope: {e}")))?;
            let body = envelope.body.map(Body::Base64);
            let plain = Delivery {
                raw_query: envelope.raw_query,
                query: envelope.query,
                body,
                sealed: None,
                sealed_parts: Vec::new(),
                ..delivery.clone()
            };
            let mut request = plain.plain_request()?;
            for (name, value) in envelope.headers {
                request = request.header(name.as_str(), value.as_str());
            }
            return Ok(request);
        }
        self.open_first_format(key, delivery)
    }

    /// A delivery sealed value by value, as deliveries were before the
    /// envelope: each opens with any key of the ring.
    fn open_first_format(&self, key: &IdempotencyKey, delivery: &Delivery) -> Result<Request, HttpError> {
        let sealed_body = matches!(delivery.body, Some(Body::Sealed(_)));
        if delivery.sealed_headers.is_empty() && !sealed_body {
            return delivery.plain_request();
        }
        let unseal = |part: &str, text: &str| -> Result<Vec<u8>, HttpError> {
            let unsealed = |source| HttpError::Unseal { part: part.to_owned(), source };
            let seal = self.seal_key().ok_or(unsealed(SealError::NoKey))?;
            let place = crate::seal::place(self.name(), key.as_str(), part);
            seal.open(None, &place, text).map_err(unsealed)
        };
        let mut plain = Delivery { sealed_headers: Vec::new(), ..delivery.clone() };
        if let Some(Body::Sealed(text)) = &delivery.body {
            plain.body = Body::from_bytes(&unseal("body", text)?);
        }
        let mut request = plain.plain_request()?;
        for header in &delivery.sealed_headers {
            let value = unseal(&header.name, &header.sealed)?;
            let value = http::HeaderValue::from_bytes(&value).map_err(|_| {
                HttpError::invalid(format!("sealed header {} is not a header value", header.name))
            })?;
            request = request.header(header.name.as_str(), value);
        }
        Ok(request)
    }

    /// Sends a keyed write as [`send`](HttpSystem::send) does; if it gives
    /// up on transient failures — no answer, or a transient answer such as a
    /// 503 after its last attempt — or is rejected (breaker open, bulkhead
    /// full), enqueues a [`Delivery`] task with the same `key` ([`capture`](Self::capture)d
    /// before the first attempt, trace context included) so a worker running
    /// a [`DeliveryHandler`] finishes it, and returns [`Handover::Deferred`]
    /// — the semantics of [`ballast_queue::WriteOrDefer`].
    ///
    /// Every other answer is [`Handover::Done`], as it came: a 201, and a 4xx
    /// too (a contract error, R-RES-RE-X2, is never deferred; its
    /// [`verdict`](Response::verdict) says so). A task deferred because the
    /// breaker is open is due when the breaker lets its next probe through.
    /// A system that does not [deduplicate by key](crate::HttpSystemBuilder::dedupes_by_key)
    /// never defers: a durable retry of a write needs that guarantee (R-RES-RE-1).
    pub async fn write_or_defer(
        &self,
        key: &IdempotencyKey,
        queue: &Queue,
        request: Request,
    ) -> Result<Handover<Response>, HandoverError<HttpError>> {
        match self.plan(Operation::KeyedWrite(key), &request) {
            Ok(plan) => self.write_or_defer_planned(plan, queue, request).await,
            Err(e) => Err(HandoverError::Failed(Failure::unsent(e))),
        }
    }

    /// [`write_or_defer`](Self::write_or_defer) of a request planned with
    /// [`plan`](Self::plan) or [`plan_by_method`](Self::plan_by_method):
    /// only a keyed write to a system that deduplicates by its key is ever
    /// deferred ([`Plan::is_deduplicated_write`](crate::Plan::is_deduplicated_write));
    /// any other plan is sent as it says, and its outcome returned.
    pub async fn write_or_defer_planned(
        &self,
        plan: crate::Plan<'_>,
        queue: &Queue,
        request: Request,
    ) -> Result<Handover<Response>, HandoverError<HttpError>> {
        let Some(key) = plan.operation().key().filter(|_| plan.is_deduplicated_write()) else {
            let sent = self.send_planned(plan, request).await;
            return sent.map(Handover::Done).map_err(HandoverError::Failed);
        };
        // Captured before sending: a request that cannot be stored is refused
        // unsent rather than found out after an attempt that may have applied it.
        let (task, send_by) = match self.capture(key, &request) {
            Ok(delivery) => (delivery.task(key), delivery.send_by(Some(self), queue.schedule().max_age)),
            Err(error) => return Err(HandoverError::Failed(Failure::unsent(error))),
        };
        let outcome = match self.send_planned(plan, request).await {
            // A transient answer after the last attempt: the queue tries again.
            Ok(answer) if answer.verdict().is_some_and(|v| v.is_transient()) => {
                let attempts = answer.attempts();
                Err(Failure::Operation {
                    error: HttpError::Status {
                        status: answer.status(),
                        class: ballast::Class::Transient,
                        retry_after: answer.verdict().and_then(|v| v.retry_after),
                        response: Box::new(answer),
                    },
                    class: ballast::Class::Transient,
                    attempts,
                    stop: ballast::StopReason::Exhausted,
                })
            }
            other => other,
        };
        // Due when the refusal says a call goes through again (the breaker's
        // probe, the next permit), but never past the time the delivery may
        // still be sent: a refusal that names a far time must end in an
        // alert, not a task nobody ever claims.
        let due = outcome.as_ref().err().and_then(Failure::rejection).and_then(|r| r.retry_in());
        let task = match (due, send_by) {
            (None, _) => task,
            (Some(due), None) => task.run_after(due),
            (Some(due), Some(by)) => {
                task.run_at(SystemTime::now().checked_add(due).map_or(by, |at| at.min(by)))
            }
        };
        ballast_queue::hand_over(queue, key, task, outcome).await
    }
}

/// Runs [`Delivery`] tasks ([`DELIVERY_KIND`]): sends each with
/// [`HttpSystem::write`] and the task's idempotency key.
///
/// Success completes the task. A transient failure reschedules it with the
/// queue's `2^n s` backoff; a permanent one (a 4xx) fails it and fires the
/// queue's alert. For a system that does not deduplicate by key, only a
/// failure that sent nothing (a rejection, a refused connection) is tried
/// again.
///
/// An attempt the breaker or the bulkhead refused before anything was sent,
/// or one whose system is not configured (a reload removed it), is
/// postponed — to the breaker's next probe, when it says — without counting
/// against the task's `max_attempts`
/// ([`TaskContext::not_attempted`]): a long outage cannot use up a
/// delivery's attempts without a single request. What bounds it instead is
/// [`Delivery::send_by`]: the key's TTL where the system deduplicates and
/// declares one, [`max_age`](Self::max_age) otherwise. Past it the delivery
/// fails with [`DeliveryError::Expired`], unsent, and alerts.
///
/// ```no_run
/// # fn f(queue: ballast_queue::Queue, sber: ballast_http::HttpSystem) -> Result<(), ballast_queue::Error> {
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
}

/// How long a delivery whose system is not configured waits before it is
/// looked at again.
const HOLD_UNKNOWN: Duration = Duration::from_secs(30);

/// How long a delivery that does not open waits before it is tried again.
const HOLD_SEALED: Duration = Duration::from_secs(300);

impl DeliveryHandler {
    /// Delivers to `systems`, found by name.
    pub fn new(systems: impl IntoIterator<Item = HttpSystem>) -> Self {
        Self::shared(Systems::new(systems))
    }

    /// Delivers to the systems of `systems` as they are at each delivery, so
    /// a reload that replaces them reaches the worker too.
    pub fn shared(systems: Systems) -> Self {
        Self { systems, max_age: DEFAULT_MAX_AGE }
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

    async fn handle(&self, task: TaskContext, delivery: Delivery) -> Result<(), DeliveryError> {
        let system = self.systems.get(&delivery.system);
        if let Some(by) = delivery.send_by(system.as_ref(), self.max_age) {
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
        let request = match system.open_delivery(key, &delivery) {
            Ok(request) => request,
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
        let response =
            system.send(Operation::KeyedWrite(key), request).instrument(span).await.map_err(|failure| {
                if matches!(failure, Failure::Rejected { attempts: 0, .. }) {
                    task.not_attempted();
                }
                DeliveryError::Failed {
                    system: delivery.system.clone(),
                    dedupes_by_key: system.dedupes_by_key(),
                    failure,
                }
            })?;
        if let Some(verdict) = response.verdict() {
            return Err(DeliveryError::Answered {
                system: delivery.system.clone(),
                dedupes_by_key: system.dedupes_by_key(),
                status: response.status(),
                verdict,
                attempts: response.attempts(),
            });
        }
        tracing::info!(
            system = %delivery.system,
            task_id = task.id(),
            attempt = task.attempt(),
            status = response.status().as_u16(),
            "deferred write delivered"
        );
        // A status always serializes; the task completes either way.
        let _ = task.set_result(&DeliveryResult { status: response.status().as_u16() });
        Ok(())
    }
}

fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What a delivered [`Delivery`] task stores as its result
/// ([`TaskInfo::result`](ballast_queue::TaskInfo::result)): the upstream's
/// final answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryResult {
    /// The HTTP status the upstream answered the delivering attempt with.
    pub status: u16,
}

/// Why a [`DeliveryHandler`] attempt did not deliver.
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

/// What ended a delivery that was never sent: see [`Delivery::send_by`].
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

impl Classify for DeliveryError {
    fn classify(&self) -> Classification {
        let (dedupes_by_key, failure) = match self {
            DeliveryError::Answered { dedupes_by_key: true, verdict, .. } if verdict.is_transient() => {
                return *verdict;
            }
            DeliveryError::Answered { .. } => return Classification::permanent(),
            DeliveryError::Failed { dedupes_by_key, failure, .. } => (dedupes_by_key, failure),
            DeliveryError::UnknownSystem { .. } => {
                return Classification::transient().with_retry_after(HOLD_UNKNOWN)
            }
            DeliveryError::Sealed { .. } => return Classification::transient().with_retry_after(HOLD_SEALED),
            _ => return Classification::permanent(),
        };
        match failure {
            // Nothing was sent: safe to try again whatever the system's contract.
            Failure::Rejected { rejection, .. } => match rejection.retry_in() {
                Some(retry_in) => Classification::transient().with_retry_after(retry_in),
                None => Classification::transient(),
            },
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
