//! A planned call's run: its URI and headers prepared once, then each
//! attempt — sent, timed by the route, answered, judged — under the policy,
//! with the call's span and each attempt's (OpenTelemetry's HTTP client
//! conventions).

use std::time::Duration;

use ballast::Failure;
use http::HeaderMap;
use tracing::Instrument;

use super::HttpSystem;
use crate::in_flight::{joined, Turn};
use crate::plan::Plan;
use crate::request::{Head, Request, StreamingRequest};
use crate::routes::Route;
use crate::stream::{AnswerBody, Reading};
use crate::transport::{OutBody, TransportError};
use crate::verdict::{failed, AnswerJudge};
use crate::{Fingerprint, HttpError, Response};

impl HttpSystem {
    /// The one attempt of a write once whose body is a stream.
    pub(super) async fn run_streamed(
        &self,
        plan: Plan<'_>,
        request: StreamingRequest,
    ) -> Result<Response, Failure<HttpError>> {
        let head = &request.head;
        let Prepared { uri, headers, route_timeout } = self.prepare(head, &plan).map_err(Failure::unsent)?;
        let mut body = Some(request.body);
        let call = self.inner.system_policy.run(&plan, ballast::NoJudge, |ctx| {
            // A stream is sent once, so the body is always there.
            let body = body.take().map(OutBody::Stream);
            let (uri, headers) = (uri.clone(), headers.clone());
            async move {
                let body = body.ok_or_else(|| HttpError::invalid("a streaming body is sent once"))?;
                let which = Which {
                    // Sent once: its answer judged as an unkeyed write's.
                    judge: AnswerJudge::new(self.retry_on(), false),
                    attempt: ctx.attempt(),
                    route_timeout,
                    reading: self.reading(head.stream_past),
                    gate: None,
                };
                let attempt = self.attempt(&head.method, uri, headers, body, which);
                unknown_if_panicked(attempt).await.and_then(failed)
            }
        });
        let span = self.call_span(head, &uri);
        let result = call.instrument(span.clone()).await;
        record_outcome(&span, &result);
        result
    }

    /// The call of a plan. A keyed write first takes its turn among the
    /// writes in flight with its key ([`crate::in_flight`]): the same request
    /// in flight is joined, another under the same key refused unsent.
    pub(super) async fn run(
        &self,
        plan: Plan<'_>,
        request: Request,
        judged: bool,
    ) -> Result<Response, Failure<HttpError>> {
        let Some(key) = plan.operation().key() else {
            return self.run_alone(plan, request, judged).await;
        };
        let fingerprint = Fingerprint::of(&request);
        let caller = self.caller(&request);
        loop {
            match self.inner.in_flight.turn(key.as_str(), &fingerprint, &caller) {
                Err(reused) => return Err(Failure::unsent(reused)),
                Ok(Turn::Alone) => return self.run_alone(plan, request, judged).await,
                Ok(Turn::Join(answer)) => {
                    if let Some(answer) = joined(answer).await {
                        return Ok(answer);
                    }
                }
                Ok(Turn::Lead(lead)) => {
                    let result = self.run_alone(plan, request, judged).await;
                    lead.land(result.as_ref().ok().filter(|answer| answer.verdict.is_none()));
                    return result;
                }
            }
        }
    }

