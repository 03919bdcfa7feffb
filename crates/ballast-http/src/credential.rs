//! A system's access token from an OAuth 2.0 client credentials grant
//! (RFC 6749 §4.4): fetched once for every concurrent call (single flight),
//! kept in memory only, renewed before it expires, and asked for by each
//! attempt just before it is sent — so a write deferred for an hour goes
//! out with a token of its hour, and no token is ever stored with it.
//!
//! The token endpoint is a system of its own: its own timeout and breaker,
//! reached through the same TLS settings and proxy as the system. When it
//! cannot give a token, the attempt is not sent
//! ([`TransportKind::Credential`]: transient, nothing sent — a keyed write
//! is deferred as in an outage); when it refuses the client's credentials
//! (`invalid_client`), that is a configuration error
//! ([`TransportKind::CredentialRefused`]), never retried.
//!
//! Renewal: at 80 % of the token's `expires_in`, or 60 s before it ends
//! when that comes later. While one call renews, the others keep sending
//! the token in hand; only a call that finds no valid token waits, and all
//! such calls wait for the same request.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use ballast::{Breaker, Classification, Classify, Failure, Policy, Retry, Timeout};
use bytes::Bytes;
use http::{HeaderValue, Method};
use tokio::time::Instant;

use crate::classify::TransportKind;
use crate::stream::{AnswerBody, Reading};
use crate::transport::{OutBody, Transport};

pub use ballast_tls::Secret;

/// How the client proves who it is to the token endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClientAuth {
    /// `Authorization: Basic` with the client id and secret (the default;
    /// RFC 6749 §2.3.1).
    #[default]
    Basic,
    /// `client_id` and `client_secret` in the form body.
    Body,
    /// The system's TLS client certificate (RFC 8705 §2): `client_id` in
    /// the body, no secret.
    Tls,
}

impl ClientAuth {
    /// Every word, as the configuration writes it.
    pub const WORDS: [&'static str; 3] = ["basic", "body", "tls"];

    /// The method `word` names.
    pub fn from_word(word: &str) -> Option<ClientAuth> {
        match word {
            "basic" => Some(ClientAuth::Basic),
            "body" => Some(ClientAuth::Body),
            "tls" => Some(ClientAuth::Tls),
            _ => None,
        }
    }
}

/// An OAuth 2.0 client credentials grant for a system.
///
/// ```
/// use ballast_http::credential::{ClientAuth, OAuth2, Secret};
/// use ballast_http::HttpSystem;
///
/// let oauth = OAuth2::new("https://auth.bank.example/oauth/token", "shop-42")
///     .secret(Secret::new("from-the-environment"))
///     .scope("payments");
/// let bank = HttpSystem::builder("bank", "https://api.bank.example/").oauth2(oauth).build().unwrap();
/// # let _ = bank;
/// ```
#[derive(Debug, Clone)]
pub struct OAuth2 {
    token_url: String,
    client_id: String,
    secret: Option<Secret>,
    scope: Option<String>,
    audience: Option<String>,
    client_auth: ClientAuth,
    timeout: Duration,
}

/// The token endpoint's timeout when none is given.
pub const DEFAULT_TOKEN_TIMEOUT: Duration = Duration::from_secs(5);

impl OAuth2 {
    /// A grant from `token_url` for `client_id`.
    pub fn new(token_url: impl Into<String>, client_id: impl Into<String>) -> Self {
        OAuth2 {
            token_url: token_url.into(),
            client_id: client_id.into(),
            secret: None,
            scope: None,
            audience: None,
            client_auth: ClientAuth::Basic,
            timeout: DEFAULT_TOKEN_TIMEOUT,
        }
    }

    /// The client secret (not needed with [`ClientAuth::Tls`]).
    #[must_use]
    pub fn secret(mut self, secret: Secret) -> Self {
        self.secret = Some(secret);
        self
    }

    /// The `scope` asked for.
    #[must_use]
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// The `audience` asked for (Auth0 and others).
    #[must_use]
    pub fn audience(mut self, audience: impl Into<String>) -> Self {
        self.audience = Some(audience.into());
        self
    }

    /// How the client authenticates (default [`ClientAuth::Basic`]).
    #[must_use]
    pub fn client_auth(mut self, how: ClientAuth) -> Self {
        self.client_auth = how;
        self
    }

    /// The token endpoint's timeout (default 5 s).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The token endpoint's URL.
    pub fn token_url(&self) -> &str {
        &self.token_url
    }

