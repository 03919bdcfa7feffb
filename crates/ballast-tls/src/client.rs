//! The rustls client configuration of a system's settings: its roots and
//! CA file, its versions, its client identity.

use std::sync::Arc;
use std::time::SystemTime;

use rustls::pki_types::ServerName;
use rustls::RootCertStore;

use crate::material::{read_ca_file, CertFacts};
use crate::settings::{Roots, TlsSettings, TlsVersion};
use crate::{Stamp, TlsError};

/// Settings read: the configuration to connect with, what the client
/// certificate says, and the stamp of the files as they were read.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The client configuration, without ALPN (the connector sets it).
    pub config: rustls::ClientConfig,
    /// The client certificate's facts, when there is one.
    pub identity: Option<CertFacts>,
    /// `server_name`, checked.
    pub server_name: Option<ServerName<'static>>,
    /// The files' stamp taken before they were read: a change while
    /// reading shows as a change the next time.
    pub stamp: Stamp,
}

impl TlsSettings {
    /// Reads every file and builds the client configuration. Refused when
    /// a file cannot be read or used, the client certificate has expired,
    /// or nothing would be trusted.
    pub fn load(&self) -> Result<Loaded, TlsError> {
        let stamp = Stamp::of(self.files());
        let roots = self.roots()?;
        let versions: &[&rustls::SupportedProtocolVersion] = match self.min_version {
            TlsVersion::V1_2 => &[&rustls::version::TLS13, &rustls::version::TLS12],
            TlsVersion::V1_3 => &[&rustls::version::TLS13],
        };
        let builder =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_protocol_versions(versions)?
                .with_root_certificates(roots);
        let (config, identity) = match &self.identity {
            None => (builder.with_no_client_auth(), None),
            Some(files) => {
                let identity = files.read()?;
                if identity.facts.expired(SystemTime::now()) {
                    return Err(TlsError::Expired {
                        path: files.cert_file().to_owned(),
                        not_after: identity.facts.not_after,
                    });
                }
                let resolver = rustls::sign::SingleCertAndKey::from(identity.key);
                (builder.with_client_cert_resolver(Arc::new(resolver)), Some(identity.facts))
            }
        };
        let server_name = match &self.server_name {
            None => None,
            Some(name) => Some(
                ServerName::try_from(name.trim_start_matches('[').trim_end_matches(']').to_owned())
                    .map_err(|_| TlsError::ServerName(name.clone()))?,
            ),
        };
        Ok(Loaded { config, identity, server_name, stamp })
    }

    /// The roots trusted: the built-in ones `roots` names, and `ca_file`'s.
    fn roots(&self) -> Result<RootCertStore, TlsError> {
        let mut store = RootCertStore::empty();
        match self.roots {
            Roots::Mozilla => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
            Roots::System => {
                let found = rustls_native_certs::load_native_certs();
                if found.certs.is_empty() {
                    let why = found
                        .errors
                        .first()
                        .map_or_else(|| "no certificate in it".to_owned(), |e| e.to_string());
                    return Err(TlsError::SystemRoots(why));
                }
                store.add_parsable_certificates(found.certs);
            }
            Roots::None if self.ca_file.is_none() => return Err(TlsError::NothingTrusted),
            Roots::None => {}
        }
        if let Some(path) = &self.ca_file {
            for cert in read_ca_file(path)? {
                store
                    .add(cert)
                    .map_err(|e| TlsError::BadCertificate { path: path.clone(), reason: e.to_string() })?;
            }
        }
        Ok(store)
    }
}
