//! The upstream every hop ends at: HTTP/1.1 with keep-alive, answering every
//! request at once with `200` and a small fixed body, on a thread and a
//! current-thread runtime of its own, like a small service next door.
//!
//! As a provider ([`BenchUpstream::start_provider`]) it speaks TLS with a
//! certificate of a CA of its own, issues OAuth 2.0 tokens at `/token`
//! (client credentials, a lifetime it is given) and refuses with 401 a
//! request without a bearer token it issued.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

/// The body of every answer (64 bytes).
pub const BODY: &[u8] = br#"{"id":7,"state":"paid","amount":1000,"currency":"RUB","ok":true}"#;

/// A running upstream; stopped when dropped.
pub struct BenchUpstream {
    addr: SocketAddr,
    served: Arc<AtomicU64>,
    tokens: Arc<Tokens>,
    stop: CancellationToken,
    thread: Option<JoinHandle<()>>,
}

/// The tokens a provider issued: how many, and how long each lives.
#[derive(Default)]
struct Tokens {
    issued: AtomicU64,
    lifetime_secs: u64,
}

/// The provider's TLS and tokens.
struct Provider {
    tls: tokio_rustls::TlsAcceptor,
    tokens: Arc<Tokens>,
}

impl BenchUpstream {
    /// Listens on a free loopback port and answers from a thread of its own.
    pub fn start() -> anyhow::Result<BenchUpstream> {
        Self::listen(None, Arc::default())
    }

    /// As [`start`](Self::start), over TLS with `tls`, issuing tokens that
    /// live `lifetime` at `/token` and admitting only requests bearing one.
    pub fn start_provider(
        tls: &ballast_test_support::ServerTls,
        lifetime: std::time::Duration,
    ) -> anyhow::Result<BenchUpstream> {
        let tokens = Arc::new(Tokens { issued: AtomicU64::new(0), lifetime_secs: lifetime.as_secs().max(1) });
        Self::listen(Some(tls.tls_acceptor()), tokens)
    }

    fn listen(tls: Option<tokio_rustls::TlsAcceptor>, tokens: Arc<Tokens>) -> anyhow::Result<BenchUpstream> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding the upstream")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let served = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let (count, stopped) = (Arc::clone(&served), stop.clone());
        let provider = tls.map(|tls| Arc::new(Provider { tls, tokens: Arc::clone(&tokens) }));
        let thread = std::thread::Builder::new().name("upstream".into()).spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
                while let Some(Ok((stream, _))) = stopped.run_until_cancelled(listener.accept()).await {
                    let _ = stream.set_nodelay(true);
                    let count = Arc::clone(&count);
                    match provider.clone() {
                        None => drop(tokio::spawn(serve(TokioIo::new(stream), count, None))),
                        Some(provider) => drop(tokio::spawn(async move {
                            if let Ok(tls) = provider.tls.accept(stream).await {
                                serve(TokioIo::new(tls), count, Some(Arc::clone(&provider.tokens))).await;
                            }
                        })),
                    }
                }
            });
        })?;
        Ok(BenchUpstream { addr, served, tokens, stop, thread: Some(thread) })
    }

    /// Tokens issued so far (a provider's).
    pub fn tokens_issued(&self) -> u64 {
        self.tokens.issued.load(Ordering::Relaxed)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests answered so far.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

impl Drop for BenchUpstream {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve<S>(io: TokioIo<S>, served: Arc<AtomicU64>, tokens: Option<Arc<Tokens>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let answer = match &tokens {
            Some(tokens) if request.uri().path() == "/token" => {
                let n = tokens.issued.fetch_add(1, Ordering::Relaxed) + 1;
                let token = format!(
                    r#"{{"access_token":"bench-{n}","token_type":"Bearer","expires_in":{}}}"#,
                    tokens.lifetime_secs
                );
                Response::new(Full::new(Bytes::from(token)))
            }
            Some(_)
                if !request
                    .headers()
                    .get(AUTHORIZATION)
                    .is_some_and(|v| v.as_bytes().starts_with(b"Bearer bench-")) =>
            {
                let mut refused = Response::new(Full::new(Bytes::new()));
                *refused.status_mut() = hyper::StatusCode::UNAUTHORIZED;
                refused
            }
            _ => {
                served.fetch_add(1, Ordering::Relaxed);
                Response::new(Full::new(Bytes::from_static(BODY)))
            }
        };
        let mut response = answer;
        response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        std::future::ready(Ok::<_, Infallible>(response))
    });
    // Errors here are a client going away: nothing to do.
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
}