    /// The call of a plan, on its own.
    async fn run_alone(
        &self,
        plan: Plan<'_>,
        request: Request,
        judged: bool,
    ) -> Result<Response, Failure<HttpError>> {
        let head = &request.head;
        let Prepared { uri, headers, route_timeout } = self.prepare(head, &plan).map_err(Failure::unsent)?;
        let judge = plan.judge(self.retry_on());
        // A keyed write's answer is shared with its joiners: always whole.
        let reading = self.reading(head.stream_past.filter(|_| plan.operation().key().is_none()));
        let body = &request.body;
        let attempt = |ctx: ballast::AttemptContext| {
            let (uri, headers, body) = (uri.clone(), headers.clone(), OutBody::Full(body.clone()));
            let gate = request.gate.clone();
            let which = Which { judge, attempt: ctx.attempt(), route_timeout, reading, gate };
            // Boxed where it is made: the attempt's state is kilobytes
            // (the client's request future within it), and the layers
            // that wrap it — the panic guard, the judge, the policy's
            // call — would otherwise each move it whole.
            unknown_if_panicked(Box::pin(self.attempt(&head.method, uri, headers, body, which)))
        };
        let policy = &self.inner.system_policy;
        // One span (none without a subscriber that wants it) and the call
        // awaited in place: a future moved into a helper would be kept
        // twice in this one's state.
        let span = self.call_span(head, &uri);
        // Judged, a failed answer stays an answer; else it is an error.
        let judge = move |answer: &Response| if judged { answer.verdict } else { None };
        let attempt = |ctx| {
            futures_util::FutureExt::map(attempt(ctx), move |outcome| {
                outcome.and_then(|answer| if judged { Ok(answer) } else { failed(answer) })
            })
        };
        let result = policy.run(&plan, judge, attempt).instrument(span.clone()).await;
        if let Some(answer) = result.as_ref().ok().filter(|a| a.verdict.is_some()) {
            policy.answered_failure(answer.status);
        }
        if let Some(index) = plan.index() {
            let answered = match &result {
                Ok(answer) => Some(answer.verdict.is_none()),
                Err(failure) => failure.error().and_then(HttpError::status).map(|_| false),
            };
            self.inner.route_calls.record(index, answered);
        }
        record_outcome(&span, &result);
        result
    }

    /// The call's span, following OpenTelemetry's HTTP client conventions
    /// (the call is internal, each attempt a client span of its own):
    /// disabled unless a subscriber wants it.
    pub(super) fn call_span(&self, head: &Head, uri: &http::Uri) -> tracing::Span {
        if !tracing::dispatcher::has_been_set() {
            return tracing::Span::none();
        }
        tracing::info_span!(
            "ballast.http",
            ballast.system = %self.name(),
            http.request.method = %head.method,
            url.full = %self.shown_uri(uri),
            http.response.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
        )
    }

    /// What every attempt sends, or why the request cannot be sent. A
    /// method-override header stays only when the request reached its route
    /// through it.
    /// Whether a request with `head` can be sent at all: the errors
    /// [`prepare`](Self::prepare) would refuse it with for its own sake.
    #[cfg(feature = "queue")]
    pub(crate) fn check_sendable(&self, head: &Head) -> Result<(), HttpError> {
        head.check()?;
        self.inner.base.uri(head).map(drop)
    }

    fn prepare(&self, head: &Head, plan: &Plan<'_>) -> Result<Prepared, HttpError> {
        head.check()?;
        let uri = self.inner.base.uri(head)?;
        let mut headers = head.headers.clone();
        if !plan.reached.by_override {
            for name in crate::routes::METHOD_OVERRIDE_HEADERS {
                headers.remove(name);
            }
        }
        for (name, value) in &self.inner.headers {
            headers.insert(name, value.clone());
        }
        self.inner.system_policy.set_key(plan, &mut headers)?;
        Ok(Prepared { uri, headers, route_timeout: plan.route().and_then(Route::attempt_timeout) })
    }

    /// Tells an adaptive rate limit what the answer's headers say of the
    /// system's limit (see `rate_headers`).
    fn learn_rate(&self, headers: &HeaderMap) {
        let Some(limiter) = self.policy().rate_limiter().filter(|l| l.limit().is_adaptive()) else { return };
        let announced = crate::rate_headers::read(headers, std::time::SystemTime::now());
        if let Some(rate) = announced.rate {
            limiter.announce_for(rate, announced.window);
        }
        if let Some(spent_for) = announced.spent_for {
            limiter.hold_until(tokio::time::Instant::now() + spent_for);
        }
    }

