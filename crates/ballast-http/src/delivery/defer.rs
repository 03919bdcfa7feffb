//! Deferring a keyed write: [`HttpSystem::capture`] turns the request into
//! a [`Delivery`](crate::Delivery), and [`HttpSystem::write_or_defer`] tries it in memory and
//! hands it to the queue with its key when the in-memory window cannot
//! finish it (R-RES-RE-4).

use std::time::SystemTime;

use ballast::{Failure, IdempotencyKey, Operation};
use ballast_queue::{Handover, HandoverError, Queue};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use crate::seal::SealError;
use crate::{Fingerprint, HttpError, HttpSystem, Request, Response};

use super::wire::Envelope;
use super::{Body, DeferredBecause, Delivery, DELIVERY_KIND};

/// What a deferred write asks for besides its request.
///
/// ```
/// use ballast_http::delivery::DeferOptions;
///
/// let options = DeferOptions::default().callback("https://hooks.shop.example/ballast");
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default)]
pub struct DeferOptions {
    callback: Option<String>,
}

impl DeferOptions {
    /// `POST`ed to, signed, when the deferred task ends for good (see
    /// [`callback`](super::callback)): a worker must run a
    /// [`CallbackHandler`](super::CallbackHandler) whose
    /// [policy](super::CallbackPolicy) allows it. Unused when the write is
    /// not deferred: its caller has the answer.
    pub fn callback(mut self, url: impl Into<String>) -> Self {
        self.callback = Some(url.into());
        self
    }
}

impl HttpSystem {
    /// `request` as a [`Delivery`](crate::Delivery) to store for a later send with `key`:
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
    /// full), enqueues a [`Delivery`](crate::Delivery) task with the same `key` ([`capture`](Self::capture)d
    /// before the first attempt, trace context included) so a worker running
    /// a [`DeliveryHandler`](crate::DeliveryHandler) finishes it, and returns [`Handover::Deferred`]
    /// — the semantics of [`ballast_queue::WriteOrDefer`].
    ///
    /// Every other answer is [`Handover::Done`], as it came: a 201, and a 4xx
    /// too (a contract error, R-RES-RE-X2, is never deferred; its
    /// [`verdict`](Response::verdict) says so). A task deferred because the
    /// breaker is open is due when the breaker lets its next probe through.
    /// A system that does not [deduplicate by key](crate::HttpSystemBuilder::dedupes_by_key)
    /// never defers: a durable retry of a write needs that guarantee (R-RES-RE-1).
    ///
    /// A task already deferred under `key` decides first: the same request
    /// ([`Fingerprint`]) while it waits is that task, [`Handover::Deferred`]
    /// with nothing sent; another request is refused unsent
    /// ([`HttpError::KeyReused`]) and never handed the task.
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
        self.write_or_defer_planned_with(plan, queue, request, &DeferOptions::default()).await
    }

    /// [`write_or_defer`](Self::write_or_defer), with what a deferred task
    /// asks for besides its request ([`DeferOptions`]): a callback when it ends.
    pub async fn write_or_defer_with(
        &self,
        key: &IdempotencyKey,
        queue: &Queue,
        request: Request,
        options: &DeferOptions,
    ) -> Result<Handover<Response>, HandoverError<HttpError>> {
        match self.plan(Operation::KeyedWrite(key), &request) {
            Ok(plan) => self.write_or_defer_planned_with(plan, queue, request, options).await,
            Err(e) => Err(HandoverError::Failed(Failure::unsent(e))),
        }
    }

    /// [`write_or_defer_planned`](Self::write_or_defer_planned) with [`DeferOptions`].
    pub async fn write_or_defer_planned_with(
        &self,
        plan: crate::Plan<'_>,
        queue: &Queue,
        request: Request,
        options: &DeferOptions,
    ) -> Result<Handover<Response>, HandoverError<HttpError>> {
        let Some(key) = plan.operation().key().filter(|_| plan.is_deduplicated_write()) else {
            let sent = self.send_planned(plan, request).await;
            return sent.map(Handover::Done).map_err(HandoverError::Failed);
        };
        // Captured before sending: a request that cannot be stored is refused
        // unsent rather than found out after an attempt that may have applied it.
        let (mut delivery, send_by, fingerprint) = match self.capture(key, &request) {
            Ok(mut delivery) => {
                delivery.callback =
                    options.callback.clone().or_else(|| self.default_callback().map(str::to_owned));
                let send_by = delivery.send_by(Some(self), queue.schedule().max_age);
                let fingerprint = delivery.fingerprint.clone().unwrap_or_else(|| Fingerprint::of(&request));
                (delivery, send_by, fingerprint)
            }
            Err(error) => return Err(HandoverError::Failed(Failure::unsent(error))),
        };
        if let Some(joined) = deferred_with(queue, key, &fingerprint).await? {
            return Ok(joined);
        }
        let sequence = plan.sequence(&request);
        if let Some(sequence) = sequence.as_deref() {
            // Sent live it would overtake the earlier write: enqueued behind it.
            if let Some(head) = sequence_head(queue, sequence).await? {
                let pending = HttpError::SequencePending { sequence: sequence.to_owned(), task_id: head };
                delivery.deferred_because = Some(DeferredBecause::SequencePending);
                return match queue.enqueue(delivery.task(key).sequence(sequence)).await {
                    Ok(outcome) => {
                        tracing::info!(
                            task_id = outcome.id,
                            behind = head,
                            sequence,
                            "write deferred behind its sequence"
                        );
                        Ok(Handover::Deferred { task_id: outcome.id, attempts: 0 })
                    }
                    Err(error) => Err(HandoverError::Enqueue { failure: Failure::unsent(pending), error }),
                };
            }
        }
        let follow = plan.route().and_then(|r| r.followed()).cloned();
        let path = request.path().to_owned();
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
        let accepted = match (&outcome, follow) {
            (Ok(answer), Some(follow)) => super::Following::accepted(self, &follow, &path, answer),
            _ => None,
        };
        if let Some(following) = accepted {
            let accepted = Accepted { following, fingerprint: &fingerprint, answer: outcome };
            return self.follow_accepted(queue, key, delivery, sequence.as_deref(), accepted).await;
        }
        delivery.deferred_because = outcome.as_ref().err().map(DeferredBecause::of);
        let mut task = delivery.task(key);
        if let Some(sequence) = sequence.as_deref() {
            task = task.sequence(sequence);
        }
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
        let handed = ballast_queue::hand_over(queue, key, task, outcome).await?;
        if let Handover::Deferred { task_id, .. } = handed {
            // Another request with this key deferred between the look above
            // and this one's enqueue: its task is not this request's.
            if let Ok(Some(task)) = queue.get(task_id).await {
                if stored_fingerprint(&task).is_some_and(|stored| stored != fingerprint.as_str()) {
                    return Err(reused(key));
                }
            }
        }
        Ok(handed)
    }
}

