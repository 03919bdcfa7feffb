//! The seam between a system's policy and the network: one attempt's
//! request goes out as an `http::Request`, its whole answer comes back as an
//! `http::Response<Bytes>`, through a [`tower::Service`] — the shape tower
//! and linkerd2-proxy stack. Two transports implement it:
//!
//! - [`HyperTransport`], ballast's own: a pooled `hyper-util` client with
//!   rustls (`hyper-rustls`: Mozilla's roots, the OS store or a CA file of
//!   the system's, its client certificate), an egress proxy, HTTP/2 by
//!   ALPN, connect and read timeouts, no retries and no redirects. Every system built without a client of its
//!   own, the gateway's and `ballast serve`'s deliveries included, sends
//!   through one.
//! - [`ReqwestTransport`]: a caller's own `reqwest::Client`
//!   ([`HttpSystemBuilder::client`](crate::HttpSystemBuilder::client)), with
//!   its proxy, custom CA, identity and default headers.
//!
//! Either way the body is read to its end inside the attempt, so a body that
//! stalls or breaks is an attempt failure the policy classifies.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::classify::TransportKind;
use crate::proxy::ProxyConnector;
use crate::stream::{AnswerBody, Reading};

/// The most of an answer read whole unless a system says otherwise
/// ([`HttpSystemBuilder::max_answer`](crate::HttpSystemBuilder::max_answer)):
/// a larger one fails its attempt, never fills the memory.
pub const DEFAULT_MAX_ANSWER: usize = 4 << 20;

/// A request body: the buffered bytes every attempt resends, or a stream
/// only a [`write_once`](crate::HttpSystem::write_once) sends.
#[derive(Debug)]
pub enum OutBody {
    /// Buffered.
    Full(Bytes),
    /// A stream, sent once.
    Stream(reqwest::Body),
}

impl http_body::Body for OutBody {
    type Data = Bytes;
    type Error = crate::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            OutBody::Full(bytes) if bytes.is_empty() => Poll::Ready(None),
            OutBody::Full(bytes) => Poll::Ready(Some(Ok(Frame::data(std::mem::take(bytes))))),
            OutBody::Stream(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            OutBody::Full(bytes) => bytes.is_empty(),
            OutBody::Stream(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            OutBody::Full(bytes) => SizeHint::with_exact(bytes.len() as u64),
            OutBody::Stream(body) => body.size_hint(),
        }
    }
}

/// Why an attempt got no complete answer, with what its source chain says.
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct TransportError {
    /// What went wrong below HTTP.
    pub kind: TransportKind,
    /// The transport's own error, with hyper's and the OS's underneath.
    #[source]
    pub source: crate::BoxError,
}

impl TransportError {
    /// An error of `kind`, for a transport of your own
    /// ([`HttpSystemBuilder::transport`](crate::HttpSystemBuilder::transport)).
    pub fn new(kind: TransportKind, source: impl Into<crate::BoxError>) -> Self {
        Self { kind, source: source.into() }
    }
}

/// A future of a transport's answer.
pub type AnswerFuture = Pin<Box<dyn Future<Output = Result<http::Response<Bytes>, TransportError>> + Send>>;

/// ballast's own transport: a pooled hyper client over rustls, whose connect
/// timeout is the connector's and whose read timeout bounds the wait for the
/// answer's head and for every part of its body.
///
/// Each thread sends through a pool of its own, as nginx's and Envoy's
/// workers keep theirs: on an event loop per core (`ballast serve`'s
/// gateway), a request is served from accept to upstream and back on one
/// thread, never handed to a connection task on another.
///
/// Built with [`Connecting`], it reaches the system as the provider really
/// is: the roots, CA file and client certificate of its
/// [`TlsSettings`](ballast_tls::TlsSettings) — whose files are read again
/// when they change, the next connection using them — an egress
/// [`Proxy`](crate::Proxy), and HTTP/2 by ALPN.
#[derive(Clone, Debug)]
pub struct HyperTransport {
    pools: Pools,
    read_timeout: Duration,
}

type Connector = hyper_rustls::HttpsConnector<ProxyConnector>;
type PooledClient = Client<Connector, OutBody>;

