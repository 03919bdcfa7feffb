//! Everything that can go wrong talking to an external system, each error
//! carrying the class the adapter gave it (R-RES-RE-X2).

use std::time::Duration;

use ballast::{Class, Classification, Classify};
use http::{Method, StatusCode};

use crate::{Response, TransportKind};

/// An HTTP call that failed: every arm is one a call can produce (building
/// the system fails with [`SystemBuildError`](crate::SystemBuildError)).
///
/// Errors of a call reach the caller inside [`ballast::Failure`], which says
/// how many attempts ran and why no further one was made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// Its plan refused it before anything was sent: a write no route
    /// declares, a route's key missing, a read that is not one
    /// (R-RES-RE-1).
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The system answered with a 4xx or 5xx status. The response is kept so
    /// the adapter can map it to a domain error.
    #[error("{}", status_message(*status, *class))]
    Status {
        /// The status.
        status: StatusCode,
        /// Transient (5xx, a keyed write's 409 in flight, opted-in 408/429) or permanent.
        class: Class,
        /// The wait the server asked for in `Retry-After`, if any.
        retry_after: Option<Duration>,
        /// The whole response, body included (boxed: it is large and errors
        /// should be small).
        response: Box<Response>,
    },
    /// The request did not get a complete response.
    #[error("{} ({url}): {}", transport_message(*kind), shown_source(*kind, &**source))]
    Transport {
        /// What went wrong below HTTP.
        kind: TransportKind,
        /// Its class under the system's [`RetryOn`](crate::RetryOn).
        class: Class,
        /// Where it was sent, its secrets masked (query values; the whole
        /// path of a secret URL).
        url: String,
        /// The transport's error (hyper's or reqwest's), with the OS's underneath.
        source: crate::BoxError,
    },
    /// The response's body is not the JSON the caller expected: a permanent
    /// failure of the call (asking again gets the same body).
    #[error("the response ({status}) is not the JSON expected: {source}")]
    Decode {
        /// The response's status.
        status: StatusCode,
        /// Why it did not parse.
        source: serde_json::Error,
    },
    /// The attempt panicked — a bug below the policy, in a transport or in
    /// what reads the answer. The request may have reached the system, so
    /// its outcome is unknown: classified as a reset connection is
    /// (transient: a read or a keyed write is retried with the same key, a
    /// write sent once is not), never as a failure of the write.
    #[error("the attempt panicked ({message}): the request may have been applied, its outcome is unknown")]
    Panicked {
        /// The panic's message.
        message: String,
    },
    /// The idempotency key is already used by another request — another
    /// method, path, query, body or content type — in flight, deferred, or
    /// sent within the key's life ([`crate::key_life`]):
    /// a key names one request, so this one is refused unsent (R-RES-RE-1)
    /// and never gets the earlier request's answer or task.
    #[error(
        "the idempotency key {key:?} already names another request ({first_in}) with another method, path, \
         query, body or content type: a key names one request, so this one was not sent (R-RES-RE-1); make a \
         new key for a new request (derive it from the payment attempt, not the order, when the amount can \
         change), and send a retry exactly as the first"
    )]
    KeyReused {
        /// The key.
        key: String,
        /// Where the first request is: `in flight`, `deferred`, or `sent
        /// within the key's life`.
        first_in: &'static str,
    },
    /// An earlier write of the request's sequence waits in the durable
    /// queue: sent now, this one would overtake it, so it was not sent.
    #[error(
        "an earlier write of sequence {sequence:?} (task {task_id}) is still waiting in the durable queue: this \
         write was not sent, so it cannot overtake it; defer it behind (write_or_defer; the gateway: Prefer: \
         respond-async) or send it once that task is done"
    )]
    SequencePending {
        /// The sequence.
        sequence: String,
        /// The task that holds it.
        task_id: i64,
    },
    /// The request could not be built (path, query, header or JSON body).
    #[error("invalid request: {reason}; it was not sent")]
    InvalidRequest {
        /// What is wrong.
        reason: String,
    },
    /// The request's path has a dot segment (`.` or `..`, raw or
    /// percent-encoded, with `/` or `\\`): it could leave the system's base
    /// URL, so it is refused unsent.
    #[error(
        "the path {path:?} has a `.` or `..` segment (in some spelling): it could reach paths of the \
         system outside its base URL, so it was not sent; name the resource without dot segments"
    )]
    BadPath {
        /// The path given (at most 200 characters of it).
        path: String,
    },
    /// A write to defer carries a credential header, and no seal key is
    /// configured to store it sealed: refused unsent.
    #[cfg(feature = "queue")]
    #[error(
        "the request carries {header}, a credential, which a deferred write stores only sealed, and no seal \
         key is configured (`[queue] seal_key_env`, or HttpSystemBuilder::seal_key): it was not sent; \
         configure a key, or send the request without deferring it"
    )]
    SealKeyMissing {
        /// The header's name.
        header: String,
    },
    /// The request's [`SendGate`](crate::SendGate) closed before an
    /// attempt was sent: that attempt sent nothing, and none follows.
    #[error("not sent: {reason}")]
    Stopped {
        /// Why the gate closed.
        reason: String,
    },
    /// A sealed part of a stored delivery does not open.
    #[cfg(feature = "queue")]
    #[error("the stored delivery's {part} cannot be opened: {source}")]
    Unseal {
        /// `body` or the header's name.
        part: String,
        /// Why.
        source: crate::seal::SealError,
    },
}

