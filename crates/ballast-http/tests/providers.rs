//! A system reached as real providers are: HTTPS behind a private CA, a
//! client certificate, an egress proxy, OAuth 2.0 tokens, HTTP/2 — each on
//! loopback, with certificates the test makes.

use std::time::Duration;

use ballast::{Breaker, IdempotencyKey, Policy, PolicyBuilder, Retry, Timeout};
use ballast_http::credential::{ClientAuth, OAuth2, Secret};
use ballast_http::{
    HttpError, HttpSystem, IdentityFiles, Proxy, Request, Roots, TlsFailure, TlsSettings, TransportKind,
};
use ballast_test_support::pki::Ca;
use ballast_test_support::{ConnectProxy, Reply, ServerTls, TokenServer, Upstream};

fn policy(name: &str) -> PolicyBuilder {
    Policy::builder(name)
        .retry(Retry::attempts(3).without_budget())
        .breaker(Breaker::consecutive(2))
        .timeout(Timeout::aggressive(Duration::from_secs(5)))
        .seed(7)
}

/// A bank: its CA, its server certificate for 127.0.0.1, and it asks for
/// a client certificate of its CA when `mtls`.
struct Bank {
    ca: Ca,
    dir: tempfile::TempDir,
    ca_file: std::path::PathBuf,
}

impl Bank {
    fn new() -> Bank {
        let ca = Ca::new("Bank Root CA");
        let dir = tempfile::tempdir().unwrap();
        let ca_file = ca.write(dir.path(), "bank-ca");
        Bank { ca, dir, ca_file }
    }

    fn tls(&self, mtls: bool) -> ServerTls {
        let tls = ServerTls::new(self.ca.server(&["127.0.0.1", "localhost"]));
        if mtls {
            tls.require_client_cert(self.ca.pem())
        } else {
            tls
        }
    }

    fn client(&self, name: &str) -> IdentityFiles {
        let (cert, key) = self.ca.client(name).write(self.dir.path(), name);
        IdentityFiles::pem(cert, key)
    }

    fn trusted(&self) -> TlsSettings {
        TlsSettings { ca_file: Some(self.ca_file.clone()), ..TlsSettings::default() }
    }
}

fn transport_kind(failure: &ballast::Failure<HttpError>) -> Option<TransportKind> {
    failure.error().and_then(HttpError::transport_kind)
}

#[tokio::test]
async fn a_private_ca_is_untrusted_after_one_attempt_and_trusted_with_ca_file() {
    let bank = Bank::new();
    let upstream = Upstream::start_tls(bank.tls(false), |_, _| Reply::body(200, "ok")).await;
    let untrusted =
        HttpSystem::builder("bank", &upstream.url("/")).policy(|_| policy("bank")).build().unwrap();
    for _ in 0..3 {
        let failure = untrusted.read(Request::get("accounts")).await.unwrap_err();
        assert_eq!(failure.attempts(), 1, "a certificate that does not verify is not retried: {failure}");
        assert_eq!(transport_kind(&failure), Some(TransportKind::Tls(TlsFailure::Untrusted)));
        assert!(failure.to_string().contains("certificate"), "{failure}");
        assert!(failure.error().unwrap().nothing_sent());
    }
    assert_eq!(
        untrusted.breaker_state(),
        Some(ballast::BreakerState::Closed),
        "a configuration error is not the system being down"
    );
    assert_eq!(upstream.count(), 0);
    let trusted = HttpSystem::builder("bank", &upstream.url("/"))
        .policy(|_| policy("bank"))
        .tls(bank.trusted())
        .build()
        .unwrap();
    assert_eq!(trusted.read(Request::get("accounts")).await.unwrap().status(), 200);
    let only_ca = TlsSettings { roots: Roots::None, ..bank.trusted() };
    let pinned =
        HttpSystem::builder("bank", &upstream.url("/")).policy(|_| policy("bank")).tls(only_ca).build();
    assert_eq!(pinned.unwrap().read(Request::get("accounts")).await.unwrap().status(), 200);
}

