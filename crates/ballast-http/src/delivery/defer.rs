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
        self.capture_with(key, request, &DeferOptions::default())
    }

    /// [`capture`](Self::capture), with what the task asks for besides its
    /// request: its callback URL, sealed in the envelope with a seal key
    /// (its query may hold the receiver's token). Without a seal key, the
    /// fingerprint, the caller's digest and the handle's secret are kept
    /// as they are; with one, the fingerprint and the caller's digest are
    /// keyed under it and the handle's secret is not stored at all
    /// ([`HttpSystem::handle`]): a reader of the queue's table can neither
    /// test a guess of the body nor make a handle.
    pub fn capture_with(
        &self,
        key: &IdempotencyKey,
        request: &Request,
        options: &DeferOptions,
    ) -> Result<Delivery, HttpError> {
        let mut delivery = Delivery::from_request(self.name(), request)?;
        let callback = options.callback.clone();
        delivery.caller = Some(self.caller(request).stored(self.name(), self.seal_key()));
        let sealed = self.sealed_headers();
        let (secret, plain): (Vec<_>, Vec<_>) = std::mem::take(&mut delivery.headers)
            .into_iter()
            .partition(|(name, _)| sealed.iter().any(|s| s.as_str().eq_ignore_ascii_case(name)));
        delivery.headers = plain;
        #[cfg(feature = "otel")]
        crate::otel::store(&mut delivery.headers);
        let Some(seal) = self.seal_key() else {
            if let Some((name, _)) = secret.first() {
                return Err(HttpError::SealKeyMissing { header: name.clone() });
            }
            let mut access = [0u8; 16];
            rand::RngCore::fill_bytes(&mut rand::rng(), &mut access);
            delivery.access = Some(access.iter().map(|b| format!("{b:02x}")).collect());
            delivery.callback = callback;
            return Ok(delivery);
        };
        delivery.fingerprint = Some(Fingerprint::sealed(seal, self.name(), request));
        let envelope = Envelope {
            headers: secret,
            body: (!request.body.is_empty()).then(|| BASE64.encode(&request.body)),
            raw_query: delivery.raw_query.take(),
            query: std::mem::take(&mut delivery.query),
            callback,
        };
        delivery.sealed_parts = envelope.headers.iter().map(|(name, _)| name.clone()).collect();
        if envelope.body.is_some() {
            delivery.sealed_parts.push("body".to_owned());
        }
        if envelope.raw_query.is_some() || !envelope.query.is_empty() {
            delivery.sealed_parts.push("query".to_owned());
        }
        if envelope.callback.is_some() {
            delivery.sealed_parts.push("callback".to_owned());
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
        if let Some(envelope) = self.open_envelope(key, delivery)? {
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

    /// The envelope of a sealed `delivery`, opened; `None` when it has none.
    fn open_envelope(
        &self,
        key: &IdempotencyKey,
        delivery: &Delivery,
    ) -> Result<Option<Envelope>, HttpError> {
        let Some(sealed) = &delivery.sealed else { return Ok(None) };
        let unsealed = |source| HttpError::Unseal { part: "envelope".to_owned(), source };
        let seal = self.seal_key().ok_or(unsealed(SealError::NoKey))?;
        let opened =
            seal.open(delivery.seal_key.as_deref(), &delivery.bound(key), sealed).map_err(unsealed)?;
        serde_json::from_slice(&opened)
            .map(Some)
            .map_err(|e| HttpError::invalid(format!("the sealed envelope: {e}")))
    }

    /// Where `delivery` (stored with `key`) asks to be told of its end:
    /// its callback URL, from its envelope when it is sealed there.
    pub fn callback_of(
        &self,
        key: &IdempotencyKey,
        delivery: &Delivery,
    ) -> Result<Option<String>, HttpError> {
        if delivery.callback.is_some() || !delivery.sealed_parts.iter().any(|part| part == "callback") {
            return Ok(delivery.callback.clone());
        }
        Ok(self.open_envelope(key, delivery)?.and_then(|envelope| envelope.callback))
    }

    /// The handle of task `task_id`, which holds `delivery` with `key`:
    /// `{task_id}.{secret}`. The secret is the stored one of a delivery
    /// stored without a seal key; with one, it is made from the key that
    /// sealed the delivery, the system, the idempotency key and the task
    /// id, and never stored. `None` when the delivery has no secret, or
    /// the key that sealed it is no longer configured.
    pub fn handle(&self, key: &IdempotencyKey, delivery: &Delivery, task_id: i64) -> Option<String> {
        if let Some(handle) = delivery.handle(task_id) {
            return Some(handle);
        }
        let seal = self.seal_key().filter(|_| delivery.sealed.is_some())?;
        let id = task_id.to_string();
        let parts = [self.name().as_bytes(), key.as_str().as_bytes(), id.as_bytes()];
        let secret = seal.secret(delivery.seal_key.as_deref(), "ballast.handle", &parts)?;
        Some(format!("{task_id}.{secret}"))
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
    /// ([`HttpError::KeyReused`]) and never handed the task. Then the key
    /// is bound to the request for the system's `key_ttl`
    /// ([`HttpSystem::bind_key`]): another request the same caller sent
    /// under it within that life refuses this one unsent too.
    pub async fn write_or_defer(
        &self,
        key: &IdempotencyKey,
        queue: &Queue,
        request: Request,
    ) -> Result<Handover<Response>, HandoverError<HttpError>> {
        self.write_or_defer_with(key, queue, request, &DeferOptions::default()).await
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
        match self.plan_declared(Operation::KeyedWrite(key), &request) {
            Ok(plan) => self.write_or_defer_planned_with(plan, queue, request, options).await,
            Err(e) => Err(HandoverError::Failed(Failure::unsent(e))),
        }
    }

    /// [`write_or_defer_with`](Self::write_or_defer_with) of a request
    /// already planned: only a keyed write to a system that deduplicates by
    /// its key is ever deferred; any other plan is sent as it says.
    pub(crate) async fn write_or_defer_planned_with(
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
        let options = DeferOptions {
            callback: options.callback.clone().or_else(|| self.default_callback().map(str::to_owned)),
        };
        let (mut delivery, send_by) = match self.capture_with(key, &request, &options) {
            Ok(delivery) => {
                let send_by = delivery.send_by(Some(self), queue.schedule().max_age);
                (delivery, send_by)
            }
            Err(error) => return Err(HandoverError::Failed(Failure::unsent(error))),
        };
        let asking = Asking { asks: crate::fingerprint::digest(&request), caller: self.caller(&request) };
        if let Some(joined) = self.deferred_with(queue, key, &asking).await? {
            return Ok(joined);
        }
        self.bind_digested(queue, key, &request, &asking.asks)
            .await
            .map_err(|e| HandoverError::Failed(Failure::unsent(e)))?;
        let named = plan.sequence(&request);
        let sequence = match named.as_deref() {
            Some(name) => Some(
                self.sequence_in(queue, name)
                    .await
                    .map_err(|error| HandoverError::Failed(Failure::unsent(error)))?,
            ),
            None => None,
        };
        if let (Some(name), Some(sequence)) = (named.as_deref(), sequence.as_deref()) {
            // Sent live it would overtake the earlier write: enqueued behind it.
            if let Some(head) = sequence_head(queue, name, sequence).await? {
                let pending = HttpError::SequencePending { sequence: name.to_owned(), task_id: head };
                delivery.deferred_because = Some(DeferredBecause::SequencePending);
                return match queue.enqueue(delivery.task(key).sequence(sequence)).await {
                    Ok(outcome) => {
                        tracing::info!(
                            task_id = outcome.id,
                            behind = head,
                            sequence = name,
                            system = self.name(),
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
            let accepted = Accepted { following, asking: &asking, answer: outcome };
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
        let due = outcome.as_ref().err().and_then(Failure::rejection).and_then(|r| r.background_retry_in());
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
                if let Some(error) = self.not_own_task(key, &task, &asking) {
                    return Err(HandoverError::Failed(Failure::unsent(error)));
                }
            }
        }
        Ok(handed)
    }
}

/// A write the system accepted with a 202 to follow: where its status is,
/// who asked for what, and the 202.
struct Accepted<'a> {
    following: super::Following,
    asking: &'a Asking,
    answer: Result<Response, Failure<HttpError>>,
}

/// A keyed write as the tasks already stored under its key are compared
/// with: what it asks for, and who asks.
struct Asking {
    /// Its fingerprint's digest ([`crate::fingerprint::digest`]).
    asks: [u8; 32],
    caller: crate::caller::Caller,
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
        let Accepted { following, asking, answer: accepted } = accepted;
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
                        if let Some(error) = self.not_own_task(key, &task, asking) {
                            return Err(HandoverError::Failed(Failure::unsent(error)));
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

/// The task that holds `sequence` (the route's `name` for it) in the queue, if one does.
async fn sequence_head(
    queue: &Queue,
    name: &str,
    sequence: &str,
) -> Result<Option<i64>, HandoverError<HttpError>> {
    queue.sequence_head(sequence).await.map_err(|error| HandoverError::Enqueue {
        failure: Failure::unsent(HttpError::InvalidRequest {
            reason: format!("the queue cannot say whether a write of sequence {name:?} waits"),
        }),
        error,
    })
}

impl HttpSystem {
    /// The name this system's sequence `name` has in the queue
    /// ([`NewTask::sequence`](ballast_queue::NewTask::sequence)): the
    /// system's own (`pay:customer/42`), so one system's writes never wait
    /// behind another's — unless writes stored before sequences were per
    /// system still hold the bare name for this system: they keep it until
    /// it drains, so the order holds across the upgrade. Refused
    /// ([`HttpError::InvalidRequest`]) when `name` is no sequence name.
    pub async fn sequence_in(&self, queue: &Queue, name: &str) -> Result<String, HttpError> {
        let refused = |reason: String| HttpError::InvalidRequest { reason };
        ballast_queue::check_sequence(name).map_err(|error| refused(error.to_string()))?;
        let own = format!("{}:{name}", super::kind_member(self.name()));
        ballast_queue::check_sequence(&own).map_err(|error| refused(error.to_string()))?;
        let legacy = match queue.sequence_head(name).await {
            Ok(Some(head)) => queue.get(head).await.ok().flatten(),
            _ => None,
        };
        let this_system = |task: &ballast_queue::TaskInfo| {
            task.payload.get("system").and_then(serde_json::Value::as_str) == Some(self.name())
        };
        Ok(if legacy.as_ref().is_some_and(this_system) { name.to_owned() } else { own })
    }
}

impl HttpSystem {
    /// A task already deferred to this system with `key`. The same
    /// caller's same request, still to be delivered, is joined: its handle,
    /// nothing sent. The same caller's other request is refused unsent
    /// (R-RES-RE-1). A finished task of the same request lets it go out
    /// again: the system deduplicates by the key. Another caller's task is
    /// neither joined nor a reason to refuse ([`crate::caller`]): the
    /// request goes its own way. Another system's task with the same key
    /// is not looked at: keys are the systems' own.
    async fn deferred_with(
        &self,
        queue: &Queue,
        key: &IdempotencyKey,
        asking: &Asking,
    ) -> Result<Option<Handover<Response>>, HandoverError<HttpError>> {
        let task = match task_with_key(queue, self.name(), key).await {
            Ok(Some(task)) => task,
            Ok(None) => return Ok(None),
            Err(error) => {
                // The enqueue, if the write comes to one, meets the same queue.
                tracing::warn!(%error, "cannot look for a deferred write with the same key; sending it");
                return Ok(None);
            }
        };
        if !self.same_caller(&task, asking) {
            return Ok(None);
        }
        if let Some(error) = self.not_own_task(key, &task, asking) {
            return Err(HandoverError::Failed(Failure::unsent(error)));
        }
        Ok((!task.state.is_final()).then_some(Handover::Deferred { task_id: task.id, attempts: 0 }))
    }

    /// Whether `task`, found under this request's key, is the same caller's.
    fn same_caller(&self, task: &ballast_queue::TaskInfo, asking: &Asking) -> bool {
        let stored = task.payload.get("caller").and_then(serde_json::Value::as_str);
        stored.is_some_and(|stored| asking.caller.is(stored, self.name(), self.seal_key()))
    }

    /// Why `task`, found under `key` for `asking`, is not its own — the
    /// same caller's same request — and the request is refused unsent;
    /// `None` when it is.
    fn not_own_task(
        &self,
        key: &IdempotencyKey,
        task: &ballast_queue::TaskInfo,
        asking: &Asking,
    ) -> Option<HttpError> {
        let first_in = if !self.same_caller(task, asking) {
            "deferred by another caller"
        } else {
            let stored = task.payload.get("fingerprint").and_then(serde_json::Value::as_str);
            let same = stored.is_none_or(|stored| {
                Fingerprint::from_stored(stored).is_of(self.name(), &asking.asks, self.seal_key())
            });
            if same {
                return None;
            }
            "deferred"
        };
        Some(HttpError::KeyReused { key: key.as_str().to_owned(), first_in })
    }
}

/// The delivery to `system` stored with `key`: of the system's own kind, or
/// of the kind every system's deliveries shared before, if it is `system`'s.
async fn task_with_key(
    queue: &Queue,
    system: &str,
    key: &IdempotencyKey,
) -> ballast_queue::Result<Option<ballast_queue::TaskInfo>> {
    if let Some(task) = queue.get_by_key(&super::delivery_kind(system), key.as_str()).await? {
        return Ok(Some(task));
    }
    let shared = queue.get_by_key(DELIVERY_KIND, key.as_str()).await?;
    Ok(shared.filter(|task| task.payload.get("system").and_then(serde_json::Value::as_str) == Some(system)))
}