    /// How the client authenticates.
    pub fn how(&self) -> ClientAuth {
        self.client_auth
    }
}

/// Why no token could be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The token endpoint did not answer with a token: down, slow, its
    /// breaker open, or an answer that is not a token. Nothing was sent to
    /// the system.
    #[error("no access token for {system}: {reason} (nothing was sent)")]
    Unavailable {
        /// The system.
        system: String,
        /// Why, without any secret.
        reason: String,
    },
    /// The token endpoint refused the client's credentials.
    #[error(
        "the token endpoint refused {system}'s client credentials with {status} ({error}): check client_id_env and \
         client_secret_env (or the client certificate, with client_auth = \"tls\"); nothing was sent"
    )]
    Refused {
        /// The system.
        system: String,
        /// The endpoint's status.
        status: u16,
        /// Its `error` (`invalid_client`, `unauthorized_client`, …).
        error: String,
    },
    /// The token endpoint cannot be spoken to as configured: its
    /// certificate does not verify, the proxy wants credentials.
    #[error("the token endpoint of {system} cannot be used: {reason}; nothing was sent")]
    Misconfigured {
        /// The system.
        system: String,
        /// Why.
        reason: String,
    },
}

impl TokenError {
    /// Its kind: [`TransportKind::CredentialRefused`] for a refusal, else
    /// [`TransportKind::Credential`].
    pub fn kind(&self) -> TransportKind {
        match self {
            TokenError::Refused { .. } | TokenError::Misconfigured { .. } => TransportKind::CredentialRefused,
            TokenError::Unavailable { .. } => TransportKind::Credential,
        }
    }
}

impl Classify for TokenError {
    fn classify(&self) -> Classification {
        match self {
            TokenError::Unavailable { .. } => Classification::transient(),
            TokenError::Refused { .. } | TokenError::Misconfigured { .. } => Classification::permanent(),
        }
    }
}

/// A token in hand.
#[derive(Clone)]
struct Token {
    bearer: HeaderValue,
    renew_at: Instant,
    expires_at: Instant,
    /// Which token this is, so a 401 invalidates only the token it was sent with.
    generation: u64,
}

/// A bearer token and which one it is, for [`Tokens::invalidate`].
#[derive(Clone, Debug)]
pub(crate) struct Bearer {
    pub(crate) value: HeaderValue,
    pub(crate) generation: u64,
}

/// A system's tokens: the one in hand and the single flight that renews it.
pub(crate) struct Tokens {
    system: String,
    grant: OAuth2,
    transport: Transport,
    policy: Policy,
    current: RwLock<Option<Token>>,
    fetching: tokio::sync::Mutex<u64>,
    requests: metrics::Counter,
    failures: metrics::Counter,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("system", &self.system)
            .field("token_url", &self.grant.token_url)
            .finish()
    }
}

/// The largest token answer read.
const MAX_TOKEN_ANSWER: usize = 64 * 1024;

impl Tokens {
    /// `system`'s tokens from `grant`, fetched through `transport`.
    pub(crate) fn new(
        system: &str,
        grant: OAuth2,
        transport: Transport,
    ) -> Result<Arc<Tokens>, ballast::BuildError> {
        let policy = Policy::builder(format!("{system}.token"))
            .retry(Retry::never())
            // A token request is cheap to probe: a recovered endpoint is
            // found within a second, not a half-open period later.
            .breaker(Breaker::consecutive(3).half_open_after(Duration::from_secs(1)))
            .timeout(Timeout::aggressive(grant.timeout))
            .build()?;
        let labels = |outcome: &'static str| [("system", system.to_owned()), ("outcome", outcome.to_owned())];
        Ok(Arc::new(Tokens {
            system: system.to_owned(),
            transport,
            policy,
            current: RwLock::new(None),
            fetching: tokio::sync::Mutex::new(0),
            requests: metrics::counter!("ballast_token_requests_total", &labels("ok")),
            failures: metrics::counter!("ballast_token_requests_total", &labels("failed")),
            grant,
        }))
    }

