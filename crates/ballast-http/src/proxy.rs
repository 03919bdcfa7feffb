//! The egress proxy a system's connections leave through: a `CONNECT`
//! tunnel for `https`, the absolute form for `http` (RFC 9110 §9.3.6,
//! RFC 9112 §3.2.2), chosen per system ([`Proxy`]) or, when the system says
//! nothing, from `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` as curl reads
//! them.
//!
//! A proxy that cannot be reached, or refuses the tunnel, means nothing
//! reached the system: [`TransportKind::Proxy`], safe to send again for
//! every kind of call. A proxy asking for credentials (407) is a
//! configuration error: [`TransportKind::ProxyAuth`], never retried.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, Uri};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::classify::TransportKind;

/// Where a system's connections go.
///
/// ```
/// use ballast_http::{HttpSystem, Proxy};
///
/// let bank = HttpSystem::builder("bank", "https://api.bank.example/")
///     .proxy(Proxy::via("http://proxy.corp:3128")?.basic_auth("svc-shop", "from-the-environment"))
///     .build()
///     .unwrap();
/// # let _ = bank;
/// # Ok::<(), ballast_http::ProxyUrlError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub enum Proxy {
    /// `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (also in
    /// lower case), read when the system is built, as curl reads them (the default).
    #[default]
    FromEnvironment,
    /// Straight to the system, whatever the environment says (`proxy = "none"`).
    Direct,
    /// Through this proxy, with these credentials.
    Via {
        /// The proxy, `http://host:port`.
        url: Uri,
        /// `Proxy-Authorization` to send it, if any (marked sensitive).
        auth: Option<HeaderValue>,
    },
}

/// A proxy URL that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("proxy {url:?}: {reason}")]
pub struct ProxyUrlError {
    /// The URL, its credentials masked.
    pub url: String,
    /// Why.
    pub reason: &'static str,
}

impl Proxy {
    /// Through the proxy at `url` (`http://host:port`; credentials go in
    /// [`basic_auth`](Self::basic_auth), not in the URL).
    pub fn via(url: &str) -> Result<Proxy, ProxyUrlError> {
        let refused = |reason| ProxyUrlError { url: ballast::redact_url(url), reason };
        let uri: Uri = url.parse().map_err(|_| refused("not a URL"))?;
        if uri.scheme_str() != Some("http") {
            return Err(refused(
                "only http:// proxies are spoken to (the tunnel to an https system is TLS end to end)",
            ));
        }
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(refused("credentials do not go in the URL: give them separately (proxy_auth_env)"));
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(refused("no host"));
        }
        Ok(Proxy::Via { url: uri, auth: None })
    }

    /// These proxy credentials, sent as `Proxy-Authorization: Basic`.
    #[must_use]
    pub fn basic_auth(self, user: &str, password: &str) -> Proxy {
        use base64::Engine as _;
        match self {
            Proxy::Via { url, .. } => {
                let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                let auth = HeaderValue::from_str(&format!("Basic {basic}")).ok().map(|mut value| {
                    value.set_sensitive(true);
                    value
                });
                Proxy::Via { url, auth }
            }
            other => other,
        }
    }

    /// The routes of this choice, the environment read now.
    pub(crate) fn routes(&self) -> Routes {
        match self {
            Proxy::FromEnvironment => Routes::Environment(Box::new(Matcher::from_env())),
            Proxy::Direct => Routes::Direct,
            Proxy::Via { url, auth } => Routes::Via { url: url.clone(), auth: auth.clone() },
        }
    }
}

/// Where each destination's connection goes.
#[derive(Debug)]
pub(crate) enum Routes {
    Direct,
    Environment(Box<Matcher>),
    Via { url: Uri, auth: Option<HeaderValue> },
}

impl Routes {
    /// The proxy for `dst` and its credentials, if it goes through one.
    pub(crate) fn proxy_for(&self, dst: &Uri) -> Option<(Uri, Option<HeaderValue>)> {
        match self {
            Routes::Direct => None,
            Routes::Via { url, auth } => Some((url.clone(), auth.clone())),
            Routes::Environment(matcher) => {
                let intercept = matcher.intercept(dst)?;
                let auth = intercept.basic_auth().cloned().map(|mut value| {
                    value.set_sensitive(true);
                    value
                });
                Some((intercept.uri().clone(), auth))
            }
        }
    }

    /// The `Proxy-Authorization` an `http` request to `dst` carries: the
    /// proxy reads it from the request itself (absolute form).
    pub(crate) fn http_auth(&self, dst: &Uri) -> Option<HeaderValue> {
        if dst.scheme_str() != Some("http") {
            return None;
        }
        self.proxy_for(dst).and_then(|(_, auth)| auth)
    }
}

