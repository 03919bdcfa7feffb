//! An OAuth 2.0 token endpoint (client credentials grant, RFC 6749 §4.4)
//! whose tokens live as long as a test says — seconds — and a check an
//! upstream's script uses to admit only the tokens it issued and that are
//! still valid.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;

use crate::tls::ServerTls;
use crate::{Reply, Seen, Upstream};

/// A token endpoint on a free loopback port, answering `POST /token`.
pub struct TokenServer {
    upstream: Upstream,
    tokens: Tokens,
}

/// The tokens a [`TokenServer`] issued; clone it into an upstream's script.
#[derive(Clone)]
pub struct Tokens(Arc<State>);

struct State {
    lifetime: Duration,
    client_id: String,
    /// `None`: the client is authenticated by its certificate (RFC 8705).
    client_secret: Option<String>,
    issued: Mutex<Vec<(String, Instant)>>,
    failing_until: Mutex<Option<Instant>>,
    requests: AtomicUsize,
}

impl TokenServer {
    /// An endpoint over plain HTTP issuing tokens valid for `lifetime` to
    /// `client_id` authenticated by `client_secret` (Basic or in the body).
    pub async fn start(lifetime: Duration, client_id: &str, client_secret: &str) -> TokenServer {
        let tokens = Tokens::new(lifetime, client_id, Some(client_secret));
        let issuing = tokens.clone();
        let upstream = Upstream::start(move |seen, _| issuing.answer(seen)).await;
        TokenServer { upstream, tokens }
    }

    /// An endpoint over TLS `tls` (which should require a client
    /// certificate) issuing tokens to `client_id` authenticated by the
    /// certificate of its connection (`client_auth = "tls"`, RFC 8705).
    pub async fn start_tls(tls: ServerTls, lifetime: Duration, client_id: &str) -> TokenServer {
        let tokens = Tokens::new(lifetime, client_id, None);
        let issuing = tokens.clone();
        let upstream = Upstream::start_tls(tls, move |seen, _| issuing.answer(seen)).await;
        TokenServer { upstream, tokens }
    }

    /// The token endpoint's URL.
    pub fn url(&self) -> String {
        self.upstream.url("/token")
    }

    /// The tokens it issued, to check requests with.
    pub fn tokens(&self) -> Tokens {
        self.tokens.clone()
    }

    /// How many token requests it answered (refused ones included).
    pub fn requests(&self) -> usize {
        self.tokens.0.requests.load(Ordering::Relaxed)
    }

    /// Answers 503 to every request for `period` from now.
    pub fn fail_for(&self, period: Duration) {
        *self.tokens.0.failing_until.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(Instant::now() + period);
    }
}

impl Tokens {
    fn new(lifetime: Duration, client_id: &str, client_secret: Option<&str>) -> Tokens {
        Tokens(Arc::new(State {
            lifetime,
            client_id: client_id.to_owned(),
            client_secret: client_secret.map(str::to_owned),
            issued: Mutex::new(Vec::new()),
            failing_until: Mutex::new(None),
            requests: AtomicUsize::new(0),
        }))
    }

    /// Whether `seen` carries `Authorization: Bearer` with a token issued
    /// here and not yet expired.
    pub fn valid(&self, seen: &Seen) -> bool {
        let Some(token) = seen.header("authorization").and_then(|v| v.strip_prefix("Bearer ")) else {
            return false;
        };
        let issued = self.0.issued.lock().unwrap_or_else(PoisonError::into_inner);
        issued.iter().any(|(t, at)| t == token && at.elapsed() < self.0.lifetime)
    }

    /// The script's answer to a token request.
    fn answer(&self, seen: &Seen) -> Reply {
        let state = &self.0;
        let number = state.requests.fetch_add(1, Ordering::Relaxed) + 1;
        let failing = *state.failing_until.lock().unwrap_or_else(PoisonError::into_inner);
        if failing.is_some_and(|until| Instant::now() < until) {
            return Reply::status(503);
        }
        let form: Vec<(String, String)> = form_urlencoded::parse(&seen.body).into_owned().collect();
        let field = |name: &str| form.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        if seen.method != http::Method::POST || field("grant_type") != Some("client_credentials") {
            return Reply::body(400, r#"{"error":"unsupported_grant_type"}"#);
        }
        let (id, secret) = match seen.header("authorization").and_then(|v| v.strip_prefix("Basic ")) {
            Some(basic) => {
                let decoded = base64::engine::general_purpose::STANDARD.decode(basic).unwrap_or_default();
                let text = String::from_utf8_lossy(&decoded).into_owned();
                let (id, secret) = text.split_once(':').unwrap_or((&text, ""));
                (Some(id.to_owned()), Some(secret.to_owned()))
            }
            None => (field("client_id").map(str::to_owned), field("client_secret").map(str::to_owned)),
        };
        let authenticated = id.as_deref() == Some(state.client_id.as_str())
            && match &state.client_secret {
                Some(want) => secret.as_deref() == Some(want.as_str()),
                None => seen.client_cert.is_some(),
            };
        if !authenticated {
            return Reply::body(401, r#"{"error":"invalid_client"}"#);
        }
        let token = format!("token-{number}");
        state.issued.lock().unwrap_or_else(PoisonError::into_inner).push((token.clone(), Instant::now()));
        let body = format!(
            r#"{{"access_token":"{token}","token_type":"Bearer","expires_in":{}}}"#,
            state.lifetime.as_secs().max(1)
        );
        Reply::body(200, body).header("content-type", "application/json")
    }
}
