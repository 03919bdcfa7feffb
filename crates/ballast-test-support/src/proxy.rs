//! An egress proxy as a company network has one: `CONNECT` tunnels for
//! `https` and absolute-form requests for `http`, optionally behind
//! `Proxy-Authorization`, and a switch that makes it refuse tunnels.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

/// A proxy on a free loopback port; stops when dropped.
pub struct ConnectProxy {
    /// Where it listens.
    pub addr: SocketAddr,
    state: Arc<State>,
    accept: tokio::task::JoinHandle<()>,
}

struct State {
    /// `Basic …` a request must carry in `Proxy-Authorization`, if any.
    credentials: Option<String>,
    refusing: AtomicBool,
    tunnels: Mutex<Vec<String>>,
    forwarded: Mutex<Vec<String>>,
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

type Answer = http::Response<Full<Bytes>>;

fn status(code: u16) -> Answer {
    let mut answer = http::Response::new(Full::new(Bytes::new()));
    *answer.status_mut() = http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::BAD_GATEWAY);
    answer
}

impl ConnectProxy {
    /// A proxy that lets anyone through.
    pub async fn start() -> ConnectProxy {
        ConnectProxy::listen(None).await
    }

    /// A proxy that asks for `user:password` (Basic) and answers 407 without it.
    pub async fn with_credentials(user: &str, password: &str) -> ConnectProxy {
        use base64::Engine as _;
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        ConnectProxy::listen(Some(format!("Basic {basic}"))).await
    }

    async fn listen(credentials: Option<String>) -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let state = Arc::new(State {
            credentials,
            refusing: AtomicBool::new(false),
            tunnels: Mutex::new(Vec::new()),
            forwarded: Mutex::new(Vec::new()),
        });
        let shared = Arc::clone(&state);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = Arc::clone(&shared);
                tokio::spawn(async move {
                    let service = service_fn(move |request| handle(Arc::clone(&state), request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        ConnectProxy { addr, state, accept }
    }

    /// `http://ADDR`, to set as a system's `proxy`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// From now on, refuses every tunnel with 403 (or lets them through again).
    pub fn refuse(&self, refusing: bool) {
        self.state.refusing.store(refusing, Ordering::Release);
    }

    /// The `host:port` of every tunnel asked for, refused ones included.
    pub fn tunnels(&self) -> Vec<String> {
        self.state.tunnels.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The URL of every absolute-form request it forwarded.
    pub fn forwarded(&self) -> Vec<String> {
        self.state.forwarded.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

async fn handle(
    state: Arc<State>,
    request: http::Request<Incoming>,
) -> Result<Answer, std::convert::Infallible> {
    let authorized = state.credentials.as_deref().is_none_or(|want| {
        request.headers().get(http::header::PROXY_AUTHORIZATION).and_then(|v| v.to_str().ok()) == Some(want)
    });
    if request.method() == http::Method::CONNECT {
        let target = request.uri().authority().map(ToString::to_string).unwrap_or_default();
        state.tunnels.lock().unwrap_or_else(PoisonError::into_inner).push(target.clone());
        if !authorized {
            return Ok(status(407));
        }
        if state.refusing.load(Ordering::Acquire) {
            return Ok(status(403));
        }
        let Ok(mut upstream) = TcpStream::connect(&target).await else { return Ok(status(502)) };
        tokio::spawn(async move {
            if let Ok(upgraded) = hyper::upgrade::on(request).await {
                let _ = tokio::io::copy_bidirectional(&mut TokioIo::new(upgraded), &mut upstream).await;
            }
        });
        return Ok(status(200));
    }
    if !authorized {
        return Ok(status(407));
    }
    // Absolute form: the whole URL is the target.
    let url = request.uri().to_string();
    state.forwarded.lock().unwrap_or_else(PoisonError::into_inner).push(url.clone());
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let client = reqwest::Client::builder().no_proxy().build().expect("a client");
    let mut forward = client.request(parts.method, &url).body(body);
    for (name, value) in &parts.headers {
        if name != http::header::PROXY_AUTHORIZATION && name != http::header::HOST {
            forward = forward.header(name, value);
        }
    }
    let Ok(answer) = forward.send().await else { return Ok(status(502)) };
    let mut out = status(answer.status().as_u16());
    *out.headers_mut() = answer.headers().clone();
    out.headers_mut().remove(http::header::TRANSFER_ENCODING);
    let body = answer.bytes().await.unwrap_or_default();
    *out.body_mut() = Full::new(body);
    Ok(out)
}
