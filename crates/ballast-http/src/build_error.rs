//! Why a system could not be built: what [`HttpSystemBuilder::build`]
//! refuses, apart from what a call can fail with ([`HttpError`]), so a match
//! on either has only the arms its phase can produce.
//!
//! [`HttpSystemBuilder::build`]: crate::HttpSystemBuilder::build
//! [`HttpError`]: crate::HttpError

use std::time::Duration;

/// A setting of an [`HttpSystem`](crate::HttpSystem) that cannot be built.
///
/// ```
/// use ballast_http::SystemBuildError;
///
/// let err = ballast_http::parse_base_url("ftp://files.example/").unwrap_err();
/// assert!(matches!(err, SystemBuildError::InvalidBaseUrl { .. }));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SystemBuildError {
    /// The system's base URL is unusable.
    #[error("invalid base URL {url:?}: {reason}; use an absolute http:// or https:// URL")]
    InvalidBaseUrl {
        /// The URL given, its secrets masked ([`ballast::redact_url`]).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The closure given to the builder's `policy` returned a builder of its
    /// own, named for another system.
    #[error(
        "the policy is named {policy:?} but the system is {system:?}: configure the builder that \
         .policy(|p| …) hands you instead of making a new one"
    )]
    NameMismatch {
        /// The system's name.
        system: String,
        /// The policy's name.
        policy: String,
    },
    /// A client timeout was set beside a client of the caller's own.
    #[error(
        "{setting} was set beside a client of your own: timeouts belong to that client; set them on \
         its builder (below the policy's attempt timeout) and drop them here"
    )]
    OwnClientTimeout {
        /// `"connect_timeout"` or `"read_timeout"`.
        setting: &'static str,
    },
    /// A connection setting (TLS, proxy, HTTP/2) was set beside a client of
    /// the caller's own, which makes its own connections.
    #[error(
        "{setting} was set beside a client of your own: that client makes its own connections; configure \
         {setting} on its builder and drop it here"
    )]
    OwnClientConnection {
        /// `"tls"`, `"proxy"` or `"http2"`.
        setting: &'static str,
    },
    /// The system's TLS files cannot be used.
    #[error("TLS: {0}")]
    Tls(#[from] ballast_tls::TlsError),
    /// `client_auth = "tls"` without a client certificate to authenticate with.
    #[error(
        "the OAuth 2.0 client authenticates by its TLS certificate (client_auth = \"tls\", RFC 8705) but the \
         system has none: give it cert_file and key_file (or pkcs12_file) in its TLS settings"
    )]
    TokenWithoutCertificate,
    /// The token endpoint's URL is not an absolute http(s) URL.
    #[error("token_url {url:?} is not an absolute http:// or https:// URL")]
    TokenUrl {
        /// The URL, its secrets masked.
        url: String,
    },
    /// A client timeout that could never fire, or that is zero.
    #[error(
        "the {which} timeout is {timeout:?} but the policy's attempt timeout is {attempt:?}: it must be \
         above zero and at most the attempt timeout (connect ≤ read ≤ attempt ≤ total)"
    )]
    TimeoutHierarchy {
        /// `"connect"` or `"read"`.
        which: &'static str,
        /// The value given.
        timeout: Duration,
        /// The policy's attempt timeout.
        attempt: Duration,
    },
    /// The idempotency header name is not a valid header name.
    #[error("invalid idempotency header name {name:?}: use a token such as \"Idempotency-Key\"")]
    InvalidHeaderName {
        /// The name given.
        name: String,
    },
    /// A header set on every request (or named to be sealed) is not valid.
    #[error("invalid header: {what} is not valid; use a token for the name and visible ASCII for the value")]
    InvalidHeader {
        /// Which header, and whether its name or its value (the value is never shown).
        what: String,
    },
    /// The policy could not be built.
    #[error(transparent)]
    Policy(#[from] ballast::BuildError),
    /// The egress proxy's URL cannot be used.
    #[error(transparent)]
    Proxy(#[from] crate::ProxyUrlError),
}

impl From<ballast_vocab::http::InvalidBaseUrl> for SystemBuildError {
    fn from(e: ballast_vocab::http::InvalidBaseUrl) -> Self {
        SystemBuildError::InvalidBaseUrl { url: e.url, reason: e.reason }
    }
}

/// Parses a system's base URL exactly as
/// [`HttpSystemBuilder::build`](crate::HttpSystemBuilder::build) does — with
/// [`ballast_vocab::http::parse_base_url`], as `ballast lint` does: an
/// absolute `http://` or `https://` URL that can be a base, without query or
/// fragment.
///
/// ```
/// assert!(ballast_http::parse_base_url("http://x").is_ok());
/// assert!(ballast_http::parse_base_url("https://h/?q=1").is_err());
/// ```
pub fn parse_base_url(url: &str) -> Result<url::Url, SystemBuildError> {
    Ok(ballast_vocab::http::parse_base_url(url)?)
}