    /// One attempt: send, read the whole body, judge the answer.
    async fn attempt(
        &self,
        method: &http::Method,
        uri: http::Uri,
        headers: HeaderMap,
        body: OutBody,
        which: Which,
    ) -> Result<Response, HttpError> {
        let Which { judge, attempt, route_timeout, gate, .. } = which;
        if let Some(gate) = &gate {
            gate.check()?;
        }
        let retry_on = self.retry_on();
        let secret_url = self.inner.secret_url;
        let mut request = http::Request::new(body);
        *request.method_mut() = method.clone();
        *request.headers_mut() = headers;
        let span = tracing::dispatcher::has_been_set().then(|| {
            let span = tracing::debug_span!(
                "ballast.http.attempt",
                otel.kind = "client",
                http.request.method = %method,
                server.address = self.inner.base.url.host_str().unwrap_or_default(),
                server.port = self.inner.base.url.port_or_known_default().map(i64::from),
                url.full = %self.shown_uri(&uri),
                http.request.resend_count = tracing::field::Empty,
                http.response.status_code = tracing::field::Empty,
                error.type = tracing::field::Empty,
                otel.status_code = tracing::field::Empty,
            );
            if attempt > 1 {
                span.record("http.request.resend_count", i64::from(attempt - 1));
            }
            span
        });
        let span = span.filter(|span| !span.is_disabled());
        let shown = uri.clone();
        *request.uri_mut() = uri;
        // Replaces a trace context the caller sent: the upstream's parent is this attempt.
        #[cfg(feature = "otel")]
        if let Some(trace) = span.as_ref().and_then(crate::otel::trace_headers) {
            request.headers_mut().extend(trace);
        }
        let sent = self.send_credentialed(request, which.reading, gate.as_ref());
        // A route's own attempt timeout, inside the system's: the answer's
        // head and body within it, or the attempt failed as a read timeout.
        let sent = async move {
            match route_timeout {
                None => sent.await,
                Some(limit) => tokio::time::timeout(limit, sent).await.unwrap_or_else(|_| {
                    let why = format!("no whole answer within the route's attempt timeout of {limit:?}");
                    Err(TransportError::new(crate::classify::TransportKind::ReadTimeout, why))
                }),
            }
        };
        let result = match &span {
            Some(span) => sent.instrument(span.clone()).await,
            None => sent.await,
        };
        let result = match result {
            Ok(answer) => {
                let (parts, body) = answer.into_parts();
                let (body, rest) = match body {
                    AnswerBody::Whole(body) => (body, None),
                    AnswerBody::Streaming(head, rest) => {
                        // The attempt ends here, the answer does not: it
                        // counts against the bulkhead until it has come.
                        rest.bound(self.inner.stream_timeout, self.policy().hold_bulkhead_slot());
                        (head, Some(rest))
                    }
                };
                self.learn_rate(&parts.headers);
                if parts.status == http::StatusCode::TOO_MANY_REQUESTS {
                    self.inner.system_policy.throttled();
                }
                let verdict = judge.verdict(parts.status, &parts.headers);
                Ok(Response {
                    status: parts.status,
                    headers: parts.headers,
                    body,
                    attempts: attempt,
                    verdict,
                    rest,
                })
            }
            Err(e) => {
                let class = retry_on.transport_class(e.kind);
                Err(HttpError::transport(e.kind, class, self.error_uri(&shown), e.source, secret_url))
            }
        };
        if let Some(span) = span {
            // A client span's status is an error for every 4xx and 5xx (the conventions).
            match &result {
                Ok(response) => {
                    span.record("http.response.status_code", i64::from(response.status.as_u16()));
                    if response.verdict.is_some() {
                        span.record("error.type", response.status.as_str());
                        span.record("otel.status_code", "ERROR");
                    }
                }
                Err(HttpError::Transport { kind, .. }) => {
                    span.record("error.type", kind.as_str());
                    span.record("otel.status_code", "ERROR");
                }
                Err(_) => {
                    span.record("error.type", "other");
                    span.record("otel.status_code", "ERROR");
                }
            }
        }
        result
    }
}

impl HttpSystem {
    /// How an answer is read: past `stream_past` bytes streamed, or whole
    /// up to the system's `max_answer`.
    fn reading(&self, stream_past: Option<usize>) -> Reading {
        match stream_past {
            Some(buffer) => Reading::StreamPast(buffer),
            None => Reading::Whole(self.inner.max_answer),
        }
    }

