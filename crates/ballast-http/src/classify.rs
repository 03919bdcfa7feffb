//! Which HTTP outcomes are worth another attempt (R-RES-RE-X2), decided at the
//! adapter boundary so the policy only ever sees `Transient` or `Permanent`.
//!
//! | outcome | class |
//! |---|---|
//! | 5xx | transient ([`RetryOn::server_errors`]) |
//! | connection refused, other connect errors (nothing was sent) | transient ([`RetryOn::connect`]) |
//! | connect timeout, read/headers timeout | transient ([`RetryOn::timeouts`]) |
//! | connection reset or aborted, broken pipe, incomplete message | transient ([`RetryOn::reset`]) |
//! | the policy's own attempt timeout | always transient (decided by the core) |
//! | 408, 429 | permanent; transient by opt-in, with `Retry-After` |
//! | the egress proxy unreachable or refusing the tunnel, no access token to be had, an HTTP/2 stream refused (nothing reached the system) | transient ([`RetryOn::connect`]) |
//! | a TLS handshake that failed: certificate untrusted, expired, for another name; client certificate refused; no common protocol | permanent: it will fail the same way next time |
//! | the proxy's or the token endpoint's refusal of our credentials (407, `invalid_client`) | permanent: a configuration error |
//! | 409 on a keyed write to a deduplicating system | transient by default ("original still in flight"; [`RetryOn::conflict_in_flight`]) |
//! | every other 4xx | permanent, never retried |
//! | 1xx–3xx | success: the response is returned (redirects are not followed) |
//! | invalid request, protocol errors, anything else | permanent |
//!
//! A class switched off in [`RetryOn`] is permanent: it is neither retried nor,
//! by default, counted as a failure by the breaker. The classes and their
//! names live in [`ballast_vocab::http`], where `ballast lint` reads them; a
//! bare `reqwest::Error` is classified the same way through [`Reqwest`].

use std::error::Error as StdError;
use std::fmt;
use std::io;

use ballast::{Classification, Classify};

pub use ballast_vocab::http::{RetryOn, TlsFailure, TransportKind, UnknownClass};

pub(crate) use retry_after::retry_after;

/// The kind of a failure below HTTP, found by walking the error's source
/// chain, where reqwest, hyper, rustls and the OS leave the facts: a TLS
/// alert or certificate error, the egress proxy's refusal, an HTTP/2 stream
/// refused, `std::io::Error` kinds, hyper's incomplete-message flag.
pub fn transport_kind(error: &(dyn StdError + 'static)) -> TransportKind {
    if let Some(kind) = below_http(error) {
        return kind;
    }
    let connect = error.downcast_ref::<reqwest::Error>().is_some_and(reqwest::Error::is_connect);
    let mut timed_out = false;
    let mut found = None;
    let mut source = Some(error);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            match io.kind() {
                io::ErrorKind::TimedOut => timed_out = true,
                io::ErrorKind::ConnectionRefused => found = found.or(Some(TransportKind::Connect)),
                io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe => found = found.or(Some(TransportKind::Reset)),
                io::ErrorKind::UnexpectedEof => found = found.or(Some(TransportKind::Incomplete)),
                _ => {}
            }
        }
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_timeout() {
                timed_out = true;
            } else if h.is_incomplete_message() {
                found = found.or(Some(TransportKind::Incomplete));
            }
        }
        if err.downcast_ref::<reqwest::Error>().is_some_and(reqwest::Error::is_timeout) {
            timed_out = true;
        }
        source = err.source();
    }
    match (connect, timed_out) {
        (true, true) => TransportKind::ConnectTimeout,
        (true, false) => TransportKind::Connect,
        (false, true) => TransportKind::ReadTimeout,
        (false, false) => found.unwrap_or(TransportKind::Other),
    }
}

/// A failure that says what it is wherever it sits in the chain: TLS,
/// the egress proxy, a token, a refused HTTP/2 stream. An `io::Error`'s
/// `source()` skips the error it wraps, so that one is looked into too.
fn below_http(error: &(dyn StdError + 'static)) -> Option<TransportKind> {
    let mut source = Some(error);
    while let Some(err) = source {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(TransportKind::Tls(tls_failure(tls)));
        }
        if let Some(proxy) = err.downcast_ref::<crate::proxy::ProxyError>() {
            return Some(proxy.kind());
        }
        if let Some(token) = err.downcast_ref::<crate::credential::TokenError>() {
            return Some(token.kind());
        }
        if let Some(h2) = err.downcast_ref::<h2::Error>() {
            // Streams past a graceful GOAWAY's last id, or refused, were not
            // processed (RFC 9113 §8.7).
            let not_processed = h2.reason() == Some(h2::Reason::REFUSED_STREAM)
                || (h2.is_go_away() && h2.is_remote() && h2.reason() == Some(h2::Reason::NO_ERROR));
            if not_processed {
                return Some(TransportKind::Refused);
            }
        }
        if let Some(inner) = err.downcast_ref::<io::Error>().and_then(io::Error::get_ref) {
            if let Some(kind) = below_http(inner) {
                return Some(kind);
            }
        }
        source = err.source();
    }
    None
}

