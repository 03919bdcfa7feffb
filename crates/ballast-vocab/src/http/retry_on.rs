//! Which HTTP outcomes are worth another attempt (R-RES-RE-X2): the one
//! classification `ballast-http` uses for its systems (and for a bare
//! `reqwest::Error`, through `ballast_http::Reqwest`) and `ballast lint`
//! checks `retry_on` against.
//!
//! | outcome | class by default | switch |
//! |---|---|---|
//! | 5xx | transient | [`RetryOn::server_errors`] |
//! | connection refused, other connect errors (nothing was sent) | transient | [`RetryOn::connect`] |
//! | connect timeout, read/headers timeout | transient | [`RetryOn::timeouts`] |
//! | connection reset or aborted, broken pipe, incomplete message | transient | [`RetryOn::reset`] |
//! | 409 on a keyed write to a deduplicating system ("still in flight") | transient | [`RetryOn::conflict_in_flight`] |
//! | 408, 429 | permanent | [`RetryOn::status_408`], [`RetryOn::status_429`] |
//! | the egress proxy unreachable or refusing the tunnel (nothing reached the system) | transient | [`RetryOn::connect`] |
//! | no access token to be had (the token endpoint down; nothing was sent) | transient | [`RetryOn::connect`] |
//! | an HTTP/2 stream refused (`REFUSED_STREAM`, past a `GOAWAY`): not processed | transient | [`RetryOn::connect`] |
//! | a TLS failure: the server's certificate untrusted, expired or for another name, the client certificate refused, no common protocol | permanent, never retried: it will not verify on the next attempt either | — |
//! | an answer larger than the client reads whole (`max_answer`): the request was sent | permanent: the next answer is as large | — |
//! | the proxy or the token endpoint refusing our credentials (407, `invalid_client`) | permanent: a configuration error | — |
//! | every other 4xx, protocol errors, anything else | permanent, never retried | — |

use crate::Class;

/// The outcome classes an HTTP system treats as transient.
///
/// The default is `{5xx, timeout, connect, reset, 409-in-flight}`; 408 and
/// 429 are opt-in because they mean "try again" only when the system
/// documents it.
///
/// # 409 on a keyed write
///
/// The IETF Idempotency-Key draft (draft-ietf-httpapi-idempotency-key-header-07,
/// its section "Error Scenarios") and Stripe answer **409 Conflict** to a
/// request that repeats a key while the original request with that key is
/// still being processed. For a keyed write to a system that deduplicates by
/// key, that is not a contract error: the original may well succeed, and the
/// same key asked again later gets its answer. So it is transient by default,
/// retried after backoff in memory and in the durable queue — never without
/// the key, and only where [`status_class`](Self::status_class) is told the
/// write is keyed and deduplicated. A system whose 409 means something else
/// leaves `"409-in-flight"` out of its `retry_on` (`ballast lint` notes what
/// that means); every other call keeps 409 permanent.
///
/// ```
/// use ballast_vocab::http::RetryOn;
///
/// let on = RetryOn::default().with_429(true);
/// assert_eq!(on, RetryOn::from_names(&["5xx", "timeout", "connect", "reset", "409-in-flight", "429"]).unwrap());
/// assert!(RetryOn::from_names(&["4xx"]).unwrap_err().to_string().contains("R-RES-RE-X2"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RetryOn {
    /// 5xx responses.
    pub server_errors: bool,
    /// Connect timeouts and read/headers timeouts of the client.
    pub timeouts: bool,
    /// Refused and otherwise failed connections (the request was not sent).
    pub connect: bool,
    /// Reset or aborted connections and incomplete responses.
    pub reset: bool,
    /// 408 Request Timeout.
    pub status_408: bool,
    /// 429 Too Many Requests.
    pub status_429: bool,
    /// 409 Conflict on a keyed write: the original request with this key is
    /// still being processed (IETF Idempotency-Key draft).
    pub conflict_in_flight: bool,
}

impl Default for RetryOn {
    fn default() -> Self {
        Self {
            server_errors: true,
            timeouts: true,
            connect: true,
            reset: true,
            status_408: false,
            status_429: false,
            conflict_in_flight: true,
        }
    }
}

/// A `retry_on` name that is not an outcome class.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown retry_on class {name:?}: use {} (other 4xx are contract errors and are never retried, R-RES-RE-X2)",
    RetryOn::names().collect::<Vec<_>>().join(", ")
)]
pub struct UnknownClass {
    /// The name given.
    pub name: String,
}

impl RetryOn {
    /// Every class off: nothing is transient but the policy's own attempt timeout.
    pub const fn none() -> Self {
        Self {
            server_errors: false,
            timeouts: false,
            connect: false,
            reset: false,
            status_408: false,
            status_429: false,
            conflict_in_flight: false,
        }
    }