thread_local! {
    /// This thread's pool of each transport, found by the transport's
    /// token, with the generation of the TLS files it was made for.
    static POOLS: std::cell::RefCell<Vec<(std::sync::Weak<()>, u64, PooledClient)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A transport's pools, one per thread that sends through it, made on the
/// thread's first request (and again after its TLS files changed).
#[derive(Clone)]
struct Pools {
    /// Names this transport's pools; a pool whose transport is gone (a
    /// reload replaced it) is dropped when a new one is made.
    token: std::sync::Arc<()>,
    shared: std::sync::Arc<Shared>,
}

impl std::fmt::Debug for Pools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pools")
    }
}

impl Pools {
    fn client(&self) -> PooledClient {
        let (generation, connector) = self.shared.connector();
        POOLS.with_borrow_mut(|pools| {
            let mine =
                pools.iter_mut().find(|(token, ..)| std::ptr::eq(token.as_ptr(), &raw const *self.token));
            if let Some((_, made_for, client)) = &mine {
                if *made_for == generation {
                    return client.clone();
                }
            }
            // A request that finds its pooled connection closed under it
            // fails as a reset: resending it is the policy's decision, never
            // the client's.
            let client =
                Client::builder(TokioExecutor::new()).retry_canceled_requests(false).build(connector);
            match mine {
                Some(entry) => *entry = (std::sync::Arc::downgrade(&self.token), generation, client.clone()),
                None => {
                    pools.retain(|(token, ..)| token.strong_count() > 0);
                    pools.push((std::sync::Arc::downgrade(&self.token), generation, client.clone()));
                }
            }
            client
        })
    }
}

/// How ballast's transport reaches a system: timeouts, TLS, proxy, HTTP/2.
///
/// ```
/// use std::time::Duration;
/// use ballast_http::transport::{Connecting, HyperTransport};
///
/// let transport = HyperTransport::connecting(
///     Connecting::new(Duration::from_secs(1), Duration::from_secs(5)).http2(false),
/// )
/// .unwrap();
/// # let _ = transport;
/// ```
#[derive(Debug, Clone)]
pub struct Connecting {
    connect_timeout: Duration,
    read_timeout: Duration,
    tls: ballast_tls::TlsSettings,
    proxy: crate::Proxy,
    http2: bool,
    /// The host `tls.server_name` stands in for; other hosts (a token
    /// endpoint) are verified by their own names.
    host: Option<String>,
    system: String,
}

impl Connecting {
    /// Mozilla's roots, no client certificate, the environment's proxy,
    /// HTTP/2 offered by ALPN, these timeouts.
    pub fn new(connect_timeout: Duration, read_timeout: Duration) -> Self {
        Connecting {
            connect_timeout,
            read_timeout,
            tls: ballast_tls::TlsSettings::default(),
            proxy: crate::Proxy::default(),
            http2: true,
            host: None,
            system: String::new(),
        }
    }

    /// The TLS settings.
    #[must_use]
    pub fn tls(mut self, tls: ballast_tls::TlsSettings) -> Self {
        self.tls = tls;
        self
    }

    /// The egress proxy.
    #[must_use]
    pub fn proxy(mut self, proxy: crate::Proxy) -> Self {
        self.proxy = proxy;
        self
    }

    /// Whether HTTP/2 is offered by ALPN over TLS (plain `http` is always HTTP/1.1).
    #[must_use]
    pub fn http2(mut self, http2: bool) -> Self {
        self.http2 = http2;
        self
    }

    /// These timeouts.
    #[must_use]
    pub(crate) fn timeouts(mut self, connect: Duration, read: Duration) -> Self {
        self.connect_timeout = connect;
        self.read_timeout = read;
        self
    }

    /// The system's host (the one `server_name` verifies) and name (for logs).
    #[must_use]
    pub(crate) fn system(mut self, name: &str, host: Option<&str>) -> Self {
        self.system = name.to_owned();
        self.host = host.map(str::to_owned);
        self
    }
}

