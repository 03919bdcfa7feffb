//! One external system: its base URL, its own transport and connection
//! pool, and its policy — one composition per system (R-RES-RE-2). The
//! system and its entry points are here; its builder, its base URL and the
//! run of a planned call have rooms of their own.

mod attempt;
mod base;
mod builder;
#[cfg(feature = "queue")]
mod deferral;

use std::sync::Arc;
use std::time::Duration;

use ballast::{BreakerState, Failure, IdempotencyKey, Operation, Policy};
use http::HeaderMap;

pub use builder::HttpSystemBuilder;

use base::Base;

use crate::plan::{Declared, Line, Plan, Planner};
use crate::request::{Head, OnceRequest};
use crate::routes::{Route, Routes, Unrouted};
use crate::system_policy::SystemPolicy;
use crate::transport::Transport;
use crate::{HttpError, Request, Response, RetryOn};

/// One external system: its own transport and connection pool (a pooled
/// hyper client over rustls, or your own reqwest client; no client-level
/// retries; connect and read timeouts) and its [`Policy`].
///
/// Entry points mirror the policy's (R-RES-RE-1):
/// [`read`](HttpSystem::read) is retried on transient failures,
/// [`write`](HttpSystem::write) sends the idempotency key and is retried only
/// if the system [deduplicates by key](HttpSystemBuilder::dedupes_by_key),
/// [`write_once`](HttpSystem::write_once) makes exactly one attempt. They
/// hand a final 4xx or 5xx back as [`HttpError::Status`], which reads well in
/// an adapter; [`send`](HttpSystem::send) hands every answer back as an
/// answer, for a proxy.
///
/// Cloning is cheap and clones share the transport, the pool and the policy.
#[derive(Debug, Clone)]
pub struct HttpSystem {
    inner: Arc<SystemState>,
}

#[derive(Debug)]
struct SystemState {
    base: Base,
    routes: Routes,
    unrouted: Unrouted,
    route_calls: crate::metrics::RouteCounters,
    transport: Transport,
    /// The access tokens of an OAuth 2.0 grant, when the system has one.
    tokens: Option<Arc<crate::credential::Tokens>>,
    /// The most of an answer read whole.
    max_answer: usize,
    /// The longest a streamed answer may take, all of it.
    stream_timeout: Duration,
    system_policy: SystemPolicy,
    critical: bool,
    key_ttl: Option<Duration>,
    headers: HeaderMap,
    secret_url: bool,
    /// The headers that say who is asking ([`crate::caller`]).
    caller_headers: Vec<http::header::HeaderName>,
    /// Keyed writes in flight, by key: joined or refused ([`crate::in_flight`]).
    in_flight: crate::in_flight::InFlight,
    /// What its deferred writes carry and keep.
    #[cfg(feature = "queue")]
    deferral: deferral::Deferral,
}

impl HttpSystem {
    /// Starts a system named `name` (used in spans, metrics and readiness)
    /// whose requests' paths are relative to `base_url`.
    ///
    /// A request's path is appended to the base URL's path, a leading `/`
    /// or not: with `https://gw.example/api/v2`, `Request::get("orders/7")`
    /// and `Request::get("/orders/7")` both go to
    /// `https://gw.example/api/v2/orders/7`; an empty path is the base URL
    /// itself, as given. Put query parameters in
    /// [`Request::query`]; a `?` in the path is sent encoded, as part of the path.
    pub fn builder(name: impl Into<String>, base_url: &str) -> HttpSystemBuilder {
        HttpSystemBuilder::new(name.into(), base_url)
    }

    /// The system's name.
    pub fn name(&self) -> &str {
        self.inner.system_policy.policy.name()
    }

    /// The system's policy.
    pub fn policy(&self) -> &Policy {
        &self.inner.system_policy.policy
    }

    /// Whether readiness depends on this system.
    pub fn is_critical(&self) -> bool {
        self.inner.critical
    }

    /// Whether keyed writes are retried.
    pub fn dedupes_by_key(&self) -> bool {
        self.inner.system_policy.dedupes_by_key
    }

    /// How long the system remembers a key, if declared
    /// ([`HttpSystemBuilder::key_ttl`]).
    pub fn key_ttl(&self) -> Option<Duration> {
        self.inner.key_ttl
    }

    /// The keys sealing and opening deferred writes, if configured.
    #[cfg(feature = "queue")]
    #[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
    pub fn seal_key(&self) -> Option<&crate::SealKey> {
        self.inner.deferral.seal.as_ref()
    }

    /// Who is asking with `request` ([`crate::caller`]).
    pub(crate) fn caller(&self, request: &crate::Request) -> crate::caller::Caller {
        crate::caller::Caller::of(request, &self.inner.caller_headers)
    }