    /// The `retry_on` names of the outcomes transient by default: those
    /// transient by nature, and a keyed write's 409 "still in flight".
    pub const DEFAULT_NAMES: [&'static str; 5] = ["5xx", "timeout", "connect", "reset", "409-in-flight"];

    /// The `retry_on` names of the 4xx outcomes that are transient only where
    /// the system documents it, off by default.
    pub const OPT_IN_NAMES: [&'static str; 2] = ["408", "429"];

    /// Every `retry_on` name: [`DEFAULT_NAMES`](Self::DEFAULT_NAMES), then
    /// [`OPT_IN_NAMES`](Self::OPT_IN_NAMES).
    pub fn names() -> impl Iterator<Item = &'static str> + Clone {
        Self::DEFAULT_NAMES.into_iter().chain(Self::OPT_IN_NAMES)
    }

    /// A `retry_on` entry as it is read: trimmed and lower-cased, so `" 5XX"` names `5xx`.
    pub fn normalize_name(entry: &str) -> String {
        entry.trim().to_ascii_lowercase()
    }

    /// Exactly the named classes, each name read by
    /// [`normalize_name`](Self::normalize_name): any of [`names`](Self::names)
    /// (the names of the TOML `retry_on` list).
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Self, UnknownClass> {
        let mut on = Self::none();
        for name in names {
            let flag = on
                .flag(&Self::normalize_name(name.as_ref()))
                .ok_or_else(|| UnknownClass { name: name.as_ref().to_owned() })?;
            *flag = true;
        }
        Ok(on)
    }

    /// The switch a normalized name stands for.
    fn flag(&mut self, name: &str) -> Option<&mut bool> {
        // In the order of `names()`.
        let flags = [
            &mut self.server_errors,
            &mut self.timeouts,
            &mut self.connect,
            &mut self.reset,
            &mut self.conflict_in_flight,
            &mut self.status_408,
            &mut self.status_429,
        ];
        Self::names().zip(flags).find_map(|(n, flag)| (n == name).then_some(flag))
    }

    /// Sets whether 5xx responses are transient.
    pub const fn with_5xx(mut self, on: bool) -> Self {
        self.server_errors = on;
        self
    }

    /// Sets whether client timeouts (connect, read) are transient.
    pub const fn with_timeouts(mut self, on: bool) -> Self {
        self.timeouts = on;
        self
    }

    /// Sets whether refused and failed connections are transient.
    pub const fn with_connect(mut self, on: bool) -> Self {
        self.connect = on;
        self
    }

    /// Sets whether reset connections and incomplete messages are transient.
    pub const fn with_reset(mut self, on: bool) -> Self {
        self.reset = on;
        self
    }

    /// Sets whether 408 is transient.
    pub const fn with_408(mut self, on: bool) -> Self {
        self.status_408 = on;
        self
    }

    /// Sets whether 429 is transient.
    pub const fn with_429(mut self, on: bool) -> Self {
        self.status_429 = on;
        self
    }

    /// Sets whether 409 on a keyed write means "original still in flight".
    pub const fn with_409_in_flight(mut self, on: bool) -> Self {
        self.conflict_in_flight = on;
        self
    }

    /// The class of an error status. `keyed_write` is true only for a keyed
    /// write to a system that deduplicates by its key.
    pub fn status_class(&self, status: impl Into<u16>, keyed_write: bool) -> Class {
        let transient = match status.into() {
            500..=599 => self.server_errors,
            408 => self.status_408,
            429 => self.status_429,
            409 => keyed_write && self.conflict_in_flight,
            _ => false,
        };
        class(transient)
    }

    /// The class of a transport failure of this kind.
    pub fn transport_class(&self, kind: TransportKind) -> Class {
        class(match kind {
            TransportKind::Connect
            | TransportKind::Proxy
            | TransportKind::Credential
            | TransportKind::Refused => self.connect,
            TransportKind::ConnectTimeout | TransportKind::ReadTimeout => self.timeouts,
            TransportKind::Reset | TransportKind::Incomplete => self.reset,
            TransportKind::Tls(_)
            | TransportKind::ProxyAuth
            | TransportKind::CredentialRefused
            | TransportKind::TooLarge
            | TransportKind::Other => false,
        })
    }
}

fn class(transient: bool) -> Class {
    if transient {
        Class::Transient
    } else {
        Class::Permanent
    }
}

/// How a request failed below HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportKind {
    /// The connection could not be made (refused, unreachable, DNS): nothing was sent.
    Connect,
    /// The connection was not made within the connect timeout.
    ConnectTimeout,
    /// No bytes arrived within the read timeout (headers or body).
    ReadTimeout,
    /// The connection was reset or aborted, or the pipe broke.
    Reset,
    /// The connection closed before a complete response arrived.
    Incomplete,
    /// The TLS handshake failed: the request was never processed, and the
    /// same handshake will fail again until the configuration changes.
    Tls(TlsFailure),
    /// The egress proxy could not be reached or refused the tunnel:
    /// nothing reached the system.
    Proxy,
    /// The egress proxy asked for credentials it was not given, or refused
    /// them (407): a configuration error; nothing reached the system.
    ProxyAuth,
    /// No access token could be had for the system (its token endpoint
    /// down or slow): the request was not sent.
    Credential,
    /// The token endpoint refused the client's credentials: a configuration
    /// error; the request was not sent.
    CredentialRefused,
    /// An HTTP/2 stream the server refused (`REFUSED_STREAM`) or dropped
    /// with a `GOAWAY` before processing it: safe to send again.
    Refused,
    /// The answer was larger than the client reads whole (`max_answer`):
    /// the request was sent and may have been applied; asking again gets
    /// as large an answer.
    TooLarge,
    /// Anything else (a protocol error, an invalid request): not worth another attempt.
    Other,
}

