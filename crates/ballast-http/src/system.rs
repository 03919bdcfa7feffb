//! One external system: its base URL, its own reqwest client and connection
//! pool, and its policy — one composition per system (R-RES-RE-2).

use std::sync::Arc;
use std::time::Duration;

use ballast::{BreakerState, Failure, IdempotencyKey, Policy, PolicyBuilder};
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use reqwest::Url;
use tracing::Instrument;

use crate::classify::{self, TransportKind};
use crate::request::{Head, OnceRequest};
use crate::system_policy::{CallKind, SystemPolicy};
use crate::{HttpError, Request, Response, RetryOn};

const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Builds an [`HttpSystem`]; see [`HttpSystem::builder`].
#[derive(Debug, Clone)]
pub struct HttpSystemBuilder {
    name: String,
    base_url: String,
    policy: PolicyBuilder,
    client: Option<reqwest::Client>,
    dedupes_by_key: bool,
    header: String,
    connect_timeout: Option<Duration>,
    read_timeout: Option<Duration>,
    retry_on: RetryOn,
    critical: bool,
    key_ttl: Option<Duration>,
    /// Added to every request; the first bad name or value, for `build`.
    headers: Result<HeaderMap, String>,
    secret_url: bool,
    #[cfg(feature = "queue")]
    seal: Option<crate::SealKey>,
    #[cfg(feature = "queue")]
    sealed: Vec<HeaderName>,
}

impl HttpSystemBuilder {
    /// The system's policy: `configure` receives `Policy::builder(name)` —
    /// the system's own name, so the policy's metrics, spans and readiness
    /// cannot name another system — and sets its retry, breaker, bulkhead and
    /// timeouts (default: `Policy::builder(name)` as is: 3 attempts, 5 s per
    /// attempt, no breaker, no bulkhead).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ballast::{Breaker, Bulkhead, Retry, Timeout};
    /// use ballast_http::HttpSystem;
    ///
    /// let sber = HttpSystem::builder("sber", "https://gateway.example/api/")
    ///     .policy(|p| {
    ///         p.retry(Retry::attempts(3))
    ///             .breaker(Breaker::count(0.5, 50).half_open_after(Duration::from_secs(30)))
    ///             // 8 attempts in flight; up to 16 more wait for a slot. Without
    ///             // `.queue(n)` the 9th concurrent call is refused at once.
    ///             .bulkhead(Bulkhead::new(8).queue(16))
    ///             .timeout(Timeout::aggressive(Duration::from_secs(5)))
    ///     })
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(sber.policy().name(), "sber");
    /// ```
    pub fn policy(mut self, configure: impl FnOnce(PolicyBuilder) -> PolicyBuilder) -> Self {
        self.policy = configure(self.policy);
        self
    }