#[tokio::test]
async fn a_server_name_verifies_a_server_reached_by_address() {
    let bank = Bank::new();
    let tls = ServerTls::new(bank.ca.server(&["api.bank.test"]));
    let upstream = Upstream::start_tls(tls, |_, _| Reply::body(200, "ok")).await;
    let by_address = HttpSystem::builder("bank", &upstream.url("/")).tls(bank.trusted()).build().unwrap();
    let failure = by_address.read(Request::get("x")).await.unwrap_err();
    assert_eq!(transport_kind(&failure), Some(TransportKind::Tls(TlsFailure::NameMismatch)), "{failure}");
    let named = TlsSettings { server_name: Some("api.bank.test".into()), ..bank.trusted() };
    let system = HttpSystem::builder("bank", &upstream.url("/")).tls(named).build().unwrap();
    assert_eq!(system.read(Request::get("x")).await.unwrap().status(), 200);
}

#[tokio::test]
async fn mutual_tls_presents_the_client_certificate_and_its_absence_is_named() {
    let bank = Bank::new();
    let upstream = Upstream::start_tls(bank.tls(true), |_, _| Reply::body(200, "ok")).await;
    let without = HttpSystem::builder("bank", &upstream.url("/"))
        .policy(|_| policy("bank"))
        .tls(bank.trusted())
        .build()
        .unwrap();
    let failure =
        without.write(&IdempotencyKey::v5("p", "pay"), Request::post("payments")).await.unwrap_err();
    assert_eq!(failure.attempts(), 1, "{failure}");
    assert_eq!(
        transport_kind(&failure),
        Some(TransportKind::Tls(TlsFailure::ClientCertRefused)),
        "{failure}"
    );
    let with = TlsSettings { identity: Some(bank.client("shop")), ..bank.trusted() };
    let system = HttpSystem::builder("bank", &upstream.url("/")).tls(with).build().unwrap();
    assert_eq!(system.read(Request::get("accounts")).await.unwrap().status(), 200);
    assert_eq!(upstream.requests().last().unwrap().client_cert.as_deref(), Some("CN=shop"));
    assert_eq!(system.client_cert().unwrap().subject, "CN=shop");
}

#[tokio::test]
async fn a_replaced_client_certificate_is_used_by_the_next_connection() {
    let bank = Bank::new();
    let upstream = Upstream::start_tls(bank.tls(true), |_, _| Reply::body(200, "ok")).await;
    let identity = bank.client("shop-2025");
    let tls = TlsSettings { identity: Some(identity.clone()), ..bank.trusted() };
    let system = HttpSystem::builder("bank", &upstream.url("/")).tls(tls).build().unwrap();
    assert_eq!(system.read(Request::get("a")).await.unwrap().status(), 200);
    // The rotation writes new files and renames them into place.
    let renewed = bank.ca.client("shop-2026");
    let (cert, key) = renewed.write(bank.dir.path(), "next");
    let IdentityFiles::Pem { cert: live_cert, key: live_key } = &identity else { unreachable!() };
    std::fs::rename(key, live_key).unwrap();
    std::fs::rename(cert, live_cert).unwrap();
    system.refresh_tls();
    assert_eq!(system.read(Request::get("b")).await.unwrap().status(), 200);
    assert_eq!(upstream.requests().last().unwrap().client_cert.as_deref(), Some("CN=shop-2026"));
    assert_eq!(system.client_cert().unwrap().subject, "CN=shop-2026");
    // Half a rotation (a key that is not the certificate's) is not taken.
    let (_, other_key) = bank.ca.client("stray").write(bank.dir.path(), "stray");
    std::fs::rename(other_key, live_key).unwrap();
    system.refresh_tls();
    assert_eq!(system.read(Request::get("c")).await.unwrap().status(), 200);
    assert_eq!(upstream.requests().last().unwrap().client_cert.as_deref(), Some("CN=shop-2026"));
}