/// Why a TLS handshake failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The server's certificate does not chain to a trusted root (a
    /// private or national CA not in `ca_file`).
    Untrusted,
    /// The server's certificate has expired (or is not valid yet).
    Expired,
    /// The server's certificate is not for the name the URL (or
    /// `server_name`) gives.
    NameMismatch,
    /// The server refused the handshake for want of an acceptable client
    /// certificate (none presented, unknown issuer, expired, revoked).
    ClientCertRefused,
    /// No protocol version or cipher both sides speak, or the other side
    /// does not speak TLS at all.
    Protocol,
}

impl TransportKind {
    /// A short stable name, e.g. `"connect_timeout"`, `"tls_untrusted"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            TransportKind::Connect => "connect",
            TransportKind::ConnectTimeout => "connect_timeout",
            TransportKind::ReadTimeout => "read_timeout",
            TransportKind::Reset => "reset",
            TransportKind::Incomplete => "incomplete",
            TransportKind::Tls(TlsFailure::Untrusted) => "tls_untrusted",
            TransportKind::Tls(TlsFailure::Expired) => "tls_expired",
            TransportKind::Tls(TlsFailure::NameMismatch) => "tls_name_mismatch",
            TransportKind::Tls(TlsFailure::ClientCertRefused) => "tls_client_cert_refused",
            TransportKind::Tls(TlsFailure::Protocol) => "tls_protocol",
            TransportKind::Proxy => "proxy",
            TransportKind::ProxyAuth => "proxy_auth",
            TransportKind::Credential => "credential",
            TransportKind::CredentialRefused => "credential_refused",
            TransportKind::Refused => "refused_stream",
            TransportKind::TooLarge => "too_large",
            TransportKind::Other => "other",
        }
    }

    /// Whether a failure of this kind is the configuration's, not the
    /// system's moment: a certificate that does not verify, a proxy or a
    /// token endpoint refusing our credentials. Never retried, never
    /// deferred: the next attempt would fail the same way.
    pub const fn is_configuration(self) -> bool {
        matches!(self, TransportKind::Tls(_) | TransportKind::ProxyAuth | TransportKind::CredentialRefused)
    }

    /// Whether a failure of this kind means the system never processed the
    /// request: the connection was not made, the handshake failed, the
    /// proxy or the token endpoint stood in the way, or the stream was
    /// refused. A write may then be sent again whatever the system's
    /// contract (R-RES-RE-X1 forbids repeating a write that may have been
    /// applied, not one that never arrived).
    pub const fn nothing_sent(self) -> bool {
        matches!(
            self,
            TransportKind::Connect
                | TransportKind::ConnectTimeout
                | TransportKind::Tls(_)
                | TransportKind::Proxy
                | TransportKind::ProxyAuth
                | TransportKind::Credential
                | TransportKind::CredentialRefused
                | TransportKind::Refused
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_table() {
        let default = RetryOn::default();
        let all = RetryOn::default().with_408(true).with_429(true).with_409_in_flight(true);
        let t = Class::Transient;
        let p = Class::Permanent;
        for (status, keyed, on, want) in [
            (500_u16, false, default, t),
            (503, true, default, t),
            (400, false, all, p),
            (404, true, all, p),
            (408, false, default, p),
            (408, false, all, t),
            (429, false, default, p),
            (429, false, all, t),
            (409, true, default, t),
            (409, false, default, p),
            (409, true, RetryOn::default().with_409_in_flight(false), p),
            (409, false, all, p),
            (409, true, all, t),
            (503, false, RetryOn::none(), p),
        ] {
            assert_eq!(on.status_class(status, keyed), want, "{status} keyed={keyed} {on:?}");
        }
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        let every = ["5xx", "timeout", "connect", "reset", "408", "429", "409-in-flight"];
        let on = RetryOn::from_names(&every).unwrap();
        assert_eq!(on, RetryOn::default().with_408(true).with_429(true));
        assert_eq!(RetryOn::from_names(&RetryOn::DEFAULT_NAMES).unwrap(), RetryOn::default());
        let without = RetryOn::from_names(&["5xx", "timeout", "connect", "reset"]).unwrap();
        assert_eq!(without, RetryOn::default().with_409_in_flight(false));
        assert_eq!(RetryOn::from_names::<&str>(&[]).unwrap(), RetryOn::none());
        let err = RetryOn::from_names(&["5xx", "404"]).unwrap_err();
        assert_eq!(err.name, "404");
    }
}
