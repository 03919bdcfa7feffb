//! The scripted upstream: a hyper HTTP/1.1 server on a free loopback port.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::drip::Drip;
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
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Mutex<Arc<Script>>> = Arc::new(Mutex::new(Arc::new(script)));
        let (log, scripted) = (Arc::clone(&seen), Arc::clone(&script));
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (log, scripted) = (Arc::clone(&log), Arc::clone(&scripted));
                tokio::spawn(serve(stream, log, scripted));
            }
        });
        Upstream { addr, seen, script, accept }
    }

    /// `http://ADDR` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
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

async fn serve(stream: tokio::net::TcpStream, log: Arc<Mutex<Vec<Seen>>>, script: Arc<Mutex<Arc<Script>>>) {
    // Kept to set SO_LINGER 0 on a reset: closing then sends RST.
    let socket = stream.into_std().and_then(|s| {
        let dup = s.try_clone()?;
        Ok((tokio::net::TcpStream::from_std(s)?, dup))
    });
    let Ok((stream, dup)) = socket else { return };
    let dup = Arc::new(dup);
    let service = service_fn(move |request: http::Request<Incoming>| {
        let (log, script, dup) = (Arc::clone(&log), Arc::clone(&script), Arc::clone(&dup));
        async move {
            let (parts, body) = request.into_parts();
            let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let target =
                parts.uri.path_and_query().map_or_else(|| parts.uri.to_string(), ToString::to_string);
            let seen =
                Seen { method: parts.method, target, headers: parts.headers, body, at: Instant::now() };
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
                    Reply::With { status, headers, body } => return Ok(answer(status, &headers, body, drip)),
                    Reply::Reset => {
                        let _ = socket2::SockRef::from(&*dup).set_linger(Some(Duration::ZERO));
                        return Err(NoAnswer);
                    }
                    Reply::Lost => return Err(NoAnswer),
                }
            }
        }
    });
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
}

type Answer = Either<Full<Bytes>, Drip>;

fn answer(
    status: u16,
    headers: &[(String, String)],
    body: String,
    drip: Option<Duration>,
) -> http::Response<Answer> {
    let body = match drip {
        Some(every) => Either::Right(Drip::new(Bytes::from(body), every)),
        None => Either::Left(Full::new(Bytes::from(body))),
    };
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
