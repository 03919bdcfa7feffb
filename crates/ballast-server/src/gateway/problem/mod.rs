//! The gateway's own answers: `application/problem+json` (RFC 9457) with a
//! `ballast` member saying why, in words a client can branch on. Each
//! [`Reason`] has one status ([`Reason::status`]), and a call that ended
//! without an answer becomes its problem in one place
//! ([`Problem::from_failure`]).

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ballast::Rule;
use serde::Serialize;

mod failure;

/// Why the gateway answered itself rather than with the upstream's answer:
/// the `reason` of the problem's `ballast` member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The system's breaker is open: it fails fast until its next probe.
    BreakerOpen,
    /// The system's bulkhead is full.
    BulkheadFull,
    /// The system's rate limit had no permit for the attempt within its wait.
    RateLimited,
    /// The request goes to a route declared `keyed_write` without an
    /// `Idempotency-Key`: refused unsent (R-RES-RE-1).
    KeyRequired,
    /// The `Idempotency-Key` already names another request (another method,
    /// path, query, body or content type) in flight, deferred, or sent within
    /// the key's life (the system's `key_ttl`): refused unsent, without the
    /// earlier request's answer or task (R-RES-RE-1).
    KeyReused,
    /// An earlier write of the request's `Ballast-Sequence` waits in the
    /// durable queue: the write was not sent, so it cannot overtake it.
    SequencePending,
    /// A write that matches none of the routes of a system that declares
    /// its writes (`unrouted = "refuse"`, the default with routes): refused
    /// unsent (R-RES-RE-1).
    Unrouted,
    /// A method the gateway never forwards (`TRACE`, `CONNECT`).
    MethodNotAllowed,
    /// The retry budget had no retry left for the system.
    BudgetExhausted,
    /// An attempt or the whole call timed out.
    Timeout,
    /// No complete answer from the system after the last attempt.
    Transport,
    /// The system's TLS certificate does not chain to a root it trusts
    /// (a private or national CA not in `[systems.NAME.tls] ca_file`):
    /// nothing sent, not retried (R-RES-RE-X2).
    TlsUntrusted,
    /// The system's TLS certificate has expired or is not valid yet.
    TlsExpired,
    /// The system's TLS certificate is for another name (`server_name`).
    TlsNameMismatch,
    /// The system refused the handshake for want of an acceptable client
    /// certificate (`cert_file` and `key_file`, or `pkcs12_file`).
    TlsClientCertRefused,
    /// No TLS version or cipher both sides speak, or no TLS at all.
    TlsProtocol,
    /// The system's answer was larger than `[gateway] max_answer`, the most
    /// read whole: the request was sent and may have been applied.
    AnswerTooLarge,
    /// The egress proxy could not be reached or refused the tunnel, after
    /// the last attempt: nothing reached the system.
    ProxyRefused,
    /// The egress proxy wants credentials (407): `proxy_auth_env`.
    ProxyAuthRequired,
    /// No access token for the system (its token endpoint down or slow):
    /// nothing was sent.
    TokenUnavailable,
    /// The token endpoint refused the system's client credentials.
    TokenRefused,
    /// No system of that name is configured.
    UnknownSystem,
    /// The `Idempotency-Key` header is not a valid key.
    BadKey,
    /// The path has a `.` or `..` segment: it could leave the system's base URL.
    BadPath,
    /// The request already came through this gateway: its system's
    /// `base_url` points back at the gateway.
    LoopDetected,
    /// The request body did not arrive within `[gateway] body_read_timeout`.
    BodyTimeout,
    /// The `Ballast-Callback` header names a URL callbacks may not go to
    /// (a host not in `[gateway] callback_hosts`, or not an http(s) URL),
    /// or callbacks are not configured: refused unsent.
    BadCallback,
    /// A browser marked the request cross-site: the gateway serves
    /// services, not web pages.
    CrossSite,
    /// A write to defer carries a credential header, and no seal key is
    /// configured to store it sealed (`[queue] seal_key_env`).
    SealKeyMissing,
    /// The request body is larger than `[gateway] max_body`.
    TooLarge,
    /// The request cannot be forwarded as it is (a header the upstream
    /// request cannot carry, a path that is not a call).
    BadRequest,
    /// The admin listener was asked for a `Host` that is not one of its names.
    UnknownHost,
    /// The request lacks the gateway's token.
    Unauthorized,
    /// Too many wrong tokens lately, from this address or at this listener.
    TokenThrottled,
    /// Nothing there: no task of that id, or a path the gateway does not serve.
    NotFound,
    /// The write should have been deferred, but the queue could not store it.
    QueueUnavailable,
    /// `GET /tasks/{handle}?wait=…` while the listener holds as many
    /// waiting callers as it takes (`[gateway] max_waiters`): ask again
    /// after `Retry-After`, or without `wait`.
    TooManyWaiters,
    /// The gateway failed on its own (a deferral that stopped midway):
    /// whether the write reached the system is unknown.
    Internal,
    /// The gateway is shutting down and the call did not finish by the
    /// drain's deadline: a read may be asked again (another replica), a
    /// keyed write resent with its key; any other write's outcome is
    /// unknown (`sent: true`, with the call's id).
    Draining,
}

