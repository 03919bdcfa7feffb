//! One external system: its base URL, its own reqwest client and connection
//! pool, and its policy — one composition per system (R-RES-RE-2).

use std::sync::Arc;
use std::time::Duration;

use ballast::{BreakerState, Classification, Failure, IdempotencyKey, Operation, Policy, PolicyBuilder};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use tracing::Instrument;
use url::Url;

use crate::classify;
use crate::plan::{Declared, Line, Plan, Planner};
use crate::request::{Head, OnceRequest};
use crate::routes::{Route, Routes, Unrouted};
use crate::system_policy::SystemPolicy;
use crate::transport::{HyperTransport, OutBody, ReqwestTransport, Transport, TransportError};
use crate::{
    parse_base_url, HttpError, Request, Response, RetryOn, SystemBuildError, DEFAULT_IDEMPOTENCY_HEADER,
};

const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Builds an [`HttpSystem`]; see [`HttpSystem::builder`].
#[derive(Debug, Clone, derive_setters::Setters)]
#[setters(generate = false)]
pub struct HttpSystemBuilder {
    name: String,
    base_url: String,
    policy: PolicyBuilder,
    /// Sends through the given client instead of a client of ballast's own: your
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
    #[setters(generate, strip_option)]
    client: Option<reqwest::Client>,
    /// Whether the system's contract deduplicates writes by idempotency key,
    /// with a key TTL longer than the whole retry window (default false).
    /// Without it a keyed write still sends its key but makes one attempt
    /// (R-RES-RE-1).
    #[setters(generate)]
    dedupes_by_key: bool,
    /// The header keyed writes carry their key in (default `Idempotency-Key`).
    #[setters(generate, into, rename = "idempotency_header")]
    header: String,
    /// How long to wait for a connection (default 1 s, or the policy's
    /// attempt timeout if that is shorter).
    #[setters(generate, strip_option)]
    connect_timeout: Option<Duration>,
    /// How long the system may stay silent while we read its response
    /// (default: the policy's attempt timeout).
    #[setters(generate, strip_option)]
    read_timeout: Option<Duration>,
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
    #[setters(generate)]
    retry_on: RetryOn,
    /// Whether the service is not ready while this system's breaker is open
    /// (default false); see [`Health`](crate::Health).
    #[setters(generate)]
    critical: bool,
    /// How long the system remembers an idempotency key, from its contract.
    /// A deferred keyed write is never sent once its key may have expired:
    /// its delivery fails instead, and alerts (R-RES-RE-1).
    #[setters(generate, strip_option)]
    key_ttl: Option<Duration>,
    service: Option<crate::transport::ServiceTransport>,
    /// What each endpoint of the system is ([`Routes`]): a read whatever its
    /// method, a write that must carry a key (one without is refused unsent,
    /// [`HttpError::KeyRequired`]), or a write sent once. A request no route
    /// matches is what its method and key make it.
    ///
    /// ```
    /// use ballast_http::routes::{RouteKind, Routes};
    /// use ballast_http::HttpSystem;
    ///
    /// let routes = Routes::new().route("POST", "/orders/search", RouteKind::Read)?.route(
    ///     "POST",
    ///     "/payments",
    ///     RouteKind::KeyedWrite,
    /// )?;
    /// let pay = HttpSystem::builder("pay", "https://pay.example/v1/").routes(routes).build().unwrap();
    /// # let _ = pay;
    /// # Ok::<(), ballast_http::routes::RouteError>(())
    /// ```
    #[setters(generate)]
    routes: Routes,
    /// What becomes of a write no route matches (default: refused unsent
    /// when the system has routes, what its method and key make it when
    /// it has none; see [`Unrouted`]).
    #[setters(generate, strip_option)]
    unrouted: Option<Unrouted>,
    /// Added to every request; the first bad name or value, for `build`.
    headers: Result<HeaderMap, String>,
    /// Treats the whole base URL as a secret (a Slack webhook's path is its
    /// token): errors, logs and spans show only its scheme and host.
    #[setters(generate)]
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
    #[must_use]
    pub fn policy(mut self, configure: impl FnOnce(PolicyBuilder) -> PolicyBuilder) -> Self {
        self.policy = configure(self.policy);
        self
    }