    /// The headers sealed before a deferred write is stored.
    #[cfg(feature = "queue")]
    pub(crate) fn sealed_headers(&self) -> &[http::header::HeaderName] {
        &self.inner.deferral.sealed
    }

    /// `location` as a path under the base URL and its query (see
    /// `Base::under`).
    #[cfg(feature = "queue")]
    pub(crate) fn under_base(&self, request_path: &str, location: &str) -> Option<(String, Option<String>)> {
        self.inner.base.under(request_path, location)
    }

    /// How much of a deferred write's answer body is kept
    /// ([`HttpSystemBuilder::keep_answer`]).
    #[cfg(feature = "queue")]
    pub(crate) fn kept_answer_size(&self) -> usize {
        self.inner.deferral.keep_answer
    }

    /// The callback of deferred writes that name none
    /// ([`HttpSystemBuilder::default_callback`]).
    #[cfg(feature = "queue")]
    #[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
    pub fn default_callback(&self) -> Option<&str> {
        self.inner.deferral.callback.as_deref()
    }

    /// Whether every kept answer is sealed ([`HttpSystemBuilder::seal_answers`]).
    #[cfg(feature = "queue")]
    pub(crate) fn seals_answers(&self) -> bool {
        self.inner.deferral.seal_answers
    }

    /// `uri` as errors, logs and spans show it: without the query string
    /// (whose values may be secrets), and — for a system whose URL is a
    /// secret — without its path.
    fn shown_uri(&self, uri: &http::Uri) -> String {
        let path = if self.inner.secret_url { "/***" } else { uri.path() };
        format!("{}://{}{path}", self.inner.base.scheme, self.inner.base.authority)
    }

    /// `uri` as an error says where a request went: query values masked
    /// ([`ballast::redact_url`]), a secret URL's path hidden.
    fn error_uri(&self, uri: &http::Uri) -> String {
        if self.inner.secret_url {
            return self.shown_uri(uri);
        }
        ballast::redact_url(&uri.to_string())
    }

    /// Looks at the system's TLS files now and takes them if they changed
    /// (`ballast serve` does on SIGHUP); otherwise the next request looks,
    /// at most once a second.
    pub fn refresh_tls(&self) {
        if let Transport::Hyper(transport) = &self.inner.transport {
            transport.refresh_tls();
        }
    }

    /// What the client certificate the system presents says (its subject
    /// and the end of its validity), when it has one.
    pub fn client_cert(&self) -> Option<ballast_tls::CertFacts> {
        match &self.inner.transport {
            Transport::Hyper(transport) => transport.client_cert(),
            _ => None,
        }
    }

    /// The outcome classes treated as transient.
    pub fn retry_on(&self) -> RetryOn {
        self.inner.system_policy.retry_on
    }

    /// Calls, attempts and the last failure since the system was built.
    pub fn stats(&self) -> crate::CallStats {
        self.inner.system_policy.stats()
    }

    /// The breaker's state, if the policy has a breaker.
    pub fn breaker_state(&self) -> Option<BreakerState> {
        self.policy().breaker().map(|b| b.state())
    }

    /// The route `method path` (relative to the base URL) matches, if any.
    pub fn route(&self, method: &http::Method, path: &str) -> Option<&Route> {
        self.inner.routes.find(method, path)
    }

    /// The route a request with `headers` reaches: through a
    /// method-override header when that route allows it
    /// ([`Routes::reach`]), else by `method`.
    pub fn reach(&self, method: &http::Method, path: &str, headers: &HeaderMap) -> Option<&Route> {
        self.inner.routes.reach(method, path, headers).route()
    }

    /// What becomes of a write no route matches.
    pub fn unrouted(&self) -> Unrouted {
        self.inner.unrouted
    }

    /// The system's routes.
    pub fn routes(&self) -> &Routes {
        &self.inner.routes
    }

    /// Sends a request without side effects (GET, HEAD, OPTIONS or a
    /// [`Request::post_query`]), retried on transient failures. Any other
    /// request is refused unsent with [`Refused::NotARead`](crate::Refused::NotARead).
    pub async fn read(&self, request: Request) -> Result<Response, Failure<HttpError>> {
        self.call(Operation::Read, request, false).await
    }

    /// Sends a write carrying `key` in the idempotency header — the same key
    /// on every attempt. Retried on transient failures only if the system
    /// deduplicates by key; otherwise one attempt (R-RES-RE-1).
    ///
    /// A key names one request ([`Fingerprint`](crate::Fingerprint)): while
    /// a write with `key` is in flight on this system, the same request
    /// joins it and gets its answer (one call to the system), and another
    /// request is refused unsent with [`HttpError::KeyReused`].
    pub async fn write(
        &self,
        key: &IdempotencyKey,
        request: Request,
    ) -> Result<Response, Failure<HttpError>> {
        self.call(Operation::KeyedWrite(key), request, false).await
    }