    /// Sends through `client` instead of a client of ballast's own: your
    /// default headers, proxy, custom CA, mTLS identity and user agent stay
    /// as you configured them.
    ///
    /// What you must ensure on it, because ballast cannot change a built
    /// client: no retries of its own and no redirects (build it with
    /// `.retry(reqwest::retry::never())` and
    /// `.redirect(reqwest::redirect::Policy::none())`): both resend requests
    /// outside the policy, where the breaker does not see them and a 307/308
    /// resends a write's body (R-RES-RE-X4). Its connect and read timeouts are
    /// yours too, so [`connect_timeout`](Self::connect_timeout) and
    /// [`read_timeout`](Self::read_timeout) are refused beside it; keep them
    /// under the policy's attempt timeout.
    ///
    /// What ballast still adds to every request: the policy (the attempt
    /// timeout, retries of reads and keyed writes, breaker, bulkhead), the
    /// idempotency header of keyed writes, and the classification of every
    /// outcome (R-RES-RE-X2).
    ///
    /// ```
    /// use ballast_http::HttpSystem;
    /// use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer token"));
    /// let client = reqwest::Client::builder()
    ///     .default_headers(headers)
    ///     .user_agent("billing/1.4")
    ///     .retry(reqwest::retry::never())
    ///     .redirect(reqwest::redirect::Policy::none())
    ///     .build()
    ///     .unwrap();
    /// let crm = HttpSystem::builder("crm", "https://crm.example/").client(client).build().unwrap();
    /// # let _ = crm;
    /// ```
    pub fn client(mut self, client: reqwest::Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Whether the system's contract deduplicates writes by idempotency key,
    /// with a key TTL longer than the whole retry window (default false).
    /// Without it a keyed write still sends its key but makes one attempt
    /// (R-RES-RE-1).
    pub fn dedupes_by_key(mut self, yes: bool) -> Self {
        self.dedupes_by_key = yes;
        self
    }

    /// How long the system remembers an idempotency key, from its contract.
    /// A deferred keyed write is never sent once its key may have expired:
    /// its delivery fails instead, and alerts (R-RES-RE-1).
    pub fn key_ttl(mut self, ttl: Duration) -> Self {
        self.key_ttl = Some(ttl);
        self
    }

    /// Adds a header to every request the system sends — the system's own
    /// credential, say — replacing one the caller set. Its value is marked
    /// sensitive (kept out of debug output) and never stored with a deferred
    /// write: it is added again when the write is sent.
    ///
    /// ```
    /// let pay = ballast_http::HttpSystem::builder("pay", "https://pay.example/")
    ///     .header("Authorization", "Bearer from-the-environment")
    ///     .build()
    ///     .unwrap();
    /// # let _ = pay;
    /// ```
    pub fn header(mut self, name: &str, value: &str) -> Self {
        if let Ok(headers) = &mut self.headers {
            match (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
                (Ok(name), Ok(mut value)) => {
                    value.set_sensitive(true);
                    headers.insert(name, value);
                }
                (Err(_), _) => self.headers = Err(format!("header name {name:?}")),
                (_, Err(_)) => self.headers = Err(format!("the value of header {name}")),
            }
        }
        self
    }

    /// Treats the whole base URL as a secret (a Slack webhook's path is its
    /// token): errors, logs and spans show only its scheme and host.
    pub fn secret_url(mut self, yes: bool) -> Self {
        self.secret_url = yes;
        self
    }

    /// The key that seals the credential headers (and the body) of a write
    /// deferred to the durable queue before it is stored; without one,
    /// deferring a request that carries a credential header is refused unsent.
    #[cfg(feature = "queue")]
    #[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
    pub fn seal_key(mut self, key: crate::SealKey) -> Self {
        self.seal = Some(key);
        self
    }

    /// Seals `names` too, besides [`SEALED_BY_DEFAULT`](crate::seal::SEALED_BY_DEFAULT)
    /// (`Authorization`, `Proxy-Authorization`, `Cookie`, `X-Api-Key`).
    #[cfg(feature = "queue")]
    #[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
    pub fn seal_headers<S: AsRef<str>>(mut self, names: &[S]) -> Self {
        for name in names {
            match HeaderName::from_bytes(name.as_ref().as_bytes()) {
                Ok(name) if !self.sealed.contains(&name) => self.sealed.push(name),
                Ok(_) => {}
                Err(_) => self.headers = Err(format!("sealed header name {:?}", name.as_ref())),
            }
        }
        self
    }

    /// The header keyed writes carry their key in (default `Idempotency-Key`).
    pub fn idempotency_header(mut self, name: impl Into<String>) -> Self {
        self.header = name.into();
        self
    }

    /// How long to wait for a connection (default 1 s, or the policy's
    /// attempt timeout if that is shorter).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// How long the system may stay silent while we read its response
    /// (default: the policy's attempt timeout).
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = Some(timeout);
        self
    }

    /// Which outcome classes are transient (default `{5xx, timeout, connect,
    /// reset, 409-in-flight}`; the full table is in [`classify`](crate::classify)).
    ///
    /// **409 on a keyed write to a system that deduplicates by key** means
    /// "the original request with this key is still in flight" (the IETF
    /// Idempotency-Key draft; Stripe and others answer so): transient by
    /// default, retried with the same key after backoff; turn it off with
    /// [`RetryOn::with_409_in_flight`]`(false)` where the system's 409 means
    /// something else. 408 and 429 mean "try again" only when the system's
    /// contract says so, and are opted into here (honouring `Retry-After`).
    /// Every other 4xx is a contract error and never retried (R-RES-RE-X2).
    ///
    /// ```
    /// use ballast_http::{HttpSystem, RetryOn};
    ///
    /// let pay = HttpSystem::builder("pay", "https://pay.example/")
    ///     .dedupes_by_key(true)
    ///     .retry_on(RetryOn::default().with_429(true))
    ///     .build()
    ///     .unwrap();
    /// assert!(pay.retry_on().conflict_in_flight && pay.retry_on().status_429);
    /// ```
    pub fn retry_on(mut self, retry_on: RetryOn) -> Self {
        self.retry_on = retry_on;
        self
    }

    /// Whether the service is not ready while this system's breaker is open
    /// (default false); see [`Health`](crate::Health).
    pub fn critical(mut self, yes: bool) -> Self {
        self.critical = yes;
        self
    }

