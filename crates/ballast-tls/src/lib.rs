//! # ballast-tls — a system's TLS material
//!
//! A bank's API is reached over TLS whose server certificate a national or
//! private CA signed, and it admits only callers presenting the client
//! certificate it issued them. This crate reads what such a system needs —
//! the roots it trusts ([`Roots`], plus a `ca_file`), the client identity
//! ([`IdentityFiles`]: a PEM certificate and key, or a PKCS#12 bundle), the
//! name to verify ([`TlsSettings::server_name`]) and the lowest version
//! ([`TlsVersion`]) — and turns it into a rustls [`ClientConfig`](rustls::ClientConfig).
//!
//! The same reading serves `ballast lint` and the running client, so the
//! checker and the runtime cannot disagree about a file: an unreadable file,
//! a key that does not match its certificate, or an expired certificate is a
//! [`TlsError`] naming the file and what to do. A [`Stamp`] of the files
//! tells when they changed, so a rotated certificate is taken without a
//! restart.
//!
//! Private keys and passwords are never shown: [`Secret`] prints as `***`,
//! and no error quotes a file's contents.
//!
//! ```no_run
//! use ballast_tls::{IdentityFiles, Roots, TlsSettings};
//!
//! let bank = TlsSettings {
//!     roots: Roots::None, // only the bank's own CA
//!     ca_file: Some("/etc/bank/ca.pem".into()),
//!     identity: Some(IdentityFiles::pem("/etc/bank/client.pem", "/etc/bank/client.key")),
//!     ..TlsSettings::default()
//! };
//! let loaded = bank.load()?;
//! let config = loaded.config; // a rustls::ClientConfig, ALPN left to the connector
//! # let _ = config;
//! # Ok::<(), ballast_tls::TlsError>(())
//! ```

mod client;
mod error;
mod material;
mod settings;
mod stamp;

pub use client::Loaded;
pub use error::TlsError;
pub use material::{read_ca_file, CertFacts, Identity};
pub use settings::{IdentityFiles, Roots, Secret, TlsSettings, TlsVersion, UnknownWord};
pub use stamp::Stamp;

/// How long before its end a client certificate is worth a warning (lint)
/// and an alert (`ballast serve`).
pub const EXPIRY_WARNING: std::time::Duration = std::time::Duration::from_secs(14 * 24 * 3600);

pub use rustls;
