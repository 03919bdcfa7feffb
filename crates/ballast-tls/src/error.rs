//! Why TLS material could not be used: each error names the file and what
//! to do, never its contents.

use std::path::PathBuf;
use std::time::SystemTime;

/// TLS material that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no certificate in PEM (`-----BEGIN CERTIFICATE-----`).
    #[error("{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// A certificate in a file cannot be parsed or trusted as a CA.
    #[error("{} holds a certificate that cannot be used: {reason}", path.display())]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A key file holds no private key in PEM.
    #[error(
        "{} holds no PEM private key (-----BEGIN PRIVATE KEY-----, RSA PRIVATE KEY or EC PRIVATE KEY)",
        path.display()
    )]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// The private key is of a kind rustls cannot sign with.
    #[error("the private key in {} cannot be used: {reason}; use an RSA, ECDSA (P-256, P-384) or Ed25519 key", path.display())]
    UnsupportedKey {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The private key is not the certificate's.
    #[error(
        "the private key in {} does not match the certificate in {}: they must be a pair (a rotation that replaced one \
         file but not the other?)",
        key.display(),
        cert.display()
    )]
    KeyMismatch {
        /// The certificate's file.
        cert: PathBuf,
        /// The key's file.
        key: PathBuf,
    },
    /// A PKCS#12 bundle cannot be opened.
    #[error("{} cannot be opened as PKCS#12: {reason}", path.display())]
    Pkcs12 {
        /// The file.
        path: PathBuf,
        /// Why (a wrong password, no key in it, …).
        reason: String,
    },
    /// The client certificate's validity has ended.
    #[error(
        "the client certificate in {} expired on {}: the server will refuse it; renew it with its issuer",
        path.display(),
        humantime_utc(*not_after)
    )]
    Expired {
        /// The certificate's file.
        path: PathBuf,
        /// Its end.
        not_after: SystemTime,
    },
    /// `roots = "none"` without a `ca_file`: nothing could be trusted.
    #[error("roots = \"none\" trusts only the ca_file, and there is none: no server could be trusted")]
    NothingTrusted,
    /// The operating system's store could not be read (`roots = "system"`).
    #[error("cannot read the operating system's certificate store: {0}")]
    SystemRoots(String),
    /// `server_name` is not a DNS name or an address.
    #[error("server_name {0:?} is not a DNS name or an IP address")]
    ServerName(String),
    /// rustls refused the settings.
    #[error("the TLS settings cannot be used: {0}")]
    Rustls(#[from] rustls::Error),
}

/// `at` as an RFC 3339 date in UTC, to the second.
pub(crate) fn humantime_utc(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}