    fn in_hand(&self) -> Option<Token> {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The token to send now: the one in hand while it is fresh; past its
    /// renewal time, renewed by one caller while the others keep using it;
    /// past its end (or after a 401), waited for — one request for all.
    pub(crate) async fn bearer(&self) -> Result<Bearer, TokenError> {
        let now = Instant::now();
        if let Some(token) = self.in_hand().filter(|t| now < t.expires_at) {
            if now < token.renew_at {
                return Ok(bearer(&token));
            }
            let Ok(generation) = self.fetching.try_lock() else { return Ok(bearer(&token)) };
            if let Some(fresh) = self.in_hand().filter(|t| Instant::now() < t.renew_at) {
                return Ok(bearer(&fresh));
            }
            return match self.fetch(generation).await {
                Ok(fresh) => Ok(fresh),
                Err(error) => {
                    tracing::warn!(system = %self.system, %error, "cannot renew the access token; the current one is used until it expires");
                    Ok(bearer(&token))
                }
            };
        }
        let generation = self.fetching.lock().await;
        if let Some(fresh) = self.in_hand().filter(|t| Instant::now() < t.renew_at) {
            return Ok(bearer(&fresh));
        }
        self.fetch(generation).await
    }

    /// Forgets the token `used`, which the system refused (401), unless a
    /// newer one is already in hand.
    pub(crate) fn invalidate(&self, used: &Bearer) {
        let mut current = self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.as_ref().is_some_and(|t| t.generation == used.generation) {
            *current = None;
        }
    }

    /// One request to the token endpoint, under its policy, by the holder
    /// of the single flight.
    async fn fetch(&self, mut generation: tokio::sync::MutexGuard<'_, u64>) -> Result<Bearer, TokenError> {
        let answer = self.policy.read(|_| self.request()).await;
        let token = match answer {
            Ok(token) => token,
            Err(failure) => {
                self.failures.increment(1);
                return Err(self.failed(failure));
            }
        };
        self.requests.increment(1);
        *generation += 1;
        let Answered { bearer: value, expires_in } = token;
        let now = Instant::now();
        // 80 % of its life, or 60 s before its end when that is later.
        let margin = (expires_in / 5).min(Duration::from_secs(60));
        let token = Token {
            bearer: value,
            renew_at: now + (expires_in - margin),
            expires_at: now + expires_in,
            generation: *generation,
        };
        let handed = bearer(&token);
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(token);
        Ok(handed)
    }

    fn failed(&self, failure: Failure<TokenError>) -> TokenError {
        let system = self.system.clone();
        match failure {
            Failure::Refused { error } | Failure::Operation { error, .. } => error,
            Failure::Rejected { rejection, .. } => TokenError::Unavailable {
                system,
                reason: format!("the token endpoint's breaker is open after repeated failures ({rejection})"),
            },
            Failure::Timeout { .. } => TokenError::Unavailable {
                system,
                reason: format!("the token endpoint did not answer within {:?}", self.grant.timeout),
            },
            Failure::Cancelled { .. } => {
                TokenError::Unavailable { system, reason: "the token request was cancelled".to_owned() }
            }
        }
    }

    /// The token request and its answer.
    async fn request(&self) -> Result<Answered, TokenError> {
        let unavailable = |reason: String| TokenError::Unavailable { system: self.system.clone(), reason };
        let request = self.token_request()?;
        let answer = self.transport.send(request, Reading::Whole(MAX_TOKEN_ANSWER)).await.map_err(|e| {
            let kind = crate::classify::transport_kind(&*e.source);
            let kind = if kind == TransportKind::Other { e.kind } else { kind };
            let said = crate::error::chain(&*e.source);
            match kind {
                // The endpoint's own TLS or proxy refusal is a configuration error too.
                TransportKind::Tls(_) | TransportKind::ProxyAuth => TokenError::Misconfigured {
                    system: self.system.clone(),
                    reason: format!("{}: {said}", kind.as_str()),
                },
                _ => unavailable(format!("the token endpoint: {said}")),
            }
        })?;
        let (parts, body) = answer.into_parts();
        let body = match body {
            AnswerBody::Whole(body) => body,
            AnswerBody::Streaming(..) => return Err(unavailable("a token answer over 64 KiB".to_owned())),
        };
        parse(&self.system, parts.status, &body)
    }

    /// The token request: the grant's form, the client's authentication.
    fn token_request(&self) -> Result<http::Request<OutBody>, TokenError> {
        let unavailable = |reason: String| TokenError::Unavailable { system: self.system.clone(), reason };
        let grant = &self.grant;
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "client_credentials");
        if let Some(scope) = &grant.scope {
            form.append_pair("scope", scope);
        }
        if let Some(audience) = &grant.audience {
            form.append_pair("audience", audience);
        }
        let mut request = http::Request::builder()
            .method(Method::POST)
            .uri(&grant.token_url)
            .header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(http::header::ACCEPT, "application/json");
        let secret = grant.secret.as_ref().map_or("", Secret::expose);
        match grant.client_auth {
            ClientAuth::Basic => {
                use base64::Engine as _;
                // RFC 6749 §2.3.1: each part form-encoded before joining.
                let encode = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
                let pair = format!("{}:{}", encode(&grant.client_id), encode(secret));
                let mut value = HeaderValue::from_str(&format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                ))
                .map_err(|_| unavailable("the client id cannot be sent in a header".to_owned()))?;
                value.set_sensitive(true);
                request = request.header(http::header::AUTHORIZATION, value);
            }
            ClientAuth::Body => {
                form.append_pair("client_id", &grant.client_id);
                form.append_pair("client_secret", secret);
            }
            ClientAuth::Tls => {
                form.append_pair("client_id", &grant.client_id);
            }
        }
        request.body(OutBody::Full(Bytes::from(form.finish()))).map_err(|_| {
            unavailable(format!("token_url {} is not a URL", ballast::redact_url(&grant.token_url)))
        })
    }
}

