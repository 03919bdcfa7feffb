//! A certificate authority made for one test: server and client
//! certificates it signs, in PEM, written where a configuration can name
//! them. Nothing leaves the test's temp directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// A CA of the test's own, as a bank's private CA is to ballast: no
/// machine trusts it unless told to.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, in PEM.
#[derive(Clone)]
pub struct Issued {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

impl Issued {
    /// Writes `NAME.pem` and `NAME.key` into `dir`; their paths.
    ///
    /// # Panics
    ///
    /// When the files cannot be written.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.pem"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert_pem).expect("the certificate written");
        write_private(&key, &self.key_pem);
        (cert, key)
    }
}

/// Writes `text` to `path` readable by its owner only, as a private key is kept.
fn write_private(path: &Path, text: &str) {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).expect("the key's file");
    file.write_all(text.as_bytes()).expect("the key written");
}

impl Ca {
    /// A CA named `name`.
    ///
    /// # Panics
    ///
    /// When rcgen cannot make it.
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Ca {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a key"))
                .expect("the CA"),
        }
    }

    /// The CA's certificate, to trust (`ca_file`).
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes the CA's certificate to `dir/NAME.pem`; its path.
    ///
    /// # Panics
    ///
    /// When the file cannot be written.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.pem"));
        std::fs::write(&path, self.pem()).expect("the CA written");
        path
    }

    /// A server certificate for `names` (DNS names or addresses).
    ///
    /// # Panics
    ///
    /// When rcgen cannot make it.
    pub fn server(&self, names: &[&str]) -> Issued {
        let mut params = CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .expect("server parameters");
        params.distinguished_name.push(DnType::CommonName, names.first().copied().unwrap_or("server"));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate naming `common_name`, valid for 90 days.
    pub fn client(&self, common_name: &str) -> Issued {
        self.client_until(common_name, Duration::from_secs(90 * 24 * 3600))
    }

    /// A client certificate naming `common_name` whose validity ends
    /// `valid_for` from now (its start an hour ago).
    ///
    /// # Panics
    ///
    /// When rcgen cannot make it.
    pub fn client_until(&self, common_name: &str, valid_for: Duration) -> Issued {
        self.client_between(common_name, Duration::from_secs(3600), valid_for, false)
    }

    /// A client certificate naming `common_name` that expired `ago`.
    pub fn client_expired(&self, common_name: &str, ago: Duration) -> Issued {
        self.client_between(common_name, ago + Duration::from_secs(3600), ago, true)
    }

    fn client_between(&self, common_name: &str, from: Duration, to: Duration, past: bool) -> Issued {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client parameters");
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - from;
        params.not_after = if past { now - to } else { now + to };
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Issued {
        let key = KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.issuer).expect("a certificate");
        Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem() }
    }
}
