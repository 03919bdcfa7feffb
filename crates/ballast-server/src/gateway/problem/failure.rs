//! A call that ended without an answer, as the gateway's problem: the
//! reason its failure gives, the attempts it made, the rule that decided
//! it, and the same told in a person's words.

use std::time::Duration;

use ballast::{Failure, Rejection, Rule, StopReason, TimeoutKind};
use ballast_http::{HttpError, Refused, TlsFailure, TransportKind};

use super::{Problem, Reason};

impl Problem {
    /// The problem of a call to `system` that ended without an answer: the
    /// reason its failure gives, the attempts it made and the rule that
    /// decided it.
    pub fn from_failure(failure: &Failure<HttpError>, system: &str) -> Self {
        let rule = match failure.error() {
            // Refused for want of the key a route requires, or of a route: R-RES-RE-1.
            Some(
                HttpError::Refused(Refused::KeyRequired { .. } | Refused::Unrouted { .. })
                | HttpError::KeyReused { .. },
            ) => Some(Rule::Re1),
            // The way the system is reached is wrong: asking again cannot help.
            _ if failure
                .error()
                .and_then(HttpError::transport_kind)
                .is_some_and(|k| k.is_configuration()) =>
            {
                Some(Rule::ReX2)
            }
            _ => failure.stop_reason().rule(),
        };
        let said = told(failure, system, rule);
        let problem = match failure {
            Failure::Rejected { rejection, .. } => Self::rejected(*rejection, said),
            _ if failure.stop_reason() == StopReason::BudgetExhausted => {
                let detail = format!("{said}: the retry budget of {system} has no retry left");
                Problem::new(Reason::BudgetExhausted, detail).retry_after(Duration::from_secs(1))
            }
            Failure::Timeout { .. } => Problem::new(Reason::Timeout, said),
            // Refused before anything was sent: the error says why in the
            // caller's words, with its rule; the attempts and the stop
            // reason ("permanent, 0 attempts") would only repeat it.
            Failure::Refused { error } => match (error, error.to_string()) {
                (HttpError::BadPath { .. }, said) => Problem::new(Reason::BadPath, said),
                // The system's route requires a key (R-RES-RE-1): refused unsent.
                // Said in the caller's terms: the header, not the library's call.
                (HttpError::Refused(Refused::KeyRequired { route }), _) => {
                    let detail = format!(
                        "{route} is declared keyed_write: a write to it must carry an Idempotency-Key header, and this \
                         request has none; nothing was sent (R-RES-RE-1). Send the key made once per user action and \
                         stored with it, the same key on every retry of that action"
                    );
                    Problem::new(Reason::KeyRequired, detail).route(route)
                }
                (HttpError::KeyReused { .. }, said) => Problem::new(Reason::KeyReused, said),
                (HttpError::SequencePending { .. }, said) => Problem::new(Reason::SequencePending, said),
                (HttpError::Refused(Refused::Unrouted { .. }), said) => Problem::new(Reason::Unrouted, said),
                (HttpError::SealKeyMissing { .. }, said) => Problem::new(Reason::SealKeyMissing, said),
                (_, said) => Problem::new(Reason::BadRequest, said),
            },
            _ if failure.error().and_then(HttpError::transport_kind) == Some(TransportKind::TooLarge) => {
                let detail = format!(
                    "{said}. The request reached {system}: a write carrying an Idempotency-Key to a system that \
                     deduplicates by it is safe to send again with the same key; any other write's outcome is \
                     unknown. Raise [gateway] max_answer if such answers are expected, or read them as a stream \
                     (a read without Prefer: respond-async streams past [gateway] buffer_answer)"
                );
                Problem::new(Reason::AnswerTooLarge, detail).sent(true)
            }
            _ => match failure.error().and_then(HttpError::transport_kind) {
                Some(kind)
                    if kind.nothing_sent()
                        && kind != TransportKind::Connect
                        && kind != TransportKind::ConnectTimeout =>
                {
                    Self::unconnected(kind, system, said)
                }
                _ => {
                    let sent = !failure.error().is_some_and(HttpError::nothing_sent);
                    Problem::new(Reason::Transport, said).sent(sent)
                }
            },
        };
        problem.attempts(failure.attempts()).rule(rule)
    }

