//! The scripted upstream: a hyper server on a free loopback port, HTTP/1.1
//! in clear or HTTPS (HTTP/1.1 and, when asked, HTTP/2 by ALPN) with a
//! certificate of a test CA and, when asked, a client certificate required.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::drip::Drip;
use crate::filler::Filler;
use crate::tls::{Accepted, ServerTls};
use crate::{Reply, Seen};

type Script = dyn Fn(&Seen, usize) -> Reply + Send + Sync;

/// The upstream: its script gets each request and its number (from 1).
/// Connections are kept alive as hyper keeps them (an answer with
/// `connection: close` closes its connection after it). Stops accepting
/// when dropped.
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    script: Arc<Mutex<Arc<Script>>>,
    accept: tokio::task::JoinHandle<()>,
    connections: Arc<AtomicUsize>,
    scheme: &'static str,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Why a connection ends without an answer.
#[derive(Debug)]
struct NoAnswer;

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the script answers nothing")
    }
}

impl std::error::Error for NoAnswer {}

impl Upstream {
    /// Starts an upstream on a free loopback port.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub async fn start(script: impl Fn(&Seen, usize) -> Reply + Send + Sync + 'static) -> Upstream {
        Upstream::listen(None, Arc::new(script)).await
    }

    /// Starts an HTTPS upstream on a free loopback port, serving `tls`'s
    /// certificate (HTTP/2 too when `tls.http2`, by ALPN) and, when
    /// `tls.client_ca` is set, admitting only clients with a certificate it signed.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound or the certificate is unusable.
    pub async fn start_tls(
        tls: ServerTls,
        script: impl Fn(&Seen, usize) -> Reply + Send + Sync + 'static,
    ) -> Upstream {
        Upstream::listen(Some(tls), Arc::new(script)).await
    }

    async fn listen(tls: Option<ServerTls>, script: Arc<Script>) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Mutex<Arc<Script>>> = Arc::new(Mutex::new(script));
        let connections = Arc::new(AtomicUsize::new(0));
        let scheme = if tls.is_some() { "https" } else { "http" };
        let acceptor = tls.map(|tls| tls.acceptor());
        let (log, scripted, counted) = (Arc::clone(&seen), Arc::clone(&script), Arc::clone(&connections));
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::Relaxed);
                let (log, scripted, acceptor) = (Arc::clone(&log), Arc::clone(&scripted), acceptor.clone());
                tokio::spawn(serve(stream, acceptor, log, scripted));
            }
        });
        Upstream { addr, seen, script, accept, connections, scheme }
    }

    /// `http://ADDR` (`https://` for a TLS upstream) followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// How many connections it accepted (TLS handshakes that failed included).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    /// Answers with `script` from now on.
    pub fn rescript(&self, script: impl Fn(&Seen, usize) -> Reply + Send + Sync + 'static) {
        *self.script.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(script);
    }

    /// Every request read so far, in order.
    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many requests were read so far.
    pub fn count(&self) -> usize {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// How many requests carried `value` in header `name`.
    pub fn count_with(&self, name: &str, value: &str) -> usize {
        self.requests().iter().filter(|s| s.header(name) == Some(value)).count()
    }
}

async fn serve(
    stream: tokio::net::TcpStream,
    acceptor: Option<crate::tls::Acceptor>,
    log: Arc<Mutex<Vec<Seen>>>,
    script: Arc<Mutex<Arc<Script>>>,
) {
    // Kept to set SO_LINGER 0 on a reset: closing then sends RST.
    let socket = stream.into_std().and_then(|s| {
        let dup = s.try_clone()?;
        Ok((tokio::net::TcpStream::from_std(s)?, dup))
    });
    let Ok((stream, dup)) = socket else { return };
    let dup = Arc::new(dup);
    let (io, client_cert, http2) = match acceptor {
        None => (Accepted::Plain(stream), None, false),
        Some(acceptor) => match acceptor.accept(stream).await {
            Some(accepted) => accepted,
            None => return,
        },
    };
    let client_cert = Arc::new(client_cert);
    let service = service_fn(move |request: http::Request<Incoming>| {
        let (log, script, dup, client_cert) =
            (Arc::clone(&log), Arc::clone(&script), Arc::clone(&dup), Arc::clone(&client_cert));
        async move {
            let (parts, body) = request.into_parts();
            let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let target =
                parts.uri.path_and_query().map_or_else(|| parts.uri.to_string(), ToString::to_string);
            let seen = Seen {
                method: parts.method,
                target,
                headers: parts.headers,
                body,
                at: Instant::now(),
                version: parts.version,
                client_cert: (*client_cert).clone(),
            };
            let number = {
                let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                log.push(seen.clone());
                log.len()
            };
            let script = Arc::clone(&script.lock().unwrap_or_else(PoisonError::into_inner));
            let mut reply = script(&seen, number);
            let mut drip = None;
            loop {
                match reply {
                    Reply::Late(wait, then) => {
                        tokio::time::sleep(wait).await;
                        reply = *then;
                    }
                    Reply::Drip(every, then) => {
                        drip = Some(every);
                        reply = *then;
                    }
                    Reply::With { status, headers, body } => {
                        let body = match drip {
                            Some(every) => Answer::Drip(Drip::new(Bytes::from(body), every)),
                            None => Answer::Full(Full::new(Bytes::from(body))),
                        };
                        return Ok(answer(status, &headers, body));
                    }
                    Reply::Large { status, headers, size, chunked } => {
                        return Ok(answer(status, &headers, Answer::Large(Filler::new(size, chunked))));
                    }
                    Reply::Reset => {
                        let _ = socket2::SockRef::from(&*dup).set_linger(Some(Duration::ZERO));
                        return Err(NoAnswer);
                    }
                    Reply::Lost => return Err(NoAnswer),
                }
            }
        }
    });
    let io = TokioIo::new(io);
    if http2 {
        let builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
        let _ = builder.serve_connection(io, service).await;
    } else {
        let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
    }
}

/// An answer's body: whole, dripped, or large and made as it is sent.
enum Answer {
    Full(Full<Bytes>),
    Drip(Drip),
    Large(Filler),
}

impl hyper::body::Body for Answer {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            Answer::Full(b) => std::pin::Pin::new(b).poll_frame(cx),
            Answer::Drip(b) => std::pin::Pin::new(b).poll_frame(cx),
            Answer::Large(b) => std::pin::Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Answer::Full(b) => b.is_end_stream(),
            Answer::Drip(b) => b.is_end_stream(),
            Answer::Large(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            Answer::Full(b) => b.size_hint(),
            Answer::Drip(b) => b.size_hint(),
            Answer::Large(b) => b.size_hint(),
        }
    }
}

fn answer(status: u16, headers: &[(String, String)], body: Answer) -> http::Response<Answer> {
    let mut response = http::Response::new(body);
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) =
            (HeaderName::try_from(name.as_str()), HeaderValue::try_from(value.as_str()))
        {
            response.headers_mut().append(name, value);
        }
    }
    response
}