    /// Builds the system and, unless one was given, its client, with the
    /// client's own retries and redirects off (R-RES-RE-X4).
    pub fn build(self) -> Result<HttpSystem, HttpError> {
        let base = parse_base_url(&self.base_url)?;
        let policy = self.policy.build()?;
        if policy.name() != self.name {
            // Only a closure that ignored the builder it was given gets here.
            return Err(HttpError::NameMismatch { system: self.name, policy: policy.name().to_owned() });
        }
        let header = HeaderName::from_bytes(self.header.as_bytes())
            .map_err(|_| HttpError::InvalidHeaderName { name: self.header.clone() })?;
        let client = match self.client {
            Some(client) => {
                let set = [("connect_timeout", self.connect_timeout), ("read_timeout", self.read_timeout)];
                if let Some((setting, _)) = set.iter().find(|(_, t)| t.is_some()) {
                    return Err(HttpError::OwnClientTimeout { setting });
                }
                client
            }
            None => own_client(&policy, self.connect_timeout, self.read_timeout)?,
        };
        let headers = self.headers.map_err(|what| HttpError::invalid(format!("{what} is not valid")))?;
        crate::metrics::describe_system(&self.name, policy.bulkhead_limit(), self.critical);
        let system_policy = SystemPolicy::new(policy, self.dedupes_by_key, header, self.retry_on);
        Ok(HttpSystem {
            inner: Arc::new(Inner {
                base,
                client,
                system_policy,
                critical: self.critical,
                key_ttl: self.key_ttl,
                headers,
                secret_url: self.secret_url,
                #[cfg(feature = "queue")]
                seal: self.seal,
                #[cfg(feature = "queue")]
                sealed: self.sealed,
            }),
        })
    }
}

/// The client ballast builds for a system: connect and read timeouts under
/// the attempt timeout, no retries, no redirects.
fn own_client(
    policy: &Policy,
    connect: Option<Duration>,
    read: Option<Duration>,
) -> Result<reqwest::Client, HttpError> {
    let attempt = policy.timeout().attempt();
    let read = read.unwrap_or(attempt);
    let connect = connect.unwrap_or(DEFAULT_CONNECT_TIMEOUT.min(attempt));
    for (which, timeout) in [("connect", connect), ("read", read)] {
        if timeout.is_zero() || timeout > attempt {
            return Err(HttpError::TimeoutHierarchy { which, timeout, attempt });
        }
    }
    // reqwest 0.12 retries HTTP/2 protocol NACKs by default; that would be
    // a retry the breaker never sees (R-RES-RE-X4). Redirects are not
    // followed either: a 307/308 would resend a write's body.
    reqwest::Client::builder()
        .use_rustls_tls()
        .retry(reqwest::retry::never())
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(connect)
        .read_timeout(read)
        .build()
        .map_err(HttpError::Client)
}

/// Parses a system's base URL exactly as [`HttpSystemBuilder::build`] does:
/// an absolute `http://` or `https://` URL that can be a base, without query
/// or fragment. `ballast lint` uses it too, so a URL that lints clean is one
/// `ballast serve` accepts.
///
/// ```
/// assert!(ballast_http::parse_base_url("http://x").is_ok());
/// for bad in ["http://[::1", "http://host:99999", "http://a b", "https://h/?q=1", "ftp://h", "h.example"] {
///     assert!(ballast_http::parse_base_url(bad).is_err(), "{bad}");
/// }
/// ```
pub fn parse_base_url(url: &str) -> Result<Url, HttpError> {
    let invalid = |reason: String| HttpError::InvalidBaseUrl { url: ballast::redact_url(url), reason };
    let base = Url::parse(url).map_err(|e| invalid(e.to_string()))?;
    if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
        return Err(invalid(format!("scheme {:?} is not http or https", base.scheme())));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(invalid("a base URL takes no query or fragment".into()));
    }
    Ok(base)
}