/// A write the system accepted with a 202 to follow: where its status is,
/// the request's fingerprint, and the 202.
struct Accepted<'a> {
    following: super::Following,
    fingerprint: &'a Fingerprint,
    answer: Result<Response, Failure<HttpError>>,
}

impl HttpSystem {
    /// A write the system accepted with a 202 whose operation its route
    /// follows: handed to the queue to be followed, the 202 kept for a
    /// caller if the queue cannot take it.
    async fn follow_accepted(
        &self,
        queue: &Queue,
        key: &IdempotencyKey,
        mut delivery: Delivery,
        sequence: Option<&str>,
        accepted: Accepted<'_>,
    ) -> Result<Handover<Response>, HandoverError<HttpError>> {
        let Accepted { following, fingerprint, answer: accepted } = accepted;
        let first_look =
            accepted.as_ref().ok().map(|answer| following.first_look(answer)).unwrap_or_default();
        delivery.deferred_because = Some(DeferredBecause::Accepted);
        delivery.following = Some(following);
        let mut task = delivery.task(key).run_after(first_look);
        if let Some(sequence) = sequence {
            task = task.sequence(sequence);
        }
        match queue.enqueue(task).await {
            Ok(outcome) => {
                // Another request with this key deferred first: its task is not this one's.
                if !outcome.created {
                    if let Ok(Some(task)) = queue.get(outcome.id).await {
                        if stored_fingerprint(&task).is_some_and(|stored| stored != fingerprint.as_str()) {
                            return Err(reused(key));
                        }
                    }
                }
                tracing::info!(
                    task_id = outcome.id,
                    system = self.name(),
                    "operation accepted; the worker follows it"
                );
                let attempts = accepted.as_ref().map_or(0, Response::attempts);
                Ok(Handover::Deferred { task_id: outcome.id, attempts })
            }
            Err(error) => {
                // The 202 stays the caller's: the operation goes on at the system.
                tracing::warn!(%error, system = self.name(), "an accepted operation cannot be followed: the queue did not take it; the 202 is the answer");
                accepted.map(Handover::Done).map_err(HandoverError::Failed)
            }
        }
    }
}

/// The task that holds `sequence` in the queue, if one does.
async fn sequence_head(queue: &Queue, sequence: &str) -> Result<Option<i64>, HandoverError<HttpError>> {
    let unsent = |reason: String| Failure::unsent(HttpError::InvalidRequest { reason });
    if let Err(error) = ballast_queue::check_sequence(sequence) {
        return Err(HandoverError::Failed(unsent(error.to_string())));
    }
    queue.sequence_head(sequence).await.map_err(|error| HandoverError::Enqueue {
        failure: unsent(format!("the queue cannot say whether a write of sequence {sequence:?} waits")),
        error,
    })
}

/// A task already deferred with `key`. The same request's, still to be
/// delivered, is joined: its handle, nothing sent. Another request's
/// refuses this one unsent (R-RES-RE-1). A finished task of the same
/// request lets it go out again: the system deduplicates by the key.
async fn deferred_with(
    queue: &Queue,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
) -> Result<Option<Handover<Response>>, HandoverError<HttpError>> {
    let task = match queue.get_by_key(DELIVERY_KIND, key.as_str()).await {
        Ok(Some(task)) => task,
        Ok(None) => return Ok(None),
        Err(error) => {
            // The enqueue, if the write comes to one, meets the same queue.
            tracing::warn!(%error, "cannot look for a deferred write with the same key; sending it");
            return Ok(None);
        }
    };
    match stored_fingerprint(&task) {
        Some(stored) if stored != fingerprint.as_str() => Err(reused(key)),
        _ if !task.state.is_final() => Ok(Some(Handover::Deferred { task_id: task.id, attempts: 0 })),
        _ => Ok(None),
    }
}

fn stored_fingerprint(task: &ballast_queue::TaskInfo) -> Option<&str> {
    task.payload.get("fingerprint").and_then(serde_json::Value::as_str)
}

fn reused(key: &IdempotencyKey) -> HandoverError<HttpError> {
    let error = HttpError::KeyReused { key: key.as_str().to_owned(), first_in: "deferred" };
    HandoverError::Failed(Failure::unsent(error))
}
