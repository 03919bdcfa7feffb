//! What a system's `[systems.NAME.tls]` says: which roots, which CA file,
//! which client identity, which name, which versions — data only.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The roots a system's server certificate may chain to, besides its
/// [`ca_file`](TlsSettings::ca_file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Roots {
    /// Mozilla's roots, built in (`webpki-roots`): the same on every machine.
    #[default]
    Mozilla,
    /// The operating system's store, read when the client is built.
    System,
    /// None: only the `ca_file` is trusted.
    None,
}

impl Roots {
    /// Every word, as the configuration writes it.
    pub const WORDS: [&'static str; 3] = ["mozilla", "system", "none"];

    /// `"mozilla"`, `"system"` or `"none"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Roots::Mozilla => "mozilla",
            Roots::System => "system",
            Roots::None => "none",
        }
    }
}

/// A word that is none of the ones a setting takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is not one of {}", .words.join(", "))]
pub struct UnknownWord {
    /// What was given.
    pub given: String,
    /// What is taken.
    pub words: &'static [&'static str],
}

impl FromStr for Roots {
    type Err = UnknownWord;

    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        match s {
            "mozilla" => Ok(Roots::Mozilla),
            "system" => Ok(Roots::System),
            "none" => Ok(Roots::None),
            _ => Err(UnknownWord { given: s.to_owned(), words: &Roots::WORDS }),
        }
    }
}

/// The lowest TLS version a system is spoken to with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3 (the default).
    #[default]
    V1_2,
    /// TLS 1.3 only.
    V1_3,
}

impl TlsVersion {
    /// Every word, as the configuration writes it.
    pub const WORDS: [&'static str; 2] = ["1.2", "1.3"];
}

impl FromStr for TlsVersion {
    type Err = UnknownWord;

    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        match s {
            "1.2" => Ok(TlsVersion::V1_2),
            "1.3" => Ok(TlsVersion::V1_3),
            _ => Err(UnknownWord { given: s.to_owned(), words: &TlsVersion::WORDS }),
        }
    }
}

/// A value never shown: a PKCS#12 password, a client secret. `Debug` and
/// `Display` print `***`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Where a client identity (mutual TLS) is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityFiles {
    /// A PEM certificate chain (the client's certificate first) and its
    /// PEM private key (PKCS#8, PKCS#1 or SEC1: RSA, ECDSA or Ed25519).
    Pem {
        /// `cert_file`.
        cert: PathBuf,
        /// `key_file`.
        key: PathBuf,
    },
    /// A PKCS#12 bundle holding the key and its chain.
    Pkcs12 {
        /// `pkcs12_file`.
        file: PathBuf,
        /// The bundle's password (empty when it has none).
        password: Secret,
    },
}

impl IdentityFiles {
    /// A PEM certificate chain and key.
    pub fn pem(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        IdentityFiles::Pem { cert: cert.into(), key: key.into() }
    }

    /// A PKCS#12 bundle and its password.
    pub fn pkcs12(file: impl Into<PathBuf>, password: Secret) -> Self {
        IdentityFiles::Pkcs12 { file: file.into(), password }
    }

    /// The files read, in the order they are read.
    pub fn files(&self) -> Vec<&Path> {
        match self {
            IdentityFiles::Pem { cert, key } => vec![cert, key],
            IdentityFiles::Pkcs12 { file, .. } => vec![file],
        }
    }

    /// The file the certificate is in (for messages).
    pub fn cert_file(&self) -> &Path {
        match self {
            IdentityFiles::Pem { cert, .. } => cert,
            IdentityFiles::Pkcs12 { file, .. } => file,
        }
    }
}

/// A system's TLS settings: `[systems.NAME.tls]`, or
/// `HttpSystemBuilder::tls` in a library.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// `roots`: the built-in roots trusted besides `ca_file`.
    pub roots: Roots,
    /// `ca_file`: a PEM bundle of CA certificates trusted besides the roots.
    pub ca_file: Option<PathBuf>,
    /// The client certificate presented when the server asks for one.
    pub identity: Option<IdentityFiles>,
    /// `server_name`: the name sent as SNI and verified in the server's
    /// certificate, when the URL names the server by an address or by
    /// another name; only for the system's own host.
    pub server_name: Option<String>,
    /// `min_version`: the lowest TLS version offered.
    pub min_version: TlsVersion,
}

impl TlsSettings {
    /// Every file these settings read (CA file, then the identity's).
    pub fn files(&self) -> Vec<&Path> {
        let mut files: Vec<&Path> = self.ca_file.iter().map(PathBuf::as_path).collect();
        if let Some(identity) = &self.identity {
            files.extend(identity.files());
        }
        files
    }

    /// These settings with every relative path taken from `dir` (the
    /// configuration file's directory).
    pub fn relative_to(mut self, dir: &Path) -> Self {
        let under = |path: &mut PathBuf| {
            if path.is_relative() {
                *path = dir.join(&*path);
            }
        };
        if let Some(ca) = &mut self.ca_file {
            under(ca);
        }
        match &mut self.identity {
            Some(IdentityFiles::Pem { cert, key }) => {
                under(cert);
                under(key);
            }
            Some(IdentityFiles::Pkcs12 { file, .. }) => under(file),
            None => {}
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_parse_and_refuse_with_the_list() {
        assert_eq!("system".parse::<Roots>(), Ok(Roots::System));
        assert_eq!("1.3".parse::<TlsVersion>(), Ok(TlsVersion::V1_3));
        let refused = "Mozilla".parse::<Roots>().unwrap_err().to_string();
        assert_eq!(refused, "\"Mozilla\" is not one of mozilla, system, none");
    }

    #[test]
    fn a_secret_never_prints() {
        let identity = IdentityFiles::pkcs12("client.p12", Secret::new("hunter2"));
        assert!(!format!("{identity:?}").contains("hunter2"));
    }

    #[test]
    fn relative_paths_are_taken_from_the_directory() {
        let tls = TlsSettings {
            ca_file: Some("ca.pem".into()),
            identity: Some(IdentityFiles::pem("/abs/c.pem", "k.pem")),
            ..TlsSettings::default()
        }
        .relative_to(Path::new("/etc/ballast"));
        assert_eq!(
            tls.files(),
            [Path::new("/etc/ballast/ca.pem"), Path::new("/abs/c.pem"), Path::new("/etc/ballast/k.pem")]
        );
    }
}