#[tokio::test]
async fn an_egress_proxy_tunnels_https_and_forwards_http() {
    let bank = Bank::new();
    let https = Upstream::start_tls(bank.tls(false), |_, _| Reply::body(200, "tls")).await;
    let http = Upstream::start(|_, _| Reply::body(200, "plain")).await;
    let proxy = ConnectProxy::with_credentials("svc", "pw").await;
    let via = || Proxy::via(&proxy.url()).unwrap().basic_auth("svc", "pw");
    let tunneled =
        HttpSystem::builder("bank", &https.url("/")).tls(bank.trusted()).proxy(via()).build().unwrap();
    assert_eq!(tunneled.read(Request::get("a")).await.unwrap().text(), "tls");
    assert_eq!(proxy.tunnels(), [https.addr.to_string()]);
    let forwarded = HttpSystem::builder("crm", &http.url("/")).proxy(via()).build().unwrap();
    assert_eq!(forwarded.read(Request::get("b")).await.unwrap().text(), "plain");
    assert_eq!(proxy.forwarded(), [http.url("/b")]);
    assert!(
        http.requests()[0].header("proxy-authorization").is_none(),
        "the proxy's credentials stop at the proxy"
    );

    let wrong = Proxy::via(&proxy.url()).unwrap().basic_auth("svc", "wrong");
    let refused = HttpSystem::builder("bank", &https.url("/"))
        .policy(|_| policy("bank"))
        .tls(bank.trusted())
        .proxy(wrong)
        .build()
        .unwrap();
    let failure = refused.read(Request::get("c")).await.unwrap_err();
    assert_eq!(
        (transport_kind(&failure), failure.attempts()),
        (Some(TransportKind::ProxyAuth), 1),
        "{failure}"
    );

    proxy.refuse(true);
    // A new system: the other one's tunnel is open and pooled.
    let tunneled =
        HttpSystem::builder("bank", &https.url("/")).tls(bank.trusted()).proxy(via()).build().unwrap();
    let failure = tunneled.write_once(Request::post("d")).await.unwrap_err();
    assert_eq!(transport_kind(&failure), Some(TransportKind::Proxy), "{failure}");
    assert!(failure.error().unwrap().nothing_sent(), "nothing reached the system");
    assert_eq!(https.count(), 1);
}

#[tokio::test]
async fn proxy_urls_with_credentials_or_another_scheme_are_refused() {
    assert!(Proxy::via("http://user:pw@proxy:3128").unwrap_err().to_string().contains("proxy_auth_env"));
    assert!(Proxy::via("socks5://proxy:1080").is_err());
    assert!(Proxy::via("http://proxy.corp:3128").is_ok());
}

#[tokio::test]
async fn http2_is_spoken_when_the_server_offers_it() {
    let bank = Bank::new();
    let upstream = Upstream::start_tls(bank.tls(false).http2(), |_, _| Reply::body(200, "h2")).await;
    let system = HttpSystem::builder("bank", &upstream.url("/")).tls(bank.trusted()).build().unwrap();
    // The first call learns by ALPN that the connection speaks HTTP/2.
    assert_eq!(system.read(Request::get("x")).await.unwrap().text(), "h2");
    let calls = (0..20).map(|i| system.read(Request::get(&format!("x/{i}"))));
    for answer in futures_util::future::join_all(calls).await {
        assert_eq!(answer.unwrap().text(), "h2");
    }
    assert!(upstream.requests().iter().all(|s| s.version == http::Version::HTTP_2));
    assert_eq!(upstream.connections(), 1, "twenty concurrent calls on one HTTP/2 connection");
    let never =
        HttpSystem::builder("bank", &upstream.url("/")).tls(bank.trusted()).http2(false).build().unwrap();
    never.read(Request::get("y")).await.unwrap();
    assert_eq!(upstream.requests().last().unwrap().version, http::Version::HTTP_11);
}

fn oauth(tokens: &TokenServer) -> OAuth2 {
    OAuth2::new(tokens.url(), "shop").secret(Secret::new("s3cret")).scope("payments")
}

#[tokio::test]
async fn a_thousand_concurrent_calls_fetch_one_token() {
    let tokens = TokenServer::start(Duration::from_secs(60), "shop", "s3cret").await;
    let check = tokens.tokens();
    let upstream = Upstream::start(
        move |seen, _| if check.valid(seen) { Reply::status(200) } else { Reply::status(401) },
    )
    .await;
    let system = HttpSystem::builder("bank", &upstream.url("/"))
        .policy(|p| p.bulkhead(ballast::Bulkhead::new(1000)))
        .oauth2(oauth(&tokens))
        .build()
        .unwrap();
    let calls = (0..1000).map(|i| system.read(Request::get(&format!("x/{i}"))));
    let answers = futures_util::future::join_all(calls).await;
    assert!(answers.iter().all(|a| a.as_ref().is_ok_and(|a| a.status() == 200)));
    assert_eq!(tokens.requests(), 1);
    assert_eq!(upstream.count(), 1000);
}