/// Why the proxy did not lead to the system.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The proxy could not be reached.
    #[error("the egress proxy {proxy} cannot be reached (nothing reached the system): {source}")]
    Unreachable {
        /// The proxy, `host:port`.
        proxy: String,
        /// Why.
        source: crate::BoxError,
    },
    /// The proxy answered the tunnel's request with another status than 2xx.
    #[error(
        "the egress proxy {proxy} refused the tunnel to {target} with {status} (nothing reached the system)"
    )]
    Refused {
        /// The proxy.
        proxy: String,
        /// `host:port` asked for.
        target: String,
        /// Its answer.
        status: u16,
    },
    /// The proxy wants credentials it was not given, or refused them (407).
    #[error(
        "the egress proxy {proxy} asks for credentials (407 Proxy Authentication Required): set proxy_auth_env \
         to a variable holding user:password, or check the one set"
    )]
    AuthRequired {
        /// The proxy.
        proxy: String,
    },
    /// The proxy closed the connection or answered nonsense before the tunnel opened.
    #[error(
        "the egress proxy {proxy} did not open the tunnel to {target}: {reason} (nothing reached the system)"
    )]
    Broken {
        /// The proxy.
        proxy: String,
        /// `host:port` asked for.
        target: String,
        /// What it did.
        reason: String,
    },
}

impl ProxyError {
    /// The failure's kind: a configuration error for 407, else "nothing reached the system".
    pub fn kind(&self) -> TransportKind {
        match self {
            ProxyError::AuthRequired { .. } => TransportKind::ProxyAuth,
            _ => TransportKind::Proxy,
        }
    }
}

/// A connector that reaches each destination straight or through its proxy.
#[derive(Clone, Debug)]
pub(crate) struct ProxyConnector {
    http: HttpConnector,
    routes: Arc<Routes>,
    /// How long the proxy may take to answer the tunnel's request.
    answer_within: Duration,
}

impl ProxyConnector {
    pub(crate) fn new(http: HttpConnector, routes: Arc<Routes>, answer_within: Duration) -> Self {
        ProxyConnector { http, routes, answer_within }
    }
}

/// A connection, and whether it goes through a proxy in absolute form.
#[derive(Debug)]
pub(crate) struct ProxyStream {
    io: TokioIo<TcpStream>,
    absolute_form: bool,
}

impl Connection for ProxyStream {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.absolute_form)
    }
}

impl hyper::rt::Read for ProxyStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for ProxyStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl tower::Service<Uri> for ProxyConnector {
    type Response = ProxyStream;
    type Error = crate::BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<ProxyStream, crate::BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let mut http = self.http.clone();
        let route = self.routes.proxy_for(&dst);
        let answer_within = self.answer_within;
        Box::pin(async move {
            let Some((proxy, auth)) = route else {
                let io = http.call(dst).await?;
                return Ok(ProxyStream { io, absolute_form: false });
            };
            let named = proxy.authority().map_or_else(|| proxy.to_string(), ToString::to_string);
            let io = http
                .call(proxy)
                .await
                .map_err(|e| ProxyError::Unreachable { proxy: named.clone(), source: e.into() })?;
            if dst.scheme_str() != Some("https") {
                return Ok(ProxyStream { io, absolute_form: true });
            }
            let target = authority(&dst);
            let tunnel = tunnel(io.into_inner(), &named, &target, auth.as_ref());
            let stream =
                tokio::time::timeout(answer_within, tunnel).await.map_err(|_| ProxyError::Broken {
                    proxy: named.clone(),
                    target: target.clone(),
                    reason: format!("no answer to CONNECT within {answer_within:?}"),
                })??;
            Ok(ProxyStream { io: TokioIo::new(stream), absolute_form: false })
        })
    }
}

/// `host:port` of `dst`, its port the scheme's default when it names none.
fn authority(dst: &Uri) -> String {
    let host = dst.host().unwrap_or_default();
    let port = dst.port_u16().unwrap_or(if dst.scheme_str() == Some("https") { 443 } else { 80 });
    format!("{host}:{port}")
}

/// The largest answer head a proxy may send to `CONNECT`.
const MAX_ANSWER_HEAD: usize = 16 * 1024;

/// Asks the proxy on `stream` for a tunnel to `target` and reads its answer.
async fn tunnel(
    mut stream: TcpStream,
    proxy: &str,
    target: &str,
    auth: Option<&HeaderValue>,
) -> Result<TcpStream, ProxyError> {
    let broken =
        |reason: String| ProxyError::Broken { proxy: proxy.to_owned(), target: target.to_owned(), reason };
    let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n").into_bytes();
    if let Some(auth) = auth {
        head.extend_from_slice(b"Proxy-Authorization: ");
        head.extend_from_slice(auth.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    stream.write_all(&head).await.map_err(|e| broken(e.to_string()))?;
    let mut answer = Vec::with_capacity(256);
    let mut chunk = [0u8; 1024];
    loop {
        let read = stream.read(&mut chunk).await.map_err(|e| broken(e.to_string()))?;
        if read == 0 {
            return Err(broken("the connection closed before an answer".to_owned()));
        }
        answer.extend_from_slice(&chunk[..read]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Response::new(&mut headers);
        match parsed.parse(&answer) {
            Ok(httparse::Status::Complete(_)) => {
                return match parsed.code {
                    Some(200..=299) => Ok(stream),
                    Some(407) => Err(ProxyError::AuthRequired { proxy: proxy.to_owned() }),
                    Some(status) => Err(ProxyError::Refused {
                        proxy: proxy.to_owned(),
                        target: target.to_owned(),
                        status,
                    }),
                    None => Err(broken("an answer without a status".to_owned())),
                };
            }
            Ok(httparse::Status::Partial) if answer.len() < MAX_ANSWER_HEAD => {}
            Ok(httparse::Status::Partial) => return Err(broken("an answer head over 16 KiB".to_owned())),
            Err(e) => return Err(broken(format!("an answer that is not HTTP ({e})"))),
        }
    }
}