    /// The problem of a call that never reached its system for the way it
    /// is reached — TLS, the egress proxy, the token endpoint — saying
    /// what to change.
    fn unconnected(kind: TransportKind, system: &str, said: String) -> Self {
        let (reason, fix) = match kind {
            TransportKind::Tls(TlsFailure::Untrusted) => (
                Reason::TlsUntrusted,
                format!(
                    "if {system} is signed by a private or national CA, add its CA as [systems.{system}.tls] ca_file \
                     (a PEM bundle), or set roots = \"system\" if this machine's store trusts it"
                ),
            ),
            TransportKind::Tls(TlsFailure::Expired) => (
                Reason::TlsExpired,
                format!("{system}'s certificate has expired or is not valid yet: check this machine's clock, and tell {system}'s operators"),
            ),
            TransportKind::Tls(TlsFailure::NameMismatch) => (
                Reason::TlsNameMismatch,
                format!("set [systems.{system}.tls] server_name to the name its certificate is for"),
            ),
            TransportKind::Tls(TlsFailure::ClientCertRefused) => (
                Reason::TlsClientCertRefused,
                format!(
                    "give [systems.{system}.tls] the client certificate {system} issued you (cert_file and key_file, or \
                     pkcs12_file), not expired, of the CA it expects"
                ),
            ),
            TransportKind::Tls(_) => (
                Reason::TlsProtocol,
                format!("check [systems.{system}.tls] min_version, and that {system}'s base_url is https:// only if it speaks TLS"),
            ),
            TransportKind::ProxyAuth => (
                Reason::ProxyAuthRequired,
                format!("set [systems.{system}] proxy_auth_env to a variable holding user:password for the proxy"),
            ),
            TransportKind::Proxy => (
                Reason::ProxyRefused,
                "nothing reached the system: the request is safe to send again once the proxy lets it through".to_owned(),
            ),
            TransportKind::Credential => (
                Reason::TokenUnavailable,
                "nothing was sent: send it again later (a keyed write with Prefer: respond-async is deferred)".to_owned(),
            ),
            TransportKind::CredentialRefused => (
                Reason::TokenRefused,
                format!("check the variables [systems.{system}.auth] client_id_env and client_secret_env name"),
            ),
            _ => (Reason::Transport, "nothing was processed: safe to send again".to_owned()),
        };
        let mut fix = fix.chars();
        let fix: String =
            fix.next().map(|first| first.to_uppercase().chain(fix).collect()).unwrap_or_default();
        let problem = Problem::new(reason, format!("{said}. {fix}")).sent(false);
        match reason {
            Reason::TokenUnavailable | Reason::ProxyRefused => problem.retry_after(Duration::from_secs(1)),
            _ => problem,
        }
    }

    /// The problem of an attempt the policy refused: the system is
    /// unavailable for now, and `Retry-After` says until when.
    fn rejected(rejection: Rejection, said: String) -> Self {
        match rejection {
            Rejection::BreakerOpen { retry_in } | Rejection::BreakerHalfOpen { retry_in } => {
                Problem::new(Reason::BreakerOpen, said).retry_after(retry_in)
            }
            Rejection::BulkheadFull => {
                Problem::new(Reason::BulkheadFull, said).retry_after(Duration::from_secs(1))
            }
            Rejection::RateLimited { retry_in } => {
                Problem::new(Reason::RateLimited, said).retry_after(retry_in)
            }
            _ => Problem::new(Reason::BreakerOpen, said),
        }
    }
}

/// The operation's own error, then how many times it was `tried` and why
/// it was not tried again (a configuration error's own words say that).
fn said(error: &HttpError, tried: String, stop: StopReason) -> String {
    let configuration = error.transport_kind().is_some_and(|k| k.is_configuration());
    let why = match stop {
        _ if configuration => "",
        StopReason::Permanent => "not sent again: asking again gets the same answer",
        StopReason::Exhausted => "every attempt allowed was made",
        StopReason::NotRetryable => "not sent again: a write without an Idempotency-Key runs once",
        StopReason::NotDeduplicated => "not sent again: the system does not deduplicate by the key",
        StopReason::DeadlineWouldOverrun => "the next wait would overrun the call's deadline",
        StopReason::Nested => "the policy around this call retries it",
        _ => "",
    };
    let mut told = error.to_string();
    for part in [tried, why.to_owned()].iter().filter(|p| !p.is_empty()) {
        told.push_str(if told.ends_with(')') || told.contains("; ") { ", " } else { "; " });
        told.push_str(part);
    }
    told
}

/// What happened to a call, in a person's words: what went wrong, how
/// many times it was tried and why it was not tried again — the rule that
/// decided the outcome named once, at the end, and no other. (A failure's
/// own `Display`, "(permanent, 1 attempt(s); …)", is for logs.)
fn told(failure: &Failure<HttpError>, system: &str, rule: Option<Rule>) -> String {
    let tried = |attempts: u32| match attempts {
        0 => String::new(),
        1 => "tried once".to_owned(),
        n => format!("tried {n} times"),
    };
    let mut told = match failure {
        Failure::Refused { error } => said(error, tried(0), StopReason::Permanent),
        Failure::Operation { error, attempts, stop, .. } => said(error, tried(*attempts), *stop),
        Failure::Timeout { kind: TimeoutKind::Attempt, attempts, .. } => {
            format!("{system} did not answer within the attempt's timeout; {}", tried(*attempts))
        }
        Failure::Timeout { kind: TimeoutKind::Total, attempts, .. } => {
            format!("{system} did not answer within the call's total timeout; {}", tried(*attempts))
        }
        Failure::Rejected { rejection, attempts, last_error } => {
            let mut told = format!("{system} is unavailable: {rejection}");
            match attempts {
                0 => told.push_str("; nothing was sent"),
                n => told.push_str(&format!(" after it was {}", tried(*n))),
            }
            if let Some(error) = last_error {
                told.push_str(&format!("; the last attempt: {error}"));
            }
            told
        }
        Failure::Cancelled { attempts } => format!("the call was cancelled; {}", tried(*attempts)),
    };
    if let Some(rule) = rule.map(|r| r.id()).filter(|id| !told.contains(id)) {
        told.push_str(&format!(" ({rule})"));
    }
    told
}