    /// Sends through `service` instead of a client: any tower service that
    /// takes an attempt's request and answers with the whole response — a
    /// transport of your own, or an upstream in the process for tests (on
    /// tokio's paused clock, where no socket can be). The policy, the
    /// idempotency header and the classification are applied as with a
    /// client; the service must not retry (R-RES-RE-X4).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use ballast_http::transport::{OutBody, TransportError};
    /// use ballast_http::HttpSystem;
    ///
    /// let upstream = tower::service_fn(|_: http::Request<OutBody>| async {
    ///     Ok::<_, TransportError>(http::Response::new(Bytes::from_static(b"{}")))
    /// });
    /// let crm = HttpSystem::builder("crm", "http://crm.test/").transport(upstream).build().unwrap();
    /// # let _ = crm;
    /// ```
    #[must_use]
    pub fn transport<S>(mut self, service: S) -> Self
    where
        S: tower::Service<
                http::Request<OutBody>,
                Response = http::Response<bytes::Bytes>,
                Error = TransportError,
            > + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        self.service = Some(crate::transport::ServiceTransport::new(service));
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
    #[must_use]
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

    /// The key that seals the credential headers (and the body) of a write
    /// deferred to the durable queue before it is stored; without one,
    /// deferring a request that carries a credential header is refused unsent.
    #[cfg(feature = "queue")]
    #[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
    #[must_use]
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