/// What the transport's connections are made with, and what makes them
/// anew when the TLS files change.
struct Shared {
    recipe: Connecting,
    http: HttpConnector,
    routes: std::sync::Arc<crate::proxy::Routes>,
    current: std::sync::RwLock<(u64, Connector)>,
    watch: Option<Watch>,
}

impl Shared {
    fn connector(&self) -> (u64, Connector) {
        if let Some(watch) = &self.watch {
            watch.maybe_check(self, false);
        }
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The connector of `loaded`.
    fn build(&self, loaded: ballast_tls::Loaded) -> Connector {
        connector(&self.recipe, &self.http, &self.routes, loaded)
    }
}

/// The connector of `loaded` TLS settings, through `routes`' proxies.
fn connector(
    recipe: &Connecting,
    http: &HttpConnector,
    routes: &std::sync::Arc<crate::proxy::Routes>,
    loaded: ballast_tls::Loaded,
) -> Connector {
    let proxied = ProxyConnector::new(http.clone(), std::sync::Arc::clone(routes), recipe.connect_timeout);
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(loaded.config).https_or_http();
    let builder = match (loaded.server_name, recipe.host.clone()) {
        (Some(name), Some(host)) => builder.with_server_name_resolver(move |uri: &http::Uri| {
            if uri.host().is_some_and(|h| h.eq_ignore_ascii_case(&host)) {
                Ok(name.clone())
            } else {
                hyper_rustls::ResolveServerName::resolve(
                    &hyper_rustls::DefaultServerNameResolver::default(),
                    uri,
                )
            }
        }),
        _ => builder,
    };
    if recipe.http2 {
        builder.enable_all_versions().wrap_connector(proxied)
    } else {
        builder.enable_http1().wrap_connector(proxied)
    }
}

/// How often the TLS files are looked at for a change, at most.
const TLS_CHECK_EVERY: Duration = Duration::from_secs(1);

/// The TLS files of a transport, looked at for a change at most once a
/// second (on a request, or when asked: a SIGHUP, the server's sweep).
struct Watch {
    since: std::time::Instant,
    next_check_ms: std::sync::atomic::AtomicU64,
    stamp: std::sync::Mutex<ballast_tls::Stamp>,
    facts: std::sync::RwLock<Option<ballast_tls::CertFacts>>,
    last_refusal: std::sync::Mutex<Option<String>>,
}

impl Watch {
    fn maybe_check(&self, shared: &Shared, now: bool) {
        use std::sync::atomic::Ordering;
        let elapsed = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        let due = self.next_check_ms.load(Ordering::Relaxed);
        if !now && elapsed < due {
            return;
        }
        let next = elapsed + u64::try_from(TLS_CHECK_EVERY.as_millis()).unwrap_or(1000);
        if !now
            && self.next_check_ms.compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            return;
        }
        let tls = &shared.recipe.tls;
        let stamp = ballast_tls::Stamp::of(tls.files());
        let mut seen = self.stamp.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *seen == stamp {
            return;
        }
        match tls.load() {
            Ok(loaded) => {
                *seen = loaded.stamp.clone();
                let facts = loaded.identity.clone();
                let connector = shared.build(loaded);
                let mut current = shared.current.write().unwrap_or_else(std::sync::PoisonError::into_inner);
                *current = (current.0 + 1, connector);
                drop(current);
                if let Some(facts) = &facts {
                    crate::metrics::client_cert_expiry(&shared.recipe.system, facts);
                    tracing::info!(
                        system = %shared.recipe.system,
                        subject = %facts.subject,
                        serial = %facts.serial,
                        not_after = %humantime::format_rfc3339_seconds(facts.not_after),
                        "TLS files changed: new connections use them"
                    );
                } else {
                    tracing::info!(system = %shared.recipe.system, "TLS files changed: new connections use them");
                }
                *self.facts.write().unwrap_or_else(std::sync::PoisonError::into_inner) = facts;
                *self.last_refusal.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            }
            Err(error) => {
                // Half a rotation (a new certificate, the old key) is looked
                // at again on the next check; said once per cause.
                let said = error.to_string();
                let mut last = self.last_refusal.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if last.as_deref() != Some(said.as_str()) {
                    tracing::warn!(system = %shared.recipe.system, error = %said, "TLS files changed but cannot be used: the ones read before stay in use");
                    *last = Some(said);
                }
            }
        }
    }
}

