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
//! | 409 on a keyed write to a deduplicating system | permanent; transient by opt-in ("original still in flight") |
//! | every other 4xx | permanent, never retried |
//! | 1xx–3xx | success: the response is returned (redirects are not followed) |
//! | invalid request, TLS/protocol errors, anything else | permanent |
//!
//! A class switched off in [`RetryOn`] is permanent: it is neither retried nor,
//! by default, counted as a failure by the breaker. The classification itself
//! lives in the core ([`ballast::http_class`]), which also classifies a bare
//! `reqwest::Error` the same way.

pub use ballast::http_class::{RetryOn, TransportKind, UnknownClass};

#[cfg(feature = "client")]
pub(crate) use retry_after::retry_after;

#[cfg(feature = "client")]
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