    /// Sends `request` as `operation` declares it — read, keyed write or
    /// write once, with the same rules as [`read`](Self::read),
    /// [`write`](Self::write) and [`write_once`](Self::write_once) — and
    /// hands back every answer as an answer: a 503 after the last attempt,
    /// or a 404, is `Ok` with that [`Response`], whose
    /// [`verdict`](Response::verdict) says what the policy made of it.
    /// `Failure` means there was no answer to give (no connection, a
    /// timeout, the breaker open, the request refused unsent). What a proxy
    /// wants; an adapter usually reads better with the others.
    ///
    /// ```no_run
    /// # async fn f(crm: ballast_http::HttpSystem) {
    /// use ballast::Operation;
    /// use ballast_http::Request;
    ///
    /// match crm.send(Operation::Read, Request::get("leads/7")).await {
    ///     Ok(answer) if answer.verdict().is_none() => println!("{}", answer.text()),
    ///     Ok(answer) => println!("the CRM said {} after {} attempts", answer.status(), answer.attempts()),
    ///     Err(no_answer) => println!("no answer: {no_answer}"),
    /// }
    /// # }
    /// ```
    pub async fn send(
        &self,
        operation: Operation<'_>,
        request: Request,
    ) -> Result<Response, Failure<HttpError>> {
        self.call(operation, request, true).await
    }

    /// Sends a write without a key: exactly one attempt, never retried, even
    /// on a 5xx or a reset connection (R-RES-RE-X1). The only entry point that
    /// takes a [`StreamingRequest`](crate::StreamingRequest).
    pub async fn write_once(&self, request: impl Into<OnceRequest>) -> Result<Response, Failure<HttpError>> {
        match request.into() {
            OnceRequest::Buffered(request) => self.call(Operation::WriteOnce, request, false).await,
            OnceRequest::Streaming(request) => {
                let plan = match self.plan_head(&request.head, Declared::As(Operation::WriteOnce), false) {
                    Ok(plan) => plan.streamed(),
                    Err(e) => return Err(Failure::unsent(e)),
                };
                self.run_streamed(plan, request).await
            }
        }
    }

    /// One call: `judged` hands answers back as answers, else a final
    /// failed answer is [`HttpError::Status`].
    async fn call(
        &self,
        operation: Operation<'_>,
        request: Request,
        judged: bool,
    ) -> Result<Response, Failure<HttpError>> {
        match self.plan_declared(operation, &request) {
            Ok(plan) => self.run(plan, request, judged).await,
            Err(e) => Err(Failure::unsent(e)),
        }
    }

    /// What `head` is on this system ([`crate::plan`]); a refusal is
    /// counted for the route it reached (`unanswered`).
    fn plan_head<'a>(
        &'a self,
        head: &Head,
        declared: Declared<'a>,
        is_read: bool,
    ) -> Result<Plan<'a>, HttpError> {
        let planner = Planner {
            routes: &self.inner.routes,
            unrouted: self.inner.unrouted,
            dedupes_by_key: self.dedupes_by_key(),
        };
        let line = Line { method: &head.method, path: &head.path, headers: &head.headers, is_read };
        planner.plan(line, declared).map_err(|refused| {
            if let Some(index) = refused.route {
                self.inner.route_calls.record(index, None);
            }
            refused.error
        })
    }

    /// What `request`, declared by its caller as `operation`, is on this
    /// system ([`crate::plan`]): how [`read`](Self::read), [`write`](Self::write),
    /// [`write_once`](Self::write_once) and [`send`](Self::send) plan their
    /// calls, borrowing it ([`plan`](Self::plan) binds it to its request).
    pub(crate) fn plan_declared<'a>(
        &'a self,
        operation: Operation<'a>,
        request: &Request,
    ) -> Result<Plan<'a>, HttpError> {
        self.plan_head(&request.head, Declared::As(operation), request.is_read())
    }

    /// What a request nobody declared is on this system — by its route,
    /// else its method and `key` (the table in [`crate::plan`]), borrowing
    /// it ([`plan_forwarded`](Self::plan_forwarded) binds it to its request).
    pub(crate) fn plan_by_method<'a>(
        &'a self,
        request: &Request,
        key: Option<&'a IdempotencyKey>,
    ) -> Result<Plan<'a>, HttpError> {
        self.plan_head(&request.head, Declared::ByMethod(key), request.is_read())
    }

    /// Sends `request` as `plan` (made for it on this system) says, every
    /// answer handed back as an answer, as [`send`](Self::send) does.
    pub(crate) async fn send_planned(
        &self,
        plan: Plan<'_>,
        request: Request,
    ) -> Result<Response, Failure<HttpError>> {
        self.run(plan, request, true).await
    }
}