    /// Builds the system and, unless one was given, its client, with the
    /// client's own retries and redirects off (R-RES-RE-X4).
    pub fn build(self) -> Result<HttpSystem, SystemBuildError> {
        let url = parse_base_url(&self.base_url)?;
        let policy = self.policy.build()?;
        if policy.name() != self.name {
            // Only a closure that ignored the builder it was given gets here.
            return Err(SystemBuildError::NameMismatch {
                system: self.name,
                policy: policy.name().to_owned(),
            });
        }
        let header = HeaderName::from_bytes(self.header.as_bytes())
            .map_err(|_| SystemBuildError::InvalidHeaderName { name: self.header.clone() })?;
        let own = self.client.is_some() || self.service.is_some();
        let set = [("connect_timeout", self.connect_timeout), ("read_timeout", self.read_timeout)];
        if let Some((setting, _)) = set.iter().find(|(_, t)| own && t.is_some()) {
            return Err(SystemBuildError::OwnClientTimeout { setting });
        }
        let transport = match (self.client, self.service) {
            (_, Some(service)) => Transport::Service(service),
            (Some(client), None) => Transport::Reqwest(ReqwestTransport(client)),
            (None, None) => own_transport(&policy, self.connect_timeout, self.read_timeout)?,
        };
        let mut headers = self.headers.map_err(|what| SystemBuildError::InvalidHeader { what })?;
        let base = Base::new(&url, &mut headers)?;
        if let (Some(limiter), Some(ttl)) = (policy.rate_limiter(), self.key_ttl) {
            // A write held past its key's TTL could no longer be deduplicated.
            limiter.cap_holds(ttl);
        }
        crate::metrics::describe_system(&self.name, &policy, self.critical);
        let system_policy = SystemPolicy::new(policy, self.dedupes_by_key, header, self.retry_on);
        Ok(HttpSystem {
            inner: Arc::new(Inner {
                base,
                route_calls: crate::metrics::RouteCounters::register(&self.name, &self.routes),
                unrouted: self.unrouted.unwrap_or(if self.routes.is_empty() {
                    Unrouted::ByMethod
                } else {
                    Unrouted::Refuse
                }),
                routes: self.routes,
                transport,
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

/// The transport ballast builds for a system: a pooled hyper client with
/// connect and read timeouts under the attempt timeout, no retries, no
/// redirects (R-RES-RE-X4: a 307/308 would resend a write's body).
fn own_transport(
    policy: &Policy,
    connect: Option<Duration>,
    read: Option<Duration>,
) -> Result<Transport, SystemBuildError> {
    let attempt = policy.timeout().attempt();
    let read = read.unwrap_or(attempt);
    let connect = connect.unwrap_or(DEFAULT_CONNECT_TIMEOUT.min(attempt));
    for (which, timeout) in [("connect", connect), ("read", read)] {
        if timeout.is_zero() || timeout > attempt {
            return Err(SystemBuildError::TimeoutHierarchy { which, timeout, attempt });
        }
    }
    let transport = HyperTransport::new(connect, read).map_err(SystemBuildError::Client)?;
    Ok(Transport::Hyper(transport))
}

/// A system's base URL, taken apart once: a request's URI is its scheme and
/// authority, the base path, then the request's path and query — no URL is
/// parsed per request.
#[derive(Debug)]
struct Base {
    url: Url,
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    /// Without its trailing `/`.
    path: String,
}

/// What a path may hold unencoded: the URL standard's path set (controls,
/// space, `"`, `#`, `<`, `>`, `?`, `` ` ``, `{`, `}` are encoded; `%` is
/// left as it is, a path may already be encoded).
const PATH: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

impl Base {
    /// The base of `url`; its userinfo, if any, becomes `Authorization:
    /// Basic` in `headers` (as browsers and reqwest do), never part of the URI.
    fn new(url: &Url, headers: &mut HeaderMap) -> Result<Self, SystemBuildError> {
        let invalid = |reason: String| SystemBuildError::InvalidBaseUrl {
            url: ballast::redact_url(url.as_str()),
            reason,
        };
        if !url.username().is_empty() && !headers.contains_key(http::header::AUTHORIZATION) {
            let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned();
            let pair =
                format!("{}:{}", decode(url.username()), url.password().map(decode).unwrap_or_default());
            let mut value = HeaderValue::try_from(format!("Basic {}", BASE64.encode(pair)))
                .map_err(|e| invalid(format!("its userinfo: {e}")))?;
            value.set_sensitive(true);
            headers.insert(http::header::AUTHORIZATION, value);
        }
        let host = url.host_str().ok_or_else(|| invalid("it has no host".into()))?;
        let authority = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        Ok(Self {
            scheme: url.scheme().parse().map_err(|e: http::uri::InvalidUri| invalid(e.to_string()))?,
            authority: authority.parse().map_err(|e: http::uri::InvalidUri| invalid(e.to_string()))?,
            path: url.path().trim_end_matches('/').to_owned(),
            url: url.clone(),
        })
    }

    /// The URI of `head`: the base path and the request's path (an empty
    /// path is the base URL itself, as given), then its query.
    fn uri(&self, head: &Head) -> Result<http::Uri, HttpError> {
        let mut target = String::with_capacity(self.path.len() + head.path.len() + 16);
        if head.path.is_empty() {
            target.push_str(self.url.path());
        } else {
            target.push_str(&self.path);
            target.push('/');
            target.extend(percent_encoding::utf8_percent_encode(head.path.trim_start_matches('/'), PATH));
        }
        let mut separator = '?';
        if let Some(raw) = &head.raw_query {
            target.push(separator);
            target.push_str(raw);
            separator = '&';
        }
        if !head.query.is_empty() {
            target.push(separator);
            let mut query = form_urlencoded::Serializer::new(String::new());
            query.extend_pairs(&head.query);
            target.push_str(&query.finish());
        }
        let path_and_query = http::uri::PathAndQuery::try_from(target)
            .map_err(|e| HttpError::invalid(format!("path or query: {e}")))?;
        http::Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path_and_query)
            .build()
            .map_err(|e| HttpError::invalid(format!("URI: {e}")))
    }
}

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
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    base: Base,
    routes: Routes,
    unrouted: Unrouted,
    route_calls: crate::metrics::RouteCounters,
    transport: Transport,
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
            header: DEFAULT_IDEMPOTENCY_HEADER.to_owned(),
            connect_timeout: None,
            read_timeout: None,
            retry_on: RetryOn::default(),
            critical: false,
            key_ttl: None,
            service: None,
            routes: Routes::new(),
            unrouted: None,
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

    /// The keys sealing and opening deferred writes, if configured.
    #[cfg(feature = "queue")]
    #[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
    pub fn seal_key(&self) -> Option<&crate::SealKey> {
        self.inner.seal.as_ref()
    }

    /// The headers sealed before a deferred write is stored.
    #[cfg(feature = "queue")]
    pub(crate) fn sealed_headers(&self) -> &[HeaderName] {
        &self.inner.sealed
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
    /// request is refused unsent with [`HttpError::NotARead`].
    pub async fn read(&self, request: Request) -> Result<Response, Failure<HttpError>> {
        self.call(Operation::Read, request, false).await
    }

    /// Sends a write carrying `key` in the idempotency header — the same key
    /// on every attempt. Retried on transient failures only if the system
    /// deduplicates by key; otherwise one attempt (R-RES-RE-1).
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
                let head = &request.head;
                let plan = match self.plan_head(head, Declared::As(Operation::WriteOnce), false) {
                    Ok(plan) => plan.streamed(),
                    Err(e) => return Err(Failure::unsent(e)),
                };
                let route_timeout = plan.route().and_then(Route::attempt_timeout);
                let (uri, headers) = match self.prepare(head, &plan) {
                    Ok(prepared) => prepared,
                    Err(e) => return Err(Failure::unsent(e)),
                };
                let mut body = Some(request.body);
                let call = self.inner.system_policy.run(&plan, AllAnswersGood, |ctx| {
                    // write_once makes a single attempt, so the body is always there.
                    let body = body.take().map(OutBody::Stream);
                    let (uri, headers) = (uri.clone(), headers.clone());
                    async move {
                        let body = body.ok_or_else(|| HttpError::invalid("a streaming body is sent once"))?;
                        let which = Which { keyed_write: false, attempt: ctx.attempt(), route_timeout };
                        let attempt = self.attempt(&head.method, uri, headers, body, which);
                        unknown_if_panicked(attempt).await.and_then(failed)
                    }
                });
                let span = self.call_span(head, &uri);
                let result = call.instrument(span.clone()).await;
                record_outcome(&span, &result);
                result
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
        match self.plan(operation, &request) {
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
    /// calls; give the plan to [`send_planned`](Self::send_planned).
    pub fn plan<'a>(&'a self, operation: Operation<'a>, request: &Request) -> Result<Plan<'a>, HttpError> {
        self.plan_head(&request.head, Declared::As(operation), request.is_read())
    }

    /// What a request nobody declared is on this system — by its route,
    /// else its method and `key` (the table in [`crate::plan`]): how a
    /// proxy or the gateway plans a call it forwards. Read the key with
    /// [`plan::key_in`](crate::plan::key_in).
    pub fn plan_by_method<'a>(
        &'a self,
        request: &Request,
        key: Option<&'a IdempotencyKey>,
    ) -> Result<Plan<'a>, HttpError> {
        self.plan_head(&request.head, Declared::ByMethod(key), request.is_read())
    }

    /// Sends `request` as `plan` (from [`plan`](Self::plan) or
    /// [`plan_by_method`](Self::plan_by_method) of this system and this
    /// request) says, every answer handed back as an answer, as
    /// [`send`](Self::send) does.
    pub async fn send_planned(
        &self,
        plan: Plan<'_>,
        request: Request,
    ) -> Result<Response, Failure<HttpError>> {
        self.run(plan, request, true).await
    }

    /// The call of a plan.
    async fn run(
        &self,
        plan: Plan<'_>,
        request: Request,
        judged: bool,
    ) -> Result<Response, Failure<HttpError>> {
        let head = &request.head;
        let route_timeout = plan.route().and_then(Route::attempt_timeout);
        let (uri, headers) = match self.prepare(head, &plan) {
            Ok(prepared) => prepared,
            Err(e) => return Err(Failure::unsent(e)),
        };
        let keyed_write = plan.is_deduplicated_write();
        let body = &request.body;
        let attempt = |ctx: ballast::Context| {
            let (uri, headers, body) = (uri.clone(), headers.clone(), OutBody::Full(body.clone()));
            let which = Which { keyed_write, attempt: ctx.attempt(), route_timeout };
            unknown_if_panicked(self.attempt(&head.method, uri, headers, body, which))
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
    fn call_span(&self, head: &Head, uri: &http::Uri) -> tracing::Span {
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

    /// The URI and headers of every attempt, or why the request cannot be
    /// sent. A method-override header stays only when the request reached
    /// its route through it.
    fn prepare(&self, head: &Head, plan: &Plan<'_>) -> Result<(http::Uri, HeaderMap), HttpError> {
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
        Ok((uri, headers))
    }

    /// Tells an adaptive rate limit what the answer's headers say of the
    /// system's limit (see `rate_headers`).
    fn learn_rate(&self, headers: &HeaderMap) {
        let Some(limiter) = self.policy().rate_limiter().filter(|l| l.limit().is_adaptive()) else { return };
        let announced = crate::rate_headers::read(headers, std::time::SystemTime::now());
        if let Some(rate) = announced.rate {
            limiter.announce(rate);
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
        let Which { keyed_write, attempt, route_timeout } = which;
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
        let sent = self.inner.transport.send(request);
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
                self.learn_rate(&parts.headers);
                if parts.status == http::StatusCode::TOO_MANY_REQUESTS {
                    self.inner.system_policy.throttled();
                }
                let verdict = verdict(retry_on, parts.status, &parts.headers, keyed_write);
                Ok(Response {
                    status: parts.status,
                    headers: parts.headers,
                    body,
                    attempts: attempt,
                    verdict,
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

/// Which attempt of which call: what an attempt needs besides its request.
#[derive(Clone, Copy)]
struct Which {
    /// A keyed write to a system that deduplicates (a 409 in flight is transient).
    keyed_write: bool,
    /// The attempt, from 1.
    attempt: u32,
    /// The route's own attempt timeout, if any.
    route_timeout: Option<Duration>,
}

/// What the policy makes of an answer: `None` for a success (1xx–3xx),
/// else the class of its status under `retry_on` and the wait it asks for.
pub(crate) fn verdict(
    retry_on: RetryOn,
    status: http::StatusCode,
    headers: &HeaderMap,
    keyed_write: bool,
) -> Option<Classification> {
    if !(status.is_client_error() || status.is_server_error()) {
        return None;
    }
    let class = retry_on.status_class(status, keyed_write);
    let after = classify::retry_after(headers);
    // Too many requests, or unavailable for a while: the system throttles,
    // and a rate limit learns from it whatever the retry makes of it.
    let throttled = status == http::StatusCode::TOO_MANY_REQUESTS
        || (status == http::StatusCode::SERVICE_UNAVAILABLE && after.is_some());
    let retry_after = after.filter(|_| class == ballast::Class::Transient || throttled);
    Some(Classification { class, retry_after, throttled })
}

/// The entry points that hand a failed answer back as an error: it becomes
/// [`HttpError::Status`], classified as the policy judged it.
fn failed(response: Response) -> Result<Response, HttpError> {
    match response.verdict {
        None => Ok(response),
        Some(c) => Err(HttpError::Status {
            status: response.status,
            class: c.class,
            retry_after: c.retry_after,
            response: Box::new(response),
        }),
    }
}

/// Every `Ok` a success: errors carry the failed answers.
#[derive(Clone, Copy)]
struct AllAnswersGood;

impl ballast::Judge<Response> for AllAnswersGood {
    fn judge(&self, _: &Response) -> Option<Classification> {
        None
    }
}
