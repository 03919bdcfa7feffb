//! The seam between a system's policy and the network: one attempt's
//! request goes out as an `http::Request`, its whole answer comes back as an
//! `http::Response<Bytes>`, through a [`tower::Service`] — the shape tower
//! and linkerd2-proxy stack. Two transports implement it:
//!
//! - [`HyperTransport`], ballast's own: a pooled `hyper-util` client with
//!   rustls (`hyper-rustls`, Mozilla's roots), connect and read timeouts,
//!   no retries and no redirects. Every system built without a client of its
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
use crate::stream::AnswerBody;

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
#[derive(Clone, Debug)]
pub struct HyperTransport {
    pools: Pools,
    read_timeout: Duration,
}

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;
type PooledClient = Client<Connector, OutBody>;

thread_local! {
    /// This thread's pool of each transport, found by the transport's token.
    static POOLS: std::cell::RefCell<Vec<(std::sync::Weak<()>, PooledClient)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A transport's pools, one per thread that sends through it, made on the
/// thread's first request.
#[derive(Clone)]
struct Pools {
    /// Names this transport's pools; a pool whose transport is gone (a
    /// reload replaced it) is dropped when a new one is made.
    token: std::sync::Arc<()>,
    connector: Connector,
}

impl std::fmt::Debug for Pools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pools")
    }
}

impl Pools {
    fn client(&self) -> PooledClient {
        POOLS.with_borrow_mut(|pools| {
            let mine = pools.iter().find(|(token, _)| std::ptr::eq(token.as_ptr(), &raw const *self.token));
            if let Some((_, client)) = mine {
                return client.clone();
            }
            pools.retain(|(token, _)| token.strong_count() > 0);
            // A request that finds its pooled connection closed under it
            // fails as a reset: resending it is the policy's decision, never
            // the client's.
            let client = Client::builder(TokioExecutor::new())
                .retry_canceled_requests(false)
                .build(self.connector.clone());
            pools.push((std::sync::Arc::downgrade(&self.token), client.clone()));
            client
        })
    }
}

impl HyperTransport {
    /// A transport with these timeouts (HTTP/1.1, keep-alive pool, no
    /// retries of its own: hyper-util's legacy client retries nothing
    /// unless told to, and follows no redirect).
    pub fn new(connect_timeout: Duration, read_timeout: Duration) -> Result<Self, crate::BoxError> {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(connect_timeout));
        http.set_nodelay(true);
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let pools = Pools { token: std::sync::Arc::new(()), connector: https };
        Ok(Self { pools, read_timeout })
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
            let (parts, body) = this.send(request, None).await?.into_parts();
            let body = match body {
                AnswerBody::Whole(bytes) => bytes,
                AnswerBody::Streaming(..) => unreachable!("an answer is streamed only past a buffer"),
            };
            Ok(http::Response::from_parts(parts, body))
        })
    }
}

impl HyperTransport {
    /// Sends `request` on this thread's pool; its body read whole, or, past
    /// `stream_past` bytes, its first part read and the rest left to stream.
    async fn send(
        &self,
        request: http::Request<OutBody>,
        stream_past: Option<usize>,
    ) -> Result<http::Response<AnswerBody>, TransportError> {
        let read = self.read_timeout;
        let response = match tokio::time::timeout(read, self.pools.client().request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Err(TransportError::new(kind_of(&e), e)),
            Err(elapsed) => return Err(TransportError::new(TransportKind::ReadTimeout, elapsed)),
        };
        let (parts, body) = response.into_parts();
        let body = crate::stream::read_up_to(body, read, stream_past.unwrap_or(usize::MAX)).await?;
        Ok(http::Response::from_parts(parts, body))
    }
}

/// The kind of a hyper client error: its connect flag, then its sources.
fn kind_of(error: &hyper_util::client::legacy::Error) -> TransportKind {
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
        let client = self.0.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let body = match body {
                OutBody::Full(bytes) => reqwest::Body::from(bytes),
                OutBody::Stream(body) => body,
            };
            let request = reqwest::Request::try_from(http::Request::from_parts(parts, body))
                .map_err(|e| TransportError::new(TransportKind::Other, e))?;
            let failed = |e: reqwest::Error| TransportError::new(crate::classify::transport_kind(&e), e);
            let response = client.execute(request).await.map_err(failed)?;
            let (status, headers, version) =
                (response.status(), response.headers().clone(), response.version());
            let bytes = response.bytes().await.map_err(failed)?;
            let mut out = http::Response::new(bytes);
            *out.status_mut() = status;
            *out.headers_mut() = headers;
            *out.version_mut() = version;
            Ok(out)
        })
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
    /// Sends `request` and reads its answer: whole, or past `stream_past`
    /// bytes streamed (ballast's own transport; the others read it whole).
    pub(crate) async fn send(
        &self,
        request: http::Request<OutBody>,
        stream_past: Option<usize>,
    ) -> Result<http::Response<AnswerBody>, TransportError> {
        use tower::ServiceExt as _;
        let whole = |response: http::Response<Bytes>| response.map(AnswerBody::Whole);
        match self {
            Transport::Hyper(t) => t.send(request, stream_past).await,
            Transport::Reqwest(t) => t.clone().oneshot(request).await.map(whole),
            Transport::Service(t) => t.clone().oneshot(request).await.map(whole),
        }
    }
}