impl HyperTransport {
    /// A transport with these timeouts (HTTP/1.1 and HTTP/2 by ALPN,
    /// keep-alive pool, Mozilla's roots, the environment's proxy, no retries
    /// of its own: hyper-util's legacy client retries nothing unless told
    /// to, and follows no redirect).
    pub fn new(connect_timeout: Duration, read_timeout: Duration) -> Result<Self, crate::BoxError> {
        Self::connecting(Connecting::new(connect_timeout, read_timeout)).map_err(Into::into)
    }

    /// A transport that connects as `connecting` says. Refused when its
    /// TLS files cannot be used.
    pub fn connecting(connecting: Connecting) -> Result<Self, ballast_tls::TlsError> {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(connecting.connect_timeout));
        http.set_nodelay(true);
        http.enforce_http(false);
        let loaded = connecting.tls.load()?;
        let watch = (!connecting.tls.files().is_empty()).then(|| Watch {
            since: std::time::Instant::now(),
            next_check_ms: std::sync::atomic::AtomicU64::new(
                u64::try_from(TLS_CHECK_EVERY.as_millis()).unwrap_or(1000),
            ),
            stamp: std::sync::Mutex::new(loaded.stamp.clone()),
            facts: std::sync::RwLock::new(loaded.identity.clone()),
            last_refusal: std::sync::Mutex::new(None),
        });
        if let Some(facts) = &loaded.identity {
            crate::metrics::client_cert_expiry(&connecting.system, facts);
        }
        let routes = std::sync::Arc::new(connecting.proxy.routes());
        let read_timeout = connecting.read_timeout;
        let first = connector(&connecting, &http, &routes, loaded);
        let shared =
            Shared { recipe: connecting, http, routes, current: std::sync::RwLock::new((0, first)), watch };
        let pools = Pools { token: std::sync::Arc::new(()), shared: std::sync::Arc::new(shared) };
        Ok(Self { pools, read_timeout })
    }

    /// Looks at the TLS files now, and takes them if they changed (a
    /// SIGHUP); otherwise a request looks at most once a second.
    pub fn refresh_tls(&self) {
        let shared = &self.pools.shared;
        if let Some(watch) = &shared.watch {
            watch.maybe_check(shared, true);
        }
    }

    /// What the client certificate in use says, if there is one.
    pub fn client_cert(&self) -> Option<ballast_tls::CertFacts> {
        let watch = self.pools.shared.watch.as_ref()?;
        watch.facts.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

impl tower::Service<http::Request<OutBody>> for HyperTransport {
    type Response = http::Response<Bytes>;
    type Error = TransportError;
    type Future = AnswerFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<OutBody>) -> AnswerFuture {
        let this = self.clone();
        Box::pin(async move {
            let (parts, body) = this.send(request, Reading::Whole(DEFAULT_MAX_ANSWER)).await?.into_parts();
            let body = match body {
                AnswerBody::Whole(bytes) => bytes,
                AnswerBody::Streaming(..) => unreachable!("a whole read never streams"),
            };
            Ok(http::Response::from_parts(parts, body))
        })
    }
}

impl HyperTransport {
    /// Sends `request` on this thread's pool; its body read as `reading`
    /// says: whole up to a cap, or its first part and the rest left to stream.
    async fn send(
        &self,
        mut request: http::Request<OutBody>,
        reading: Reading,
    ) -> Result<http::Response<AnswerBody>, TransportError> {
        let read = self.read_timeout;
        if let Some(auth) = self.pools.shared.routes.http_auth(request.uri()) {
            request.headers_mut().insert(http::header::PROXY_AUTHORIZATION, auth);
        }
        let response = match tokio::time::timeout(read, self.pools.client().request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Err(TransportError::new(kind_of(&e), e)),
            Err(elapsed) => return Err(TransportError::new(TransportKind::ReadTimeout, elapsed)),
        };
        let (parts, body) = response.into_parts();
        let body = crate::stream::read_up_to(body, read, reading).await?;
        Ok(http::Response::from_parts(parts, body))
    }
}

