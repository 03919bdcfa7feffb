//! [`HttpSystemBuilder`]: a system's settings, checked and turned into an
//! [`HttpSystem`] with its transport — a pooled hyper client of its own, or
//! the caller's reqwest client or tower service — and its policy.

use std::sync::Arc;
use std::time::Duration;

use ballast::{Policy, PolicyBuilder};
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;

use super::base::Base;
use super::{HttpSystem, SystemState};
use crate::routes::{Routes, Unrouted};
use crate::system_policy::SystemPolicy;
use crate::transport::{Connecting, HyperTransport, OutBody, ReqwestTransport, Transport, TransportError};
use crate::{parse_base_url, RetryOn, SystemBuildError, DEFAULT_IDEMPOTENCY_HEADER};

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
    /// The most of an answer read whole (default
    /// [`DEFAULT_MAX_ANSWER`](crate::transport::DEFAULT_MAX_ANSWER), 4 MiB):
    /// a larger answer fails its attempt as sent — the request may have
    /// been applied ([`TransportKind::TooLarge`](crate::TransportKind)) —
    /// and is never read whole into memory. A call that takes a stream
    /// ([`Request::stream_answer_past`](crate::Request::stream_answer_past))
    /// streams past its buffer instead.
    #[setters(generate)]
    max_answer: usize,
    /// How long a streamed answer may take, all of it, once its head came
    /// (default [`DEFAULT_STREAM_TIMEOUT`](crate::stream::DEFAULT_STREAM_TIMEOUT),
    /// 5 minutes): past it the stream is cut off
    /// ([`StreamError::TooLong`](crate::stream::StreamError::TooLong)). Until it ends a
    /// stream holds a slot of the system's bulkhead.
    #[setters(generate)]
    stream_timeout: Duration,
    /// How the system's TLS is spoken: the roots and CA file its server
    /// certificate chains to, the client certificate it asks for (mutual
    /// TLS), the name verified, the lowest version (default: Mozilla's
    /// roots, no client certificate). The files are read when the system is
    /// built — a file that cannot be used refuses the build — and again
    /// when they change: a rotated certificate is used by the next
    /// connection, with no restart and no call failing.
    ///
    /// ```no_run
    /// use ballast_http::{HttpSystem, IdentityFiles, Roots, TlsSettings};
    ///
    /// let bank = HttpSystem::builder("bank", "https://10.20.0.7/api/")
    ///     .tls(TlsSettings {
    ///         roots: Roots::None,
    ///         ca_file: Some("/etc/bank/ca.pem".into()),
    ///         identity: Some(IdentityFiles::pem("/etc/bank/client.pem", "/etc/bank/client.key")),
    ///         server_name: Some("api.bank.example".into()),
    ///         ..TlsSettings::default()
    ///     })
    ///     .build()?;
    /// # let _ = bank; Ok::<(), ballast_http::SystemBuildError>(())
    /// ```
    #[setters(generate, strip_option)]
    tls: Option<ballast_tls::TlsSettings>,
    /// The egress proxy (default [`Proxy::FromEnvironment`](crate::Proxy):
    /// `HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY` as curl reads them).
    #[setters(generate, strip_option)]
    proxy: Option<crate::Proxy>,
    /// Whether HTTP/2 is offered by ALPN on TLS connections (default true;
    /// the server chooses). A stream the server refuses, or drops past a
    /// graceful `GOAWAY`, was not processed and may be sent again.
    #[setters(generate, strip_option)]
    http2: Option<bool>,
    /// An access token from an OAuth 2.0 client credentials grant, sent as
    /// `Authorization: Bearer` on every attempt (replacing the caller's):
    /// fetched once for all concurrent calls, renewed before it expires,
    /// kept in memory only — a deferred write gets its token when it is
    /// sent. A `401` answer renews the token and resends that attempt once,
    /// whatever the call (a 401 means the system refused it unapplied); a
    /// second `401` is the answer. The token endpoint is reached with the
    /// system's TLS and proxy.
    #[setters(generate, strip_option)]
    oauth2: Option<crate::credential::OAuth2>,
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
    /// [`Refused::KeyRequired`](crate::Refused::KeyRequired)), or a write sent once. A request no route
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
    /// The headers that say who is asking ([`crate::caller`]).
    caller_headers: Vec<HeaderName>,
    #[cfg(feature = "queue")]
    deferral: super::deferral::Deferral,
}