    /// Sends `request` with the system's access token, when it has an OAuth
    /// 2.0 grant: asked for just before sending, so it is never older than
    /// the grant allows. A `401` answer means the system refused the
    /// request unapplied: the token is renewed and a buffered request sent
    /// again, once; a second `401` is the answer.
    async fn send_credentialed(
        &self,
        mut request: http::Request<OutBody>,
        reading: Reading,
        gate: Option<&crate::SendGate>,
    ) -> Result<http::Response<AnswerBody>, TransportError> {
        let transport = &self.inner.transport;
        let Some(tokens) = &self.inner.tokens else { return transport.send(request, reading).await };
        let token = |e: crate::credential::TokenError| TransportError::new(e.kind(), e);
        let bearer = tokens.bearer().await.map_err(token)?;
        request.headers_mut().insert(http::header::AUTHORIZATION, bearer.value.clone());
        let again = match request.body() {
            OutBody::Full(body) => Some((
                request.method().clone(),
                request.uri().clone(),
                request.headers().clone(),
                body.clone(),
            )),
            OutBody::Stream(_) => None,
        };
        let answer = transport.send(request, reading).await?;
        let Some((method, uri, headers, body)) = again
            .filter(|_| answer.status() == http::StatusCode::UNAUTHORIZED)
            .filter(|_| gate.is_none_or(|gate| gate.check().is_ok()))
        else {
            // A closed gate sends nothing more: the 401 is the answer.
            return Ok(answer);
        };
        drop(answer);
        tokens.invalidate(&bearer);
        let renewed = tokens.bearer().await.map_err(token)?;
        tracing::info!(
            system = %self.name(),
            "the system answered 401 to the access token: renewed, and the attempt sent again once"
        );
        let mut resend = http::Request::new(OutBody::Full(body));
        *resend.method_mut() = method;
        *resend.uri_mut() = uri;
        *resend.headers_mut() = headers;
        resend.headers_mut().insert(http::header::AUTHORIZATION, renewed.value);
        transport.send(resend, reading).await
    }
}

/// `attempt`, with a panic inside it taken for what it is to the caller: an
/// attempt whose request may have been applied and whose outcome is unknown
/// ([`HttpError::Panicked`]), never a write that failed.
async fn unknown_if_panicked(
    attempt: impl std::future::Future<Output = Result<Response, HttpError>>,
) -> Result<Response, HttpError> {
    match futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(attempt)).await {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            tracing::error!(%message, "an attempt panicked; its outcome is unknown and it is classified as transient");
            Err(HttpError::Panicked { message })
        }
    }
}

/// Records a call's final status on its span.
fn record_outcome(span: &tracing::Span, result: &Result<Response, Failure<HttpError>>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(response) => {
            span.record("http.response.status_code", i64::from(response.status().as_u16()));
            if response.verdict.is_some() {
                span.record("error.type", response.status().as_str());
            }
        }
        Err(failure) => {
            if let Some(status) = failure.error().and_then(HttpError::status) {
                span.record("http.response.status_code", i64::from(status.as_u16()));
            }
            span.record("error.type", failure.error_type());
        }
    }
}

/// What every attempt of a call sends: its URI and headers, prepared once,
/// and its route's own attempt timeout.
struct Prepared {
    uri: http::Uri,
    headers: HeaderMap,
    route_timeout: Option<Duration>,
}

/// Which attempt of which call: what an attempt needs besides its request.
#[derive(Clone)]
struct Which {
    /// What its answer is: a success, or a failure of a class.
    judge: AnswerJudge,
    /// The attempt, from 1.
    attempt: u32,
    /// The route's own attempt timeout, if any.
    route_timeout: Option<Duration>,
    /// How much of the answer is read: whole up to the system's
    /// `max_answer`, or past a buffer streamed.
    reading: Reading,
    /// Checked right before the attempt is sent ([`crate::SendGate`]).
    gate: Option<crate::SendGate>,
}