/// What a rustls error says of the handshake.
fn tls_failure(error: &rustls::Error) -> TlsFailure {
    use rustls::{AlertDescription as Alert, CertificateError as Cert};
    match error {
        rustls::Error::InvalidCertificate(
            Cert::Expired | Cert::ExpiredContext { .. } | Cert::NotValidYet | Cert::NotValidYetContext { .. },
        ) => TlsFailure::Expired,
        rustls::Error::InvalidCertificate(Cert::NotValidForName | Cert::NotValidForNameContext { .. }) => {
            TlsFailure::NameMismatch
        }
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
            TlsFailure::Untrusted
        }
        // Alerts the server sends about the certificate we presented, or
        // did not.
        rustls::Error::AlertReceived(
            Alert::CertificateRequired
            | Alert::BadCertificate
            | Alert::UnknownCA
            | Alert::CertificateUnknown
            | Alert::CertificateRevoked
            | Alert::CertificateExpired
            | Alert::UnsupportedCertificate
            | Alert::AccessDenied,
        ) => TlsFailure::ClientCertRefused,
        _ => TlsFailure::Protocol,
    }
}

/// The class of a reqwest error under `retry_on`: an error made by
/// `error_for_status` by its status (as for a write without a key: no
/// 409-in-flight), any other by its [`TransportKind`].
pub fn classify_reqwest(retry_on: RetryOn, error: &reqwest::Error) -> Classification {
    let class = match error.status() {
        Some(status) => retry_on.status_class(status, false),
        None => retry_on.transport_class(transport_kind(error)),
    };
    let throttled = error.status().is_some_and(|s| s == reqwest::StatusCode::TOO_MANY_REQUESTS);
    Classification { class, retry_after: None, throttled, elsewhere: false }
}

/// A bare `reqwest::Error`, classified by the default [`RetryOn`]: 5xx,
/// timeouts, refused and reset connections are transient; every 4xx and
/// anything else is permanent (R-RES-RE-X2) — so a policy can wrap plain
/// reqwest calls, `?` turning each `reqwest::Error` into one.
///
/// ```no_run
/// # async fn f(policy: ballast::Policy) -> Result<(), ballast::Failure<ballast_http::Reqwest>> {
/// use ballast_http::Reqwest;
///
/// let client = reqwest::Client::new();
/// let body = policy
///     .read(|_| async {
///         Ok::<_, Reqwest>(client.get("https://crm.example/orders/7").send().await?.error_for_status()?.text().await?)
///     })
///     .await?;
/// # let _ = body; Ok(()) }
/// ```
#[derive(Debug)]
pub struct Reqwest(pub reqwest::Error);

impl From<reqwest::Error> for Reqwest {
    fn from(error: reqwest::Error) -> Self {
        Reqwest(error)
    }
}

impl fmt::Display for Reqwest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl StdError for Reqwest {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

impl Classify for Reqwest {
    fn classify(&self) -> Classification {
        classify_reqwest(RetryOn::default(), &self.0)
    }
}

mod retry_after {
    use std::time::{Duration, SystemTime};

    use http::HeaderMap;

    /// The longest `Retry-After` taken at its word; a server asking for more is
    /// treated as asking for this much (no retry window is anywhere near it).
    const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