/// One external system: its own client and connection pool (rustls, no
/// client-level retries, connect and read timeouts) and its [`Policy`].
///
/// Entry points mirror the policy's (R-RES-RE-1):
/// [`read`](HttpSystem::read) is retried on transient failures,
/// [`write`](HttpSystem::write) sends the idempotency key and is retried only
/// if the system [deduplicates by key](HttpSystemBuilder::dedupes_by_key),
/// [`write_once`](HttpSystem::write_once) makes exactly one attempt.
///
/// Cloning is cheap and clones share the client, the pool and the policy.
#[derive(Debug, Clone)]
pub struct HttpSystem {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    base: Url,
    client: reqwest::Client,
    system_policy: SystemPolicy,
    critical: bool,
    key_ttl: Option<Duration>,
    headers: HeaderMap,
    secret_url: bool,
    #[cfg(feature = "queue")]
    seal: Option<crate::SealKey>,
    #[cfg(feature = "queue")]
    sealed: Vec<HeaderName>,
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
        let name = name.into();
        HttpSystemBuilder {
            policy: Policy::builder(name.clone()),
            name,
            base_url: base_url.to_owned(),
            client: None,
            dedupes_by_key: false,
            header: "Idempotency-Key".to_owned(),
            connect_timeout: None,
            read_timeout: None,
            retry_on: RetryOn::default(),
            critical: false,
            key_ttl: None,
            headers: Ok(HeaderMap::new()),
            secret_url: false,
            #[cfg(feature = "queue")]
            seal: None,
            #[cfg(feature = "queue")]
            sealed: crate::seal::SEALED_BY_DEFAULT.iter().map(|n| HeaderName::from_static(n)).collect(),
        }
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

    /// The key sealing deferred writes' credentials, if configured.
    #[cfg(feature = "queue")]
    pub(crate) fn seal(&self) -> Option<&crate::SealKey> {
        self.inner.seal.as_ref()
    }

    /// The headers sealed before a deferred write is stored.
    #[cfg(feature = "queue")]
    pub(crate) fn sealed_headers(&self) -> &[HeaderName] {
        &self.inner.sealed
    }

