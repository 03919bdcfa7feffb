//! Reading the files: a CA bundle, a client identity (PEM pair or PKCS#12)
//! checked as a pair, and the facts of a certificate lint and the expiry
//! metric need.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::settings::IdentityFiles;
use crate::TlsError;

/// What a certificate says of itself: whom it names and when it is valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFacts {
    /// Its subject, `CN=shop,O=Shop Ltd`.
    pub subject: String,
    /// Its serial number, in hex.
    pub serial: String,
    /// The start of its validity.
    pub not_before: SystemTime,
    /// The end of its validity.
    pub not_after: SystemTime,
}

impl CertFacts {
    /// The facts of a DER certificate.
    pub fn of(der: &[u8]) -> Result<CertFacts, String> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
        let at = |t: &x509_parser::time::ASN1Time| {
            let secs = t.timestamp();
            match u64::try_from(secs) {
                Ok(secs) => SystemTime::UNIX_EPOCH + Duration::from_secs(secs),
                Err(_) => SystemTime::UNIX_EPOCH,
            }
        };
        Ok(CertFacts {
            subject: cert.subject().to_string(),
            serial: cert.raw_serial_as_string().replace(':', ""),
            not_before: at(&cert.validity().not_before),
            not_after: at(&cert.validity().not_after),
        })
    }

    /// Whether its validity has ended at `now`.
    pub fn expired(&self, now: SystemTime) -> bool {
        self.not_after <= now
    }

    /// How long it is still valid at `now` (zero once expired).
    pub fn remaining(&self, now: SystemTime) -> Duration {
        self.not_after.duration_since(now).unwrap_or(Duration::ZERO)
    }
}

/// A client identity read and checked: the certificate chain with its key,
/// ready for rustls, and the facts of the client's certificate.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The chain and the key, a checked pair.
    pub key: Arc<CertifiedKey>,
    /// The client certificate's facts.
    pub facts: CertFacts,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Unreadable { path: path.to_owned(), source })
}

/// The PEM certificates of `path`, at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadCertificate { path: path.to_owned(), reason: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.to_owned() });
    }
    Ok(certs)
}

/// The CA certificates of a PEM bundle (`ca_file`), each one parsed.
pub fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = certificates(path)?;
    for cert in &certs {
        CertFacts::of(cert).map_err(|reason| TlsError::BadCertificate { path: path.to_owned(), reason })?;
    }
    Ok(certs)
}

impl IdentityFiles {
    /// Reads the identity and checks the key is the certificate's. An
    /// expired certificate is read too: whether that is an error is the
    /// caller's to say ([`TlsSettings::load`](crate::TlsSettings::load) refuses it).
    pub fn read(&self) -> Result<Identity, TlsError> {
        let (chain, key, cert_path, key_path) = match self {
            IdentityFiles::Pem { cert, key } => {
                let chain = certificates(cert)?;
                let bytes = read(key)?;
                let der = PrivateKeyDer::from_pem_slice(&bytes)
                    .map_err(|_| TlsError::NoKey { path: key.to_owned() })?;
                (chain, der, cert, key)
            }
            IdentityFiles::Pkcs12 { file, password } => {
                let bytes = read(file)?;
                let refused = |reason: String| TlsError::Pkcs12 { path: file.to_owned(), reason };
                let store = p12_keystore::KeyStore::from_pkcs12(&bytes, password.expose())
                    .map_err(|e| refused(format!("{e} (a wrong pkcs12_password_env?)")))?;
                let (_, found) = store
                    .private_key_chain()
                    .ok_or_else(|| refused("it holds no private key with its certificate".to_owned()))?;
                let chain: Vec<CertificateDer<'static>> =
                    found.chain().iter().map(|c| CertificateDer::from(c.as_der().to_vec())).collect();
                if chain.is_empty() {
                    return Err(refused("its private key comes without a certificate".to_owned()));
                }
                let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(found.key().to_vec()));
                (chain, der, file, file)
            }
        };
        let facts = CertFacts::of(&chain[0])
            .map_err(|reason| TlsError::BadCertificate { path: cert_path.to_owned(), reason })?;
        let provider = rustls::crypto::ring::default_provider();
        let key = match CertifiedKey::from_der(chain, key, &provider) {
            Ok(key) => key,
            Err(rustls::Error::InconsistentKeys(_)) => {
                return Err(TlsError::KeyMismatch { cert: cert_path.to_owned(), key: key_path.to_owned() })
            }
            Err(e) => {
                return Err(TlsError::UnsupportedKey { path: key_path.to_owned(), reason: e.to_string() })
            }
        };
        Ok(Identity { key: Arc::new(key), facts })
    }
}