    /// The wait a response asks for in `Retry-After`: delay-seconds or an
    /// HTTP-date (a date in the past means "now"), at most a day.
    pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
        let value = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?.trim();
        let wait = match value.parse::<u64>() {
            Ok(secs) => Duration::from_secs(secs),
            Err(_) => {
                let at = httpdate::parse_http_date(value).ok()?;
                at.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO)
            }
        };
        Some(wait.min(MAX_RETRY_AFTER))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn retry_after_takes_seconds_or_a_date_and_is_capped_at_a_day() {
            let mut headers = HeaderMap::new();
            headers.insert(http::header::RETRY_AFTER, "7".parse().unwrap());
            assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
            headers.insert(http::header::RETRY_AFTER, "99999999999999999999".parse().unwrap());
            assert_eq!(retry_after(&headers), None, "not a number of seconds, not a date");
            headers.insert(http::header::RETRY_AFTER, "18446744073709551615".parse().unwrap());
            assert_eq!(retry_after(&headers), Some(MAX_RETRY_AFTER));
            headers.insert(http::header::RETRY_AFTER, "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
            assert_eq!(retry_after(&headers), Some(Duration::ZERO));
        }

        #[test]
        fn retry_after_reads_seconds_and_dates() {
            let mut h = HeaderMap::new();
            assert_eq!(retry_after(&h), None);
            h.insert(http::header::RETRY_AFTER, "2".parse().unwrap());
            assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
            let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(60));
            h.insert(http::header::RETRY_AFTER, later.parse().unwrap());
            let wait = retry_after(&h).unwrap();
            assert!(wait > Duration::from_secs(55) && wait <= Duration::from_secs(60), "{wait:?}");
            h.insert(http::header::RETRY_AFTER, "Thu, 01 Jan 1970 00:00:00 GMT".parse().unwrap());
            assert_eq!(retry_after(&h), Some(Duration::ZERO));
            h.insert(http::header::RETRY_AFTER, "soon".parse().unwrap());
            assert_eq!(retry_after(&h), None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_proxy_and_http2_failures_are_found_at_the_bottom_of_the_chain() {
        #[derive(Debug, thiserror::Error)]
        #[error("client error (Connect)")]
        struct Wrapped(#[source] io::Error);
        let tls = |e: rustls::Error| transport_kind(&Wrapped(io::Error::new(io::ErrorKind::InvalidData, e)));
        use rustls::{AlertDescription, CertificateError};
        assert_eq!(
            tls(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)),
            TransportKind::Tls(TlsFailure::Untrusted)
        );
        assert_eq!(
            tls(rustls::Error::InvalidCertificate(CertificateError::Expired)),
            TransportKind::Tls(TlsFailure::Expired)
        );
        assert_eq!(
            tls(rustls::Error::InvalidCertificate(CertificateError::NotValidForName)),
            TransportKind::Tls(TlsFailure::NameMismatch)
        );
        assert_eq!(
            tls(rustls::Error::AlertReceived(AlertDescription::CertificateRequired)),
            TransportKind::Tls(TlsFailure::ClientCertRefused)
        );
        assert_eq!(
            tls(rustls::Error::AlertReceived(AlertDescription::ProtocolVersion)),
            TransportKind::Tls(TlsFailure::Protocol)
        );
        let refused = h2::Error::from(h2::Reason::REFUSED_STREAM);
        assert_eq!(transport_kind(&refused), TransportKind::Refused);
        let reset = h2::Error::from(h2::Reason::INTERNAL_ERROR);
        assert_ne!(
            transport_kind(&reset),
            TransportKind::Refused,
            "a stream reset mid-way may have been processed"
        );
        let proxy = crate::proxy::ProxyError::AuthRequired { proxy: "proxy:3128".into() };
        assert_eq!(transport_kind(&Wrapped(io::Error::other(proxy))), TransportKind::ProxyAuth);
        for kind in [
            TransportKind::Tls(TlsFailure::Untrusted),
            TransportKind::ProxyAuth,
            TransportKind::CredentialRefused,
        ] {
            assert!(kind.nothing_sent() && kind.is_configuration());
            assert_eq!(RetryOn::default().transport_class(kind), ballast::Class::Permanent, "{kind:?}");
        }
        for kind in [TransportKind::Proxy, TransportKind::Credential, TransportKind::Refused] {
            assert!(kind.nothing_sent() && !kind.is_configuration());
            assert_eq!(RetryOn::default().transport_class(kind), ballast::Class::Transient, "{kind:?}");
        }
    }

    #[test]
    fn io_kinds_in_the_source_chain_decide_the_transport_kind() {
        #[derive(Debug, thiserror::Error)]
        #[error("wrapped")]
        struct Wrapped(#[source] io::Error);
        for (kind, want) in [
            (io::ErrorKind::ConnectionReset, TransportKind::Reset),
            (io::ErrorKind::BrokenPipe, TransportKind::Reset),
            (io::ErrorKind::UnexpectedEof, TransportKind::Incomplete),
            (io::ErrorKind::TimedOut, TransportKind::ReadTimeout),
            (io::ErrorKind::ConnectionRefused, TransportKind::Connect),
            (io::ErrorKind::PermissionDenied, TransportKind::Other),
        ] {
            assert_eq!(transport_kind(&Wrapped(kind.into())), want, "{kind:?}");
        }
    }
}