/// The kind of a hyper client error: what its sources say of TLS, the
/// proxy or a refused stream, then its connect flag, then the rest.
fn kind_of(error: &hyper_util::client::legacy::Error) -> TransportKind {
    let kind = crate::classify::transport_kind(error);
    if matches!(
        kind,
        TransportKind::Tls(_) | TransportKind::Proxy | TransportKind::ProxyAuth | TransportKind::Refused
    ) {
        return kind;
    }
    if error.is_connect() {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(e) = source {
            if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
            {
                return TransportKind::ConnectTimeout;
            }
            source = e.source();
        }
        return TransportKind::Connect;
    }
    crate::classify::transport_kind(error)
}

/// A caller's own reqwest client as a transport.
#[derive(Clone, Debug)]
pub struct ReqwestTransport(pub reqwest::Client);

impl tower::Service<http::Request<OutBody>> for ReqwestTransport {
    type Response = http::Response<Bytes>;
    type Error = TransportError;
    type Future = AnswerFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<OutBody>) -> AnswerFuture {
        Box::pin(self.clone().send(request, DEFAULT_MAX_ANSWER))
    }
}

impl ReqwestTransport {
    /// Sends `request` and reads its answer whole, at most `cap` bytes of it.
    async fn send(
        self,
        request: http::Request<OutBody>,
        cap: usize,
    ) -> Result<http::Response<Bytes>, TransportError> {
        let (parts, body) = request.into_parts();
        let body = match body {
            OutBody::Full(bytes) => reqwest::Body::from(bytes),
            OutBody::Stream(body) => body,
        };
        let request = reqwest::Request::try_from(http::Request::from_parts(parts, body))
            .map_err(|e| TransportError::new(TransportKind::Other, e))?;
        let failed = |e: reqwest::Error| TransportError::new(crate::classify::transport_kind(&e), e);
        let mut response = self.0.execute(request).await.map_err(failed)?;
        let (status, headers, version) = (response.status(), response.headers().clone(), response.version());
        let mut body = bytes::BytesMut::new();
        while let Some(part) = response.chunk().await.map_err(failed)? {
            if body.len() + part.len() > cap {
                return Err(Reading::too_large(cap));
            }
            body.extend_from_slice(&part);
        }
        let mut out = http::Response::new(body.freeze());
        *out.status_mut() = status;
        *out.headers_mut() = headers;
        *out.version_mut() = version;
        Ok(out)
    }
}

/// A transport of the caller's own, boxed: see
/// [`HttpSystemBuilder::transport`](crate::HttpSystemBuilder::transport).
pub type ServiceTransport =
    tower::util::BoxCloneSyncService<http::Request<OutBody>, http::Response<Bytes>, TransportError>;

/// The transport of one system: ballast's own, the caller's client, or the
/// caller's service.
#[derive(Clone)]
pub(crate) enum Transport {
    Hyper(HyperTransport),
    Reqwest(ReqwestTransport),
    Service(ServiceTransport),
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Hyper(t) => t.fmt(f),
            Transport::Reqwest(t) => t.fmt(f),
            Transport::Service(_) => f.write_str("ServiceTransport"),
        }
    }
}

impl Transport {
    /// Sends `request` and reads its answer as `reading` says: whole up to
    /// a cap, or past a buffer streamed (ballast's own transport; the others
    /// read it whole, up to the limit).
    pub(crate) async fn send(
        &self,
        request: http::Request<OutBody>,
        reading: Reading,
    ) -> Result<http::Response<AnswerBody>, TransportError> {
        use tower::ServiceExt as _;
        let whole = |response: http::Response<Bytes>| response.map(AnswerBody::Whole);
        match self {
            Transport::Hyper(t) => t.send(request, reading).await,
            Transport::Reqwest(t) => t.clone().send(request, reading.limit()).await.map(whole),
            Transport::Service(t) => {
                let response = t.clone().oneshot(request).await?;
                if response.body().len() > reading.limit() {
                    return Err(Reading::too_large(reading.limit()));
                }
                Ok(whole(response))
            }
        }
    }
}