impl Reason {
    /// The status every answer of this reason has.
    ///
    /// ```
    /// use axum::http::StatusCode;
    /// use ballast_server::gateway::problem::Reason;
    ///
    /// assert_eq!(Reason::BreakerOpen.status(), StatusCode::SERVICE_UNAVAILABLE);
    /// assert_eq!(Reason::KeyRequired.status(), StatusCode::BAD_REQUEST);
    /// ```
    pub fn status(self) -> StatusCode {
        match self {
            Reason::BreakerOpen
            | Reason::BulkheadFull
            | Reason::RateLimited
            | Reason::BudgetExhausted
            | Reason::QueueUnavailable
            | Reason::TooManyWaiters
            | Reason::Draining => StatusCode::SERVICE_UNAVAILABLE,
            Reason::KeyRequired
            | Reason::Unrouted
            | Reason::BadKey
            | Reason::BadPath
            | Reason::SealKeyMissing
            | Reason::BadCallback
            | Reason::BadRequest => StatusCode::BAD_REQUEST,
            Reason::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Reason::SequencePending => StatusCode::CONFLICT,
            Reason::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Reason::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Reason::Transport
            | Reason::AnswerTooLarge
            | Reason::TlsUntrusted
            | Reason::TlsExpired
            | Reason::TlsNameMismatch
            | Reason::TlsClientCertRefused
            | Reason::TlsProtocol
            | Reason::ProxyRefused
            | Reason::ProxyAuthRequired
            | Reason::TokenRefused => StatusCode::BAD_GATEWAY,
            Reason::TokenUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Reason::UnknownSystem | Reason::NotFound => StatusCode::NOT_FOUND,
            Reason::LoopDetected => StatusCode::LOOP_DETECTED,
            Reason::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Reason::CrossSite => StatusCode::FORBIDDEN,
            Reason::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Reason::UnknownHost => StatusCode::MISDIRECTED_REQUEST,
            Reason::Unauthorized => StatusCode::UNAUTHORIZED,
            Reason::TokenThrottled => StatusCode::TOO_MANY_REQUESTS,
            Reason::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// The `ballast` member of a problem.
#[derive(Debug, Clone, Serialize)]
struct Detail {
    reason: Reason,
    attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "rule_id")]
    rule: Option<Rule>,
    /// For `transport`: whether the request may have reached the system
    /// (false: the connection never opened, nothing was sent).
    #[serde(skip_serializing_if = "Option::is_none")]
    sent: Option<bool>,
    /// The route the request matched, `POST /payments`.
    #[serde(skip_serializing_if = "Option::is_none")]
    route: Option<String>,
    /// For a write whose outcome is unknown: the id the gateway's log
    /// names it by.
    #[serde(skip_serializing_if = "Option::is_none")]
    call_id: Option<uuid::Uuid>,
}

/// A rule as its id, `R-RES-RE-1`.
fn rule_id<S: serde::Serializer>(rule: &Option<Rule>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(rule.map_or("", Rule::id))
}

/// A problem document, ready to send.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    #[serde(skip)]
    status: StatusCode,
    #[serde(skip)]
    retry_after: Option<Duration>,
    title: &'static str,
    #[serde(rename = "status")]
    code: u16,
    detail: String,
    ballast: Detail,
}

/// The `Retry-After` of a `503 queue_unavailable`.
pub const QUEUE_RETRY_AFTER: Duration = Duration::from_secs(2);

