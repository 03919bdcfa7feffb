//! TLS on `ballast serve`'s own listeners: `[serve] tls_cert_file` and
//! `tls_key_file` (the admin listener, and the gateway unless `[gateway]`
//! names files of its own) — a PEM certificate chain and its key, read and
//! checked as a system's client identity is ([`ballast_tls`]), spoken with
//! rustls. The files are looked at again when a connection comes at least
//! [`LOOK_EVERY`] after the last look: a renewed certificate is served
//! without a restart, and one that cannot be read keeps the previous in
//! service (and says so in the log).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ballast_tls::rustls::server::{ClientHello, ResolvesServerCert};
use ballast_tls::rustls::sign::CertifiedKey;
use ballast_tls::rustls::{self, ServerConfig};
use ballast_tls::{IdentityFiles, Stamp, TlsError};

/// How often the files are looked at, at most.
pub const LOOK_EVERY: Duration = Duration::from_secs(10);

/// Why a listener's certificate cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ListenerTlsError {
    /// The files cannot be read, or are not a pair.
    #[error(transparent)]
    Files(#[from] TlsError),
    /// The certificate's validity has ended: every client would refuse it.
    #[error("the certificate in {} expired on {not_after}: every client would refuse it; renew it", path.display())]
    Expired {
        /// The certificate's file.
        path: PathBuf,
        /// Its end, in RFC 3339.
        not_after: String,
    },
}

/// A listener's TLS: its acceptor, serving the files' current certificate.
#[derive(Clone)]
pub struct ListenerTls {
    acceptor: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for ListenerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ListenerTls")
    }
}

impl ListenerTls {
    /// TLS with the certificate chain of `cert_file` and the key of
    /// `key_file`; refused when they cannot be read, do not match, or the
    /// certificate has expired.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Self, ListenerTlsError> {
        let files = IdentityFiles::pem(cert_file, key_file);
        let identity = files.read()?;
        if identity.facts.expired(std::time::SystemTime::now()) {
            let not_after = humantime::format_rfc3339_seconds(identity.facts.not_after).to_string();
            return Err(ListenerTlsError::Expired { path: cert_file.to_owned(), not_after });
        }
        let paths: Vec<PathBuf> = vec![cert_file.to_owned(), key_file.to_owned()];
        let stamp = Stamp::of(paths.iter().map(PathBuf::as_path));
        let current = Current { files, paths, stamp, key: identity.key, looked: Instant::now() };
        let resolver = Arc::new(Files(Mutex::new(current)));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::from)?
            .with_no_client_auth()
            .with_cert_resolver(resolver);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)) })
    }

    /// The acceptor a connection's handshake goes through.
    pub(crate) fn acceptor(&self) -> &tokio_rustls::TlsAcceptor {
        &self.acceptor
    }
}

/// The files and the certificate read from them last.
struct Current {
    files: IdentityFiles,
    paths: Vec<PathBuf>,
    stamp: Stamp,
    key: Arc<CertifiedKey>,
    looked: Instant,
}

/// The certificate of the files, read again when they change.
struct Files(Mutex<Current>);

impl std::fmt::Debug for Files {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Files")
    }
}

impl ResolvesServerCert for Files {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut current = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if current.looked.elapsed() >= LOOK_EVERY {
            current.looked = Instant::now();
            let stamp = Stamp::of(current.paths.iter().map(PathBuf::as_path));
            if stamp != current.stamp {
                match current.files.read() {
                    Ok(identity) => {
                        tracing::info!(file = %current.paths[0].display(), "the listener's certificate changed; serving the new one");
                        current.key = identity.key;
                        current.stamp = stamp;
                    }
                    // Half-written during a rotation, most likely: the old one serves until it reads.
                    Err(error) => {
                        tracing::warn!(%error, "cannot read the listener's new certificate; serving the previous one")
                    }
                }
            }
        }
        Some(Arc::clone(&current.key))
    }
}