#[tokio::test]
async fn a_401_renews_the_token_and_resends_once() {
    let tokens = TokenServer::start(Duration::from_secs(60), "shop", "s3cret").await;
    let check = tokens.tokens();
    // The first token is revoked at the system: every request with it is 401.
    let upstream = Upstream::start(move |seen, _| {
        let revoked = seen.header("authorization") == Some("Bearer token-1");
        if !revoked && check.valid(seen) {
            Reply::status(201)
        } else {
            Reply::status(401)
        }
    })
    .await;
    let system = HttpSystem::builder("bank", &upstream.url("/")).oauth2(oauth(&tokens)).build().unwrap();
    let answer = system.write_once(Request::post("payments").body("{}")).await.unwrap();
    assert_eq!((answer.status().as_u16(), answer.attempts()), (201, 1));
    assert_eq!((tokens.requests(), upstream.count()), (2, 2), "one renewal, one resend");
    let seen = upstream.requests();
    assert_eq!(seen[1].body, seen[0].body);

    // A system that refuses every token: the second 401 is the answer.
    upstream.rescript(|_, _| Reply::status(401));
    let failure = system.write_once(Request::post("payments")).await.unwrap_err();
    assert_eq!(failure.error().and_then(HttpError::status).map(|s| s.as_u16()), Some(401));
    assert_eq!((tokens.requests(), upstream.count()), (3, 4));
}

#[tokio::test]
async fn a_token_endpoint_that_refuses_the_client_is_a_configuration_error() {
    let tokens = TokenServer::start(Duration::from_secs(60), "shop", "s3cret").await;
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let wrong = OAuth2::new(tokens.url(), "shop").secret(Secret::new("wrong")).client_auth(ClientAuth::Body);
    let system = HttpSystem::builder("bank", &upstream.url("/"))
        .policy(|_| policy("bank"))
        .oauth2(wrong)
        .build()
        .unwrap();
    let failure = system.read(Request::get("x")).await.unwrap_err();
    assert_eq!((transport_kind(&failure), failure.attempts()), (Some(TransportKind::CredentialRefused), 1));
    assert!(failure.to_string().contains("invalid_client"), "{failure}");
    assert!(!failure.to_string().contains("wrong"), "the secret is never shown: {failure}");
    assert_eq!(upstream.count(), 0);
}

#[tokio::test]
async fn a_token_endpoint_down_means_nothing_sent_and_a_transient_failure() {
    let tokens = TokenServer::start(Duration::from_secs(60), "shop", "s3cret").await;
    tokens.fail_for(Duration::from_secs(60));
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let system = HttpSystem::builder("bank", &upstream.url("/"))
        .policy(|_| policy("bank").retry(Retry::attempts(2).without_budget()))
        .oauth2(oauth(&tokens))
        .build()
        .unwrap();
    let key = IdempotencyKey::v5("o", "pay");
    let failure = system.write(&key, Request::post("payments")).await.unwrap_err();
    assert_eq!(transport_kind(&failure), Some(TransportKind::Credential), "{failure}");
    assert!(failure.is_deferrable(), "a keyed write is deferred as in an outage");
    assert!(failure.error().unwrap().nothing_sent());
    assert_eq!(upstream.count(), 0);
}

#[tokio::test]
async fn client_auth_tls_authenticates_by_the_certificate() {
    let bank = Bank::new();
    let tokens = TokenServer::start_tls(bank.tls(true), Duration::from_secs(60), "shop").await;
    let check = tokens.tokens();
    let upstream = Upstream::start_tls(bank.tls(true), move |seen, _| {
        if check.valid(seen) {
            Reply::status(200)
        } else {
            Reply::status(401)
        }
    })
    .await;
    let tls = TlsSettings { identity: Some(bank.client("shop")), ..bank.trusted() };
    let grant = OAuth2::new(tokens.url(), "shop").client_auth(ClientAuth::Tls);
    let system =
        HttpSystem::builder("bank", &upstream.url("/")).tls(tls).oauth2(grant.clone()).build().unwrap();
    assert_eq!(system.read(Request::get("x")).await.unwrap().status(), 200);
    let without = HttpSystem::builder("bank", &upstream.url("/")).tls(bank.trusted()).oauth2(grant).build();
    assert!(matches!(without.unwrap_err(), ballast_http::SystemBuildError::TokenWithoutCertificate));
}

#[test]
fn secrets_stay_out_of_debug_output() {
    let grant = OAuth2::new("https://auth.example/token", "shop").secret(Secret::new("s3cret-value"));
    assert!(!format!("{grant:?}").contains("s3cret-value"));
    let settings = TlsSettings {
        identity: Some(IdentityFiles::pkcs12("c.p12", Secret::new("p12-password"))),
        ..TlsSettings::default()
    };
    assert!(!format!("{settings:?}").contains("p12-password"));
}