impl Problem {
    /// A problem for `reason` (with its [status](Reason::status)), saying `detail`.
    pub fn new(reason: Reason, detail: impl Into<String>) -> Self {
        let status = reason.status();
        Self {
            status,
            // A database away comes back in its own time: ask again soon,
            // with the same key — a write it stored after all is joined.
            retry_after: (reason == Reason::QueueUnavailable).then_some(QUEUE_RETRY_AFTER),
            title: status.canonical_reason().unwrap_or("Error"),
            code: status.as_u16(),
            detail: detail.into(),
            ballast: Detail { reason, attempts: 0, rule: None, sent: None, route: None, call_id: None },
        }
    }

    /// Attempts made before the gateway answered (also `Ballast-Attempts`).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.ballast.attempts = attempts;
        self
    }

    /// The rule that decided the outcome.
    pub fn rule(mut self, rule: Option<Rule>) -> Self {
        self.ballast.rule = rule;
        self
    }

    /// The route the request matched.
    pub fn route(mut self, route: &str) -> Self {
        self.ballast.route = Some(route.to_owned());
        self
    }

    /// Whether the request may have reached the system.
    pub fn sent(mut self, sent: bool) -> Self {
        self.ballast.sent = Some(sent);
        self
    }

    /// The id the gateway's log names the call by.
    pub fn call_id(mut self, id: uuid::Uuid) -> Self {
        self.ballast.call_id = Some(id);
        self
    }

    /// A `Retry-After` to send, rounded up to whole seconds.
    pub fn retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        headers.insert(super::ATTEMPTS, HeaderValue::from(self.ballast.attempts));
        // Tells the gateway's own answers from an upstream's problem+json
        // without parsing the body.
        if let Ok(reason) = serde_json::to_value(self.ballast.reason) {
            if let Some(reason) = reason.as_str().and_then(|r| HeaderValue::from_str(r).ok()) {
                headers.insert(super::PROBLEM, reason);
            }
        }
        if let Some(wait) = self.retry_after {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ballast::{Class, Failure, Rejection, StopReason, TimeoutKind};
    use ballast_http::{HttpError, TlsFailure, TransportKind};

    use super::{Problem, Reason};

    /// A transport failure of `kind` after `attempts`.
    fn transport(kind: TransportKind, class: Class, attempts: u32, stop: StopReason) -> Failure<HttpError> {
        let error = HttpError::Transport {
            kind,
            class,
            url: "https://bank.example/payments".into(),
            source: "the peer said no".into(),
        };
        Failure::Operation { error, class, attempts, stop }
    }

    /// Every failure the gateway answers for a call, with the reason and
    /// the rule it is answered with: the detail says what happened and what
    /// to do in a person's words, names its rule once (and no other), and
    /// says "attempt(s)" or "permanent error" nowhere — the problem's
    /// `attempts` and `rule` members carry those.
    #[test]
    fn every_failure_of_a_call_says_why_in_a_person_s_words_and_its_rule_once() {
        use StopReason::{Exhausted, Permanent};
        let tls = |failure| transport(TransportKind::Tls(failure), Class::Permanent, 1, Permanent);
        let failures = [
            (tls(TlsFailure::Untrusted), Reason::TlsUntrusted, Some("R-RES-RE-X2")),
            (tls(TlsFailure::Expired), Reason::TlsExpired, Some("R-RES-RE-X2")),
            (tls(TlsFailure::NameMismatch), Reason::TlsNameMismatch, Some("R-RES-RE-X2")),
            (tls(TlsFailure::ClientCertRefused), Reason::TlsClientCertRefused, Some("R-RES-RE-X2")),
            (tls(TlsFailure::Protocol), Reason::TlsProtocol, Some("R-RES-RE-X2")),
            (
                transport(TransportKind::ProxyAuth, Class::Permanent, 1, Permanent),
                Reason::ProxyAuthRequired,
                Some("R-RES-RE-X2"),
            ),
            (
                transport(TransportKind::CredentialRefused, Class::Permanent, 1, Permanent),
                Reason::TokenRefused,
                Some("R-RES-RE-X2"),
            ),
            (
                transport(TransportKind::Proxy, Class::Transient, 3, Exhausted),
                Reason::ProxyRefused,
                Some("R-RES-RE-3"),
            ),
            (
                transport(TransportKind::Credential, Class::Transient, 3, Exhausted),
                Reason::TokenUnavailable,
                Some("R-RES-RE-3"),
            ),
            (
                transport(TransportKind::Reset, Class::Transient, 3, Exhausted),
                Reason::Transport,
                Some("R-RES-RE-3"),
            ),
            (
                transport(TransportKind::Connect, Class::Transient, 3, Exhausted),
                Reason::Transport,
                Some("R-RES-RE-3"),
            ),
            (
                transport(TransportKind::TooLarge, Class::Permanent, 1, Permanent),
                Reason::AnswerTooLarge,
                Some("R-RES-RE-X2"),
            ),
            (
                Failure::Timeout { kind: TimeoutKind::Total, attempts: 2, stop: StopReason::TotalTimeout },
                Reason::Timeout,
                None,
            ),
            (
                Failure::Rejected {
                    rejection: Rejection::BreakerOpen { retry_in: Duration::from_secs(3) },
                    attempts: 0,
                    last_error: None,
                },
                Reason::BreakerOpen,
                None,
            ),
            (
                Failure::Rejected { rejection: Rejection::BulkheadFull, attempts: 0, last_error: None },
                Reason::BulkheadFull,
                None,
            ),
            (
                Failure::Rejected {
                    rejection: Rejection::RateLimited { retry_in: Duration::from_millis(300) },
                    attempts: 0,
                    last_error: None,
                },
                Reason::RateLimited,
                None,
            ),
        ];
        for (failure, reason, rule) in failures {
            let problem = Problem::from_failure(&failure, "bank");
            let json = serde_json::to_value(&problem).unwrap();
            let detail = json["detail"].as_str().unwrap();
            assert_eq!(problem.ballast.reason, reason, "{detail}");
            assert_eq!(json["ballast"]["rule"].as_str(), rule, "{detail}");
            assert!(!detail.contains("attempt(s)") && !detail.contains("permanent error"), "{detail}");
            for id in ["R-RES-RE-1", "R-RES-RE-X2", "R-RES-RE-2", "R-RES-RE-3"] {
                let times = detail.matches(id).count();
                assert!(times <= usize::from(rule == Some(id)), "{id} {times} times in {detail}");
            }
        }
    }

    /// Every refusal made before anything was sent, in the words its caller
    /// reads: why, in a person's words, the rule once where one decided it,
    /// and none of the attempt count a refusal never made.
    #[test]
    fn a_refusal_unsent_says_why_and_its_rule_once() {
        let refusals = [
            (
                HttpError::Refused(ballast_http::Refused::KeyRequired { route: "POST /payments".into() }),
                Reason::KeyRequired,
                Some("R-RES-RE-1"),
            ),
            (
                HttpError::KeyReused { key: "k-1".into(), first_in: "in flight" },
                Reason::KeyReused,
                Some("R-RES-RE-1"),
            ),
            (
                HttpError::Refused(ballast_http::Refused::Unrouted {
                    method: http::Method::POST,
                    path: "/x".into(),
                    routes: "POST /payments".into(),
                }),
                Reason::Unrouted,
                Some("R-RES-RE-1"),
            ),
            (
                HttpError::SequencePending { sequence: "pay:customer/42".into(), task_id: 7 },
                Reason::SequencePending,
                None,
            ),
            (HttpError::BadPath { path: "a/../b".into() }, Reason::BadPath, None),
            (HttpError::SealKeyMissing { header: "authorization".into() }, Reason::SealKeyMissing, None),
            (
                HttpError::InvalidRequest { reason: "a header value is not text".into() },
                Reason::BadRequest,
                None,
            ),
        ];
        for (error, reason, rule) in refusals {
            let problem = Problem::from_failure(&Failure::unsent(error), "pay");
            let json = serde_json::to_value(&problem).unwrap();
            let detail = json["detail"].as_str().unwrap();
            assert_eq!(problem.ballast.reason, reason, "{detail}");
            assert!(!detail.contains("attempt(s)") && !detail.contains("permanent error"), "{detail}");
            assert!(detail.contains("not sent") || detail.contains("nothing was sent"), "{detail}");
            for id in ["R-RES-RE-1", "R-RES-RE-X2"] {
                let times = detail.matches(id).count();
                assert_eq!(times, usize::from(rule == Some(id)), "{id} in {detail}");
            }
        }
    }
}