fn bearer(token: &Token) -> Bearer {
    Bearer { value: token.bearer.clone(), generation: token.generation }
}

/// A token answer read (its token sensitive: `Debug` shows none of it).
#[derive(Debug)]
struct Answered {
    bearer: HeaderValue,
    expires_in: Duration,
}

/// The longest a token is used without an `expires_in`: a 401 renews it earlier.
const UNSAID_LIFETIME: Duration = Duration::from_secs(3600);

/// The token in an answer of the endpoint (RFC 6749 §5.1, §5.2).
fn parse(system: &str, status: http::StatusCode, body: &[u8]) -> Result<Answered, TokenError> {
    #[derive(serde::Deserialize)]
    struct Issued {
        access_token: Option<String>,
        token_type: Option<String>,
        expires_in: Option<serde_json::Value>,
        error: Option<String>,
    }
    let unavailable = |reason: String| TokenError::Unavailable { system: system.to_owned(), reason };
    let issued: Option<Issued> = serde_json::from_slice(body).ok();
    if status == http::StatusCode::BAD_REQUEST || status == http::StatusCode::UNAUTHORIZED {
        let error = issued.and_then(|i| i.error).unwrap_or_else(|| "no error code".to_owned());
        let error: String = error.chars().filter(|c| !c.is_control()).take(100).collect();
        return Err(TokenError::Refused { system: system.to_owned(), status: status.as_u16(), error });
    }
    if !status.is_success() {
        return Err(unavailable(format!("the token endpoint answered {status}")));
    }
    let issued =
        issued.ok_or_else(|| unavailable("the token endpoint's answer is not a token (JSON)".to_owned()))?;
    let token = issued
        .access_token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| unavailable("the token endpoint's answer has no access_token".to_owned()))?;
    if issued.token_type.as_deref().is_some_and(|t| !t.eq_ignore_ascii_case("bearer")) {
        return Err(unavailable("the token endpoint gave a token that is not a Bearer token".to_owned()));
    }
    let seconds = match issued.expires_in {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    let expires_in = seconds.map_or(UNSAID_LIFETIME, Duration::from_secs).min(UNSAID_LIFETIME * 24);
    if expires_in.is_zero() {
        return Err(unavailable("the token endpoint gave a token that expires at once".to_owned()));
    }
    let mut bearer = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| unavailable("the access token cannot be sent in a header".to_owned()))?;
    bearer.set_sensitive(true);
    Ok(Answered { bearer, expires_in })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_rfc_6749_says() {
        let ok = parse(
            "bank",
            http::StatusCode::OK,
            br#"{"access_token":"t1","token_type":"bearer","expires_in":"120"}"#,
        )
        .unwrap();
        assert_eq!(ok.expires_in, Duration::from_secs(120));
        assert!(ok.bearer.is_sensitive());
        let refused =
            parse("bank", http::StatusCode::UNAUTHORIZED, br#"{"error":"invalid_client"}"#).unwrap_err();
        assert_eq!(refused.kind(), TransportKind::CredentialRefused);
        assert!(refused.to_string().contains("invalid_client"), "{refused}");
        let down = parse("bank", http::StatusCode::SERVICE_UNAVAILABLE, b"").unwrap_err();
        assert_eq!(down.kind(), TransportKind::Credential);
        let mac =
            parse("bank", http::StatusCode::OK, br#"{"access_token":"t","token_type":"mac"}"#).unwrap_err();
        assert_eq!(mac.kind(), TransportKind::Credential);
    }
}