impl HttpSystemBuilder {
    pub(super) fn new(name: String, base_url: &str) -> Self {
        HttpSystemBuilder {
            policy: Policy::builder(name.clone()),
            name,
            base_url: base_url.to_owned(),
            client: None,
            dedupes_by_key: false,
            header: DEFAULT_IDEMPOTENCY_HEADER.to_owned(),
            connect_timeout: None,
            read_timeout: None,
            max_answer: crate::transport::DEFAULT_MAX_ANSWER,
            stream_timeout: crate::stream::DEFAULT_STREAM_TIMEOUT,
            tls: None,
            proxy: None,
            http2: None,
            oauth2: None,
            retry_on: RetryOn::default(),
            critical: false,
            key_ttl: None,
            service: None,
            routes: Routes::new(),
            unrouted: None,
            headers: Ok(HeaderMap::new()),
            secret_url: false,
            caller_headers: crate::caller::CALLER_BY_DEFAULT
                .iter()
                .map(|n| HeaderName::from_static(n))
                .collect(),
            #[cfg(feature = "queue")]
            deferral: super::deferral::Deferral::default(),
        }
    }

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

    /// Headers that say which caller — which tenant, which account — a
    /// request speaks for, besides its credentials
    /// ([`CALLER_BY_DEFAULT`](crate::caller::CALLER_BY_DEFAULT):
    /// `Authorization`, `Proxy-Authorization`, `Cookie`, `X-Api-Key`, and
    /// the [sealed headers](Self::seal_headers)). A keyed write joins
    /// another in flight or deferred with the same key only when these
    /// match; otherwise it goes its own way ([`crate::caller`]).
    ///
    /// ```
    /// let pay = ballast_http::HttpSystem::builder("pay", "https://pay.example/")
    ///     .caller_headers(&["x-tenant-id"])
    ///     .build()
    ///     .unwrap();
    /// # let _ = pay;
    /// ```
    pub fn caller_headers<S: AsRef<str>>(mut self, names: &[S]) -> Self {
        for name in names {
            match HeaderName::from_bytes(name.as_ref().as_bytes()) {
                Ok(name) if !self.caller_headers.contains(&name) => self.caller_headers.push(name),
                Ok(_) => {}
                Err(_) => self.headers = Err(format!("caller header name {:?}", name.as_ref())),
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
        self.deferral.seal = Some(key);
        self
    }

    /// Seals `names` too, besides [`SEALED_BY_DEFAULT`](crate::seal::SEALED_BY_DEFAULT)
    /// (`Authorization`, `Proxy-Authorization`, `Cookie`, `X-Api-Key`).
    #[cfg(feature = "queue")]
    #[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
    pub fn seal_headers<S: AsRef<str>>(mut self, names: &[S]) -> Self {
        for name in names {
            match HeaderName::from_bytes(name.as_ref().as_bytes()) {
                Ok(name) if !self.deferral.sealed.contains(&name) => {
                    // A credential sealed is a credential that says who is asking.
                    if !self.caller_headers.contains(&name) {
                        self.caller_headers.push(name.clone());
                    }
                    self.deferral.sealed.push(name);
                }
                Ok(_) => {}
                Err(_) => self.headers = Err(format!("sealed header name {:?}", name.as_ref())),
            }
        }
        self
    }

    /// How much of the body of the answer that completes a deferred write is
    /// kept with its task (default [`DEFAULT_KEEP_ANSWER`](crate::delivery::DEFAULT_KEEP_ANSWER),
    /// 64 KiB): a larger body is counted, not kept. Its status and headers
    /// are always kept ([`Answer`](crate::delivery::Answer)).
    #[cfg(feature = "queue")]
    #[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
    #[must_use]
    pub fn keep_answer(mut self, bytes: usize) -> Self {
        self.deferral.keep_answer = bytes;
        self
    }

    /// Seals every kept answer with the [seal key](Self::seal_key), not only
    /// those of requests that were sealed (they carried credentials, or a
    /// body under the key): for a system whose answers hold secrets of
    /// their own (a card token, a one-time code).
    #[cfg(feature = "queue")]
    #[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
    #[must_use]
    pub fn seal_answers(mut self, seal: bool) -> Self {
        self.deferral.seal_answers = seal;
        self
    }

    /// Where to `POST` when a deferred write to this system ends, for a
    /// write whose [`DeferOptions`](crate::delivery::DeferOptions) name no
    /// callback of their own ([`callback`](crate::delivery::callback)).
    #[cfg(feature = "queue")]
    #[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
    #[must_use]
    pub fn default_callback(mut self, url: impl Into<String>) -> Self {
        self.deferral.callback = Some(url.into());
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
        let connection =
            [("tls", self.tls.is_some()), ("proxy", self.proxy.is_some()), ("http2", self.http2.is_some())];
        if let Some((setting, _)) = connection.iter().find(|(_, set)| own && *set) {
            return Err(SystemBuildError::OwnClientConnection { setting });
        }
        let with_identity = self.tls.as_ref().is_some_and(|t| t.identity.is_some());
        let transport = match (self.client, self.service) {
            (_, Some(service)) => Transport::Service(service),
            (Some(client), None) => Transport::Reqwest(ReqwestTransport(client)),
            (None, None) => {
                let connecting = Connecting::new(Duration::ZERO, Duration::ZERO)
                    .tls(self.tls.unwrap_or_default())
                    .proxy(self.proxy.unwrap_or_default())
                    .http2(self.http2.unwrap_or(true))
                    .system(&self.name, url.host_str());
                own_transport(&policy, connecting, self.connect_timeout, self.read_timeout)?
            }
        };
        let tokens = match self.oauth2 {
            None => None,
            Some(grant) => {
                if grant.how() == crate::credential::ClientAuth::Tls && !with_identity && !own {
                    return Err(SystemBuildError::TokenWithoutCertificate);
                }
                let usable = grant.token_url().parse::<http::Uri>().is_ok_and(|uri| {
                    matches!(uri.scheme_str(), Some("http" | "https"))
                        && uri.host().is_some_and(|h| !h.is_empty())
                });
                if !usable {
                    return Err(SystemBuildError::TokenUrl { url: ballast::redact_url(grant.token_url()) });
                }
                Some(crate::credential::Tokens::new(&self.name, grant, transport.clone())?)
            }
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
            inner: Arc::new(SystemState {
                base,
                route_calls: crate::metrics::RouteCounters::register(&self.name, &self.routes),
                unrouted: self.unrouted.unwrap_or(if self.routes.is_empty() {
                    Unrouted::ByMethod
                } else {
                    Unrouted::Refuse
                }),
                routes: self.routes,
                transport,
                tokens,
                max_answer: self.max_answer,
                stream_timeout: self.stream_timeout,
                system_policy,
                critical: self.critical,
                key_ttl: self.key_ttl,
                headers,
                secret_url: self.secret_url,
                caller_headers: self.caller_headers,
                in_flight: crate::in_flight::InFlight::default(),
                #[cfg(feature = "queue")]
                deferral: super::deferral::Deferral {
                    // A kept answer is one read whole: never more than that.
                    keep_answer: self.deferral.keep_answer.min(self.max_answer),
                    ..self.deferral
                },
            }),
        })
    }
}

/// The transport ballast builds for a system: a pooled hyper client with
/// connect and read timeouts under the attempt timeout, no retries, no
/// redirects (R-RES-RE-X4: a 307/308 would resend a write's body).
fn own_transport(
    policy: &Policy,
    connecting: Connecting,
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
    let transport = HyperTransport::connecting(connecting.timeouts(connect, read))?;
    Ok(Transport::Hyper(transport))
}