    /// `url` as errors, logs and spans show it: without the query string
    /// (whose values may be secrets), userinfo masked, and — for a system
    /// whose URL is a secret — without its path.
    pub(crate) fn shown_url(&self, url: &Url) -> String {
        let mut shown = url.clone();
        shown.set_query(None);
        shown.set_fragment(None);
        if self.inner.secret_url {
            shown.set_path("/***");
        }
        ballast::redact_url(shown.as_str())
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

    /// Sends a request without side effects (GET, HEAD, OPTIONS or a
    /// [`Request::post_query`]), retried on transient failures. Any other
    /// request is refused unsent with [`HttpError::NotARead`].
    pub async fn read(&self, request: Request) -> Result<Response, Failure<HttpError>> {
        if !request.is_read() {
            return Err(Failure::unsent(HttpError::NotARead { method: request.head.method }));
        }
        self.send(CallKind::Read, request).await
    }

    /// Sends a write carrying `key` in the idempotency header — the same key
    /// on every attempt. Retried on transient failures only if the system
    /// deduplicates by key; otherwise one attempt (R-RES-RE-1).
    pub async fn write(
        &self,
        key: &IdempotencyKey,
        request: Request,
    ) -> Result<Response, Failure<HttpError>> {
        self.send(CallKind::KeyedWrite(key), request).await
    }

    /// Sends a write without a key: exactly one attempt, never retried, even
    /// on a 5xx or a reset connection (R-RES-RE-X1). The only entry point that
    /// takes a [`StreamingRequest`](crate::StreamingRequest).
    pub async fn write_once(&self, request: impl Into<OnceRequest>) -> Result<Response, Failure<HttpError>> {
        match request.into() {
            OnceRequest::Buffered(request) => self.send(CallKind::WriteOnce, request).await,
            OnceRequest::Streaming(request) => {
                let (url, headers) = match self.prepare(&request.head, CallKind::WriteOnce) {
                    Ok(prepared) => prepared,
                    Err(e) => return Err(Failure::unsent(e)),
                };
                let (head, url) = (&request.head, &url);
                let mut body = Some(request.body);
                let call = self.inner.system_policy.run(CallKind::WriteOnce, |ctx| {
                    let builder = self.inner.client.request(head.method.clone(), url.clone());
                    let builder = builder.headers(headers.clone());
                    // write_once makes a single attempt, so the body is always there.
                    let builder = body.take().map(|body| builder.body(body));
                    async move {
                        let builder =
                            builder.ok_or_else(|| HttpError::invalid("a streaming body is sent once"))?;
                        self.attempt(builder, false, ctx.attempt(), url).await
                    }
                });
                self.traced(head, url, call).await
            }
        }
    }

    async fn send(&self, kind: CallKind<'_>, request: Request) -> Result<Response, Failure<HttpError>> {
        let (url, headers) = match self.prepare(&request.head, kind) {
            Ok(prepared) => prepared,
            Err(e) => return Err(Failure::unsent(e)),
        };
        let keyed_write = self.inner.system_policy.keyed_write(kind);
        let (head, body) = (&request.head, &request.body);
        let call = self.inner.system_policy.run(kind, |ctx| {
            let builder = self.inner.client.request(head.method.clone(), url.clone());
            self.attempt(
                builder.headers(headers.clone()).body(body.clone()),
                keyed_write,
                ctx.attempt(),
                &url,
            )
        });
        self.traced(head, &url, call).await
    }

    /// Runs a call inside its span, recording the final status on it. The
    /// span is made only when a tracing subscriber is installed.
    async fn traced(
        &self,
        head: &Head,
        url: &Url,
        call: impl std::future::Future<Output = Result<Response, Failure<HttpError>>>,
    ) -> Result<Response, Failure<HttpError>> {
        if !tracing::dispatcher::has_been_set() {
            return call.await;
        }
        // OpenTelemetry's HTTP client conventions; the call is internal, each
        // attempt a client span of its own.
        let span = tracing::info_span!(
            "ballast.http",
            ballast.system = %self.name(),
            http.request.method = %head.method,
            url.full = %self.shown_url(url),
            http.response.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let result = call.instrument(span.clone()).await;
        match &result {
            Ok(response) => {
                span.record("http.response.status_code", response.status().as_u16());
            }
            Err(failure) => {
                if let Some(status) = failure.error().and_then(HttpError::status) {
                    span.record("http.response.status_code", status.as_u16());
                }
                span.record("error.type", failure.error_type());
            }
        }
        result
    }

    /// The URL and headers of every attempt, or why the request cannot be sent.
    fn prepare(&self, head: &Head, kind: CallKind<'_>) -> Result<(Url, HeaderMap), HttpError> {
        head.check()?;
        let mut url = self.inner.base.clone();
        // An empty path is the base URL itself: a webhook's URL is often
        // the whole endpoint, and a trailing `/` would be another route.
        if !head.path.is_empty() {
            let path = format!("{}/{}", url.path().trim_end_matches('/'), head.path.trim_start_matches('/'));
            url.set_path(&path);
        }
        url.set_query(head.raw_query.as_deref());
        if !head.query.is_empty() {
            url.query_pairs_mut().extend_pairs(&head.query);
        }
        let mut headers = head.headers.clone();
        for (name, value) in &self.inner.headers {
            headers.insert(name, value.clone());
        }
        self.inner.system_policy.set_key(kind, &mut headers)?;
        Ok((url, headers))
    }

    /// One attempt: send, read the whole body, classify the outcome.
    async fn attempt(
        &self,
        request: reqwest::RequestBuilder,
        keyed_write: bool,
        attempt: u32,
        url: &Url,
    ) -> Result<Response, HttpError> {
        let retry_on = self.retry_on();
        let secret_url = self.inner.secret_url;
        let transport = move |source: reqwest::Error| {
            let kind = TransportKind::of(&source);
            HttpError::transport(kind, retry_on.transport_class(kind), source, secret_url)
        };
        let number = attempt;
        let send = move |request: reqwest::RequestBuilder| async move {
            let response = request.send().await.map_err(transport)?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await.map_err(transport)?;
            let response = Response { status, headers, body, attempts: attempt };
            if status.is_client_error() || status.is_server_error() {
                let class = retry_on.status_class(status, keyed_write);
                let retry_after = classify::retry_after(&response.headers);
                return Err(HttpError::Status { status, class, retry_after, response: Box::new(response) });
            }
            Ok(response)
        };
        if !tracing::dispatcher::has_been_set() {
            return send(request).await;
        }
        let span = tracing::debug_span!(
            "ballast.http.attempt",
            otel.kind = "client",
            http.request.method = tracing::field::Empty,
            server.address = url.host_str().unwrap_or_default(),
            server.port = url.port_or_known_default(),
            url.full = %self.shown_url(url),
            http.request.resend_count = tracing::field::Empty,
            http.response.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        if number > 1 {
            span.record("http.request.resend_count", number - 1);
        }
        // Replaces a trace context the caller sent: the upstream's parent is this attempt.
        #[cfg(feature = "otel")]
        let request = match crate::otel::trace_headers(&span) {
            Some(headers) => request.headers(headers),
            None => request,
        };
        let result = send(request).instrument(span.clone()).await;
        match &result {
            Ok(response) => {
                span.record("http.response.status_code", response.status().as_u16());
            }
            Err(HttpError::Status { status, .. }) => {
                span.record("http.response.status_code", status.as_u16())
                    .record("error.type", status.as_str());
            }
            Err(HttpError::Transport { kind, .. }) => {
                span.record("error.type", kind.as_str());
            }
            Err(_) => {
                span.record("error.type", "other");
            }
        }
        result
    }
}
