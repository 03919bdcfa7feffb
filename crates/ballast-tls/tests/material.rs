//! Reading TLS material as `ballast lint` and the client do: a pair that
//! belongs together loads, and every way a file can be wrong is an error
//! naming the file — never its contents.

use std::time::{Duration, SystemTime};

use ballast_test_support::pki::Ca;
use ballast_tls::{IdentityFiles, Roots, Secret, TlsError, TlsSettings, TlsVersion};

fn with_identity(identity: IdentityFiles) -> TlsSettings {
    TlsSettings { identity: Some(identity), ..TlsSettings::default() }
}

#[test]
fn a_pem_pair_loads_with_its_certificate_facts() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Bank CA");
    let (cert, key) =
        ca.client_until("shop", Duration::from_secs(10 * 24 * 3600)).write(dir.path(), "client");
    let settings = TlsSettings {
        roots: Roots::None,
        ca_file: Some(ca.write(dir.path(), "ca")),
        min_version: TlsVersion::V1_3,
        ..with_identity(IdentityFiles::pem(&cert, &key))
    };
    let loaded = settings.load().unwrap();
    let facts = loaded.identity.unwrap();
    assert_eq!(facts.subject, "CN=shop");
    let left = facts.remaining(SystemTime::now());
    assert!(
        left > Duration::from_secs(9 * 24 * 3600) && left <= Duration::from_secs(10 * 24 * 3600),
        "{left:?}"
    );
    assert!(loaded.config.client_auth_cert_resolver.has_certs());
}

#[test]
fn a_key_of_another_certificate_is_refused_naming_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Bank CA");
    let (cert, _) = ca.client("shop").write(dir.path(), "client");
    let (_, other_key) = ca.client("shop").write(dir.path(), "other");
    let error = with_identity(IdentityFiles::pem(&cert, &other_key)).load().unwrap_err();
    assert!(matches!(error, TlsError::KeyMismatch { .. }), "{error}");
    let said = error.to_string();
    assert!(said.contains("other.key") && said.contains("client.pem"), "{said}");
}

#[test]
fn an_expired_certificate_is_read_but_refused_by_load() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Bank CA");
    let (cert, key) = ca.client_expired("shop", Duration::from_secs(3600)).write(dir.path(), "client");
    let files = IdentityFiles::pem(&cert, &key);
    assert!(files.read().unwrap().facts.expired(SystemTime::now()));
    let error = with_identity(files).load().unwrap_err();
    assert!(matches!(error, TlsError::Expired { .. }), "{error}");
    assert!(error.to_string().contains("expired on"), "{error}");
}

#[test]
fn an_ed25519_key_loads() {
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let cert = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap().self_signed(&key).unwrap();
    std::fs::write(dir.path().join("c.pem"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("c.key"), key.serialize_pem()).unwrap();
    IdentityFiles::pem(dir.path().join("c.pem"), dir.path().join("c.key")).read().unwrap();
}

#[test]
fn a_pkcs12_bundle_opens_with_its_password_and_a_wrong_one_is_not_quoted() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Bank CA");
    let issued = ca.client("shop");
    use rustls_pki_types::pem::PemObject as _;
    let cert_der =
        rustls_pki_types::CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).unwrap().to_vec();
    let key_der = rustls_pki_types::PrivatePkcs8KeyDer::from_pem_slice(issued.key_pem.as_bytes()).unwrap();
    let key_der = key_der.secret_pkcs8_der().to_vec();
    let chain = p12_keystore::PrivateKeyChain::new(
        key_der,
        [1u8; 20],
        [p12_keystore::Certificate::from_der(&cert_der).unwrap()],
    );
    let mut store = p12_keystore::KeyStore::new();
    store.add_entry("shop", p12_keystore::KeyStoreEntry::PrivateKeyChain(chain));
    let bundle = store.writer("s3cret-pass").write().unwrap();
    let path = dir.path().join("client.p12");
    std::fs::write(&path, bundle).unwrap();
    let identity = IdentityFiles::pkcs12(&path, Secret::new("s3cret-pass")).read().unwrap();
    assert_eq!(identity.facts.subject, "CN=shop");
    let error = IdentityFiles::pkcs12(&path, Secret::new("wrong-pass")).read().unwrap_err();
    assert!(matches!(error, TlsError::Pkcs12 { .. }), "{error}");
    assert!(!error.to_string().contains("wrong-pass"), "{error}");
}

#[test]
fn files_that_cannot_be_used_say_which_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("ca.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let error = TlsSettings { ca_file: Some(garbage), ..TlsSettings::default() }.load().unwrap_err();
    assert!(matches!(error, TlsError::NoCertificate { .. }), "{error}");
    let missing = TlsSettings { ca_file: Some(dir.path().join("missing.pem")), ..TlsSettings::default() };
    assert!(matches!(missing.load().unwrap_err(), TlsError::Unreadable { .. }));
    let nothing = TlsSettings { roots: Roots::None, ..TlsSettings::default() };
    assert!(matches!(nothing.load().unwrap_err(), TlsError::NothingTrusted));
    let (cert, _) = Ca::new("CA").client("shop").write(dir.path(), "client");
    let error = with_identity(IdentityFiles::pem(&cert, &cert)).load().unwrap_err();
    assert!(matches!(error, TlsError::NoKey { .. }), "{error}");
}