impl HttpError {
    /// The status, when the system answered with an error status.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            HttpError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The error response, to map to a domain error.
    pub fn response(&self) -> Option<&Response> {
        match self {
            HttpError::Status { response, .. } => Some(response),
            _ => None,
        }
    }

    /// Whether the request certainly did not reach the system: the
    /// connection was never made, the TLS handshake failed, the proxy or
    /// the token endpoint stood in the way, or the HTTP/2 stream was refused
    /// ([`TransportKind::nothing_sent`]), so a write without a guarantee of
    /// deduplication may be sent again (R-RES-RE-X1 forbids repeating a
    /// write that may have been applied, not one that never left).
    pub fn nothing_sent(&self) -> bool {
        match self {
            HttpError::Transport { kind, .. } => kind.nothing_sent(),
            HttpError::Stopped { .. } => true,
            _ => false,
        }
    }

    /// The transport failure's kind, if this is one.
    pub fn transport_kind(&self) -> Option<TransportKind> {
        match self {
            HttpError::Transport { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// A transport failure; the URL reqwest quotes in its message has its
    /// secrets masked, and all of its path when `secret_path` (a URL that is
    /// itself a secret, such as a Slack webhook's).
    pub(crate) fn transport(
        kind: TransportKind,
        class: Class,
        url: String,
        source: crate::BoxError,
        secret_path: bool,
    ) -> Self {
        let source = match source.downcast::<reqwest::Error>() {
            Ok(reqwest) => Box::new(without_secrets(*reqwest, secret_path)),
            Err(other) => other,
        };
        HttpError::Transport { kind, class, url, source }
    }

    pub(crate) fn invalid(reason: impl std::fmt::Display) -> Self {
        HttpError::InvalidRequest { reason: reason.to_string() }
    }
}

/// `error` quoting its URL with the secrets masked ([`ballast::redact_url`]).
fn without_secrets(error: reqwest::Error, secret_path: bool) -> reqwest::Error {
    let Some(original) = error.url() else { return error };
    let mut url = original.clone();
    if secret_path {
        url.set_path("/***");
        url.set_query(None);
    }
    let shown = ballast::redact_url(url.as_str());
    if shown == original.as_str() {
        return error;
    }
    match reqwest::Url::parse(&shown) {
        Ok(url) => error.with_url(url),
        Err(_) => error.without_url(),
    }
}

impl Classify for HttpError {
    fn classify(&self) -> Classification {
        match self {
            HttpError::Status { status, class, retry_after, .. } => {
                // As `system::verdict` judged the answer: a throttle tells the
                // rate limit whatever its class.
                let throttled = *status == StatusCode::TOO_MANY_REQUESTS
                    || (*status == StatusCode::SERVICE_UNAVAILABLE && retry_after.is_some());
                Classification { class: *class, retry_after: *retry_after, throttled, elsewhere: false }
            }
            // Nothing reached the system past its proxy or for want of a
            // token, or the configuration stood in the way (TLS, the proxy's
            // or the token endpoint's refusal): its breaker is not told, as
            // the system may be well.
            HttpError::Transport { class, kind, .. }
                if kind.is_configuration()
                    || matches!(kind, TransportKind::Proxy | TransportKind::Credential) =>
            {
                Classification::of(*class).outside_the_system()
            }
            HttpError::Transport { class: Class::Transient, .. } | HttpError::Panicked { .. } => {
                Classification::transient()
            }
            // The caller stopped it, not the system: its breaker is not told.
            HttpError::Stopped { .. } => Classification::permanent().outside_the_system(),
            _ => Classification::permanent(),
        }
    }
}

pub(crate) fn status_message(status: StatusCode, class: Class) -> String {
    match class {
        Class::Permanent if status.is_client_error() => {
            format!(
                "the system refused the request with {status}, a contract error: map it to a domain error"
            )
        }
        Class::Permanent => {
            format!("the system answered {status}, which this system's retry_on does not list as transient")
        }
        Class::Transient => format!("the system answered {status}"),
    }
}

/// What a transport failure's source says: the whole chain for a kind whose
/// cause sits at its bottom (TLS, proxy, token), else the top.
fn shown_source(kind: TransportKind, source: &(dyn std::error::Error + Send + Sync + 'static)) -> String {
    match kind {
        TransportKind::Tls(_)
        | TransportKind::Proxy
        | TransportKind::ProxyAuth
        | TransportKind::Credential
        | TransportKind::CredentialRefused
        | TransportKind::Refused => chain(source),
        _ => source.to_string(),
    }
}

/// `error` and each of its sources, joined by `: ` — what a TLS or proxy
/// failure says only at the bottom of its chain ("client error (Connect):
/// invalid peer certificate: UnknownIssuer"). A source whose text repeats
/// the one above it is left out.
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut said: Vec<String> = Vec::new();
    let mut source = Some(error);
    while let Some(err) = source {
        let text = err.to_string();
        if !said.last().is_some_and(|last| last.contains(&text)) {
            said.push(text);
        }
        source = err.source();
    }
    said.join(": ")
}

pub(crate) fn transport_message(kind: TransportKind) -> &'static str {
    use crate::classify::TlsFailure;
    match kind {
        TransportKind::Connect => "could not connect (nothing was sent)",
        TransportKind::ConnectTimeout => "connect timeout (nothing was sent)",
        TransportKind::Tls(TlsFailure::Untrusted) => {
            "TLS: the system's certificate is not signed by a CA this client trusts (nothing was sent; not \
             retried: it will not verify on the next attempt either)"
        }
        TransportKind::Tls(TlsFailure::Expired) => {
            "TLS: the system's certificate has expired or is not valid yet (nothing was sent; not retried)"
        }
        TransportKind::Tls(TlsFailure::NameMismatch) => {
            "TLS: the system's certificate is for another name than the one connected to (nothing was sent; not \
             retried)"
        }
        TransportKind::Tls(TlsFailure::ClientCertRefused) => {
            "TLS: the system refused the handshake for want of an acceptable client certificate (nothing was \
             processed; not retried)"
        }
        TransportKind::Tls(_) => {
            "TLS: no protocol version or cipher both sides speak, or the system does not speak TLS (nothing was \
             sent; not retried)"
        }
        TransportKind::Proxy => "the egress proxy did not lead to the system (nothing reached it)",
        TransportKind::ProxyAuth => "the egress proxy wants credentials (nothing reached the system; not retried)",
        TransportKind::Credential => "not sent",
        TransportKind::CredentialRefused => "not sent, not retried",
        TransportKind::Refused => "the system refused the HTTP/2 stream before processing it (safe to send again)",
        TransportKind::TooLarge => {
            "the answer is larger than the client reads whole (max_answer): the request was sent and may have been \
             applied; not retried, as the next answer would be as large"
        }
        TransportKind::ReadTimeout => {
            "read timeout: the system went silent; the request may have been applied"
        }
        TransportKind::Reset => "connection reset: the request may have been applied",
        TransportKind::Incomplete => "incomplete response: the request may have been applied",
        _ => "transport error",
    }
}

/// Why a request's plan refused it ([`crate::plan`]): nothing was sent, and
/// asking again gets the same refusal (R-RES-RE-1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// `read` was given a request that may have a side effect.
    #[error(
        "{method} is not a read: only GET, HEAD, OPTIONS and POSTs built with Request::post_query may be \
         retried as reads (R-RES-RE-1); send writes with write(&key, ..) or write_once(..)"
    )]
    NotARead {
        /// The request's method.
        method: Method,
    },
    /// The request goes to a route declared `keyed_write` and carries no
    /// idempotency key: refused unsent, since without one a lost answer
    /// could neither be retried nor deduplicated (R-RES-RE-1).
    #[error(
        "{route} is declared keyed_write: a write to it must carry an idempotency key, and this one has none; \
         it was not sent (R-RES-RE-1). Send it with write(&key, ..) (the gateway: an Idempotency-Key header), \
         the key made once per user action and stored"
    )]
    KeyRequired {
        /// The route, `POST /payments`.
        route: String,
    },
    /// A write that matches none of the system's routes, whose undeclared
    /// writes are refused ([`Unrouted::Refuse`](crate::routes::Unrouted)):
    /// whatever the path's spelling, a write the routes did not declare is
    /// not sent (R-RES-RE-1).
    #[error(
        "{method} {path} matches none of the system's routes ({routes}): a system that declares routes sends \
         only the writes they declare, so this one was not sent (R-RES-RE-1); declare its route, or set \
         `unrouted = \"once\"` for the system to send undeclared writes once"
    )]
    Unrouted {
        /// The request's method.
        method: Method,
        /// Its path (at most 200 characters of it).
        path: String,
        /// The routes declared, by name.
        routes: String,
    },
}
