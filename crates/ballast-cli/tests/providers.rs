//! `ballast serve` in front of a provider as a bank really is, all on
//! loopback: HTTPS behind the bank's own CA, a client certificate it
//! issued, an egress proxy, OAuth 2.0 tokens that expire in two seconds,
//! HTTP/2 — and what each failure of them looks like to the caller.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ballast_test_support::pki::Ca;
use ballast_test_support::{ConnectProxy, Reply, ServerTls, TokenServer, Tokens, Upstream};
use serde_json::Value;
use support::{client, Served};

/// The bank's PKI, written where the configuration names it.
struct Bank {
    ca: Ca,
    dir: tempfile::TempDir,
}

impl Bank {
    fn new() -> Bank {
        let bank = Bank { ca: Ca::new("Bank Root CA"), dir: tempfile::tempdir().unwrap() };
        bank.ca.write(bank.dir.path(), "ca");
        bank.ca.client("shop").write(bank.dir.path(), "client");
        bank
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The bank's server: its certificate for 127.0.0.1, a client
    /// certificate of its CA required.
    fn server(&self) -> ServerTls {
        ServerTls::new(self.ca.server(&["127.0.0.1"])).require_client_cert(self.ca.pem())
    }
}

/// The payment API: a request with a valid token is charged once per key
/// and answered 201; one without is refused 401.
async fn payments(bank: &Bank, tokens: Tokens) -> Upstream {
    Upstream::start_tls(bank.server(), move |seen, _| {
        if tokens.valid(seen) {
            Reply::body(201, format!(r#"{{"paid":"{}"}}"#, seen.key().unwrap_or_default()))
        } else {
            Reply::status(401)
        }
    })
    .await
}

/// A `ballast serve` and the directory of its queue.
struct Serving {
    served: Served,
    _queue: tempfile::TempDir,
}

impl std::ops::Deref for Serving {
    type Target = Served;

    fn deref(&self) -> &Served {
        &self.served
    }
}

/// `ballast serve` with `[systems.bank]` at `upstream`, its TLS section
/// `tls`, and `more` (proxy, auth) for it; `[queue]` in a temp dir.
fn serve(upstream: &Upstream, tls: &str, more: &str, env: &[(&str, String)]) -> Serving {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"[queue]
url = "sqlite://{db}"
poll_interval = "100ms"

[gateway]
listen = "127.0.0.1:0"

[systems.bank]
base_url = "{url}"
dedupes_by_key = true
key_ttl = "1h"
bulkhead = "none"
{more}

[systems.bank.retry]
max_attempts = 3
first_delay = "100ms"
max_delay = "200ms"

[systems.bank.tls]
{tls}
"#,
        db = dir.path().join("tasks.db").display(),
        url = upstream.url("/"),
    );
    Serving { served: Served::start_text(&text, env), _queue: dir }
}

fn files(bank: &Bank) -> String {
    format!(
        "ca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        bank.path("ca.pem").display(),
        bank.path("client.pem").display(),
        bank.path("client.key").display()
    )
}

fn oauth(tokens: &TokenServer, client_auth: &str) -> String {
    format!(
        "\n[systems.bank.auth]\nkind = \"oauth2\"\ntoken_url = \"{}\"\nclient_id_env = \"BANK_CLIENT_ID\"\nclient_secret_env = \"BANK_CLIENT_SECRET\"\nclient_auth = \"{client_auth}\"\n",
        tokens.url()
    )
}

fn credentials() -> Vec<(&'static str, String)> {
    vec![("BANK_CLIENT_ID", "shop".to_owned()), ("BANK_CLIENT_SECRET", "s3cret".to_owned())]
}

async fn pay(served: &Serving, key: &str) -> reqwest::Response {
    client()
        .post(format!("{}/call/bank/payments", served.gateway))
        .header("idempotency-key", key)
        .body(r#"{"amount":100}"#)
        .send()
        .await
        .unwrap()
}

async fn problem(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// A lifetime of 2 s: renewed at 1.6 s.
const LIFETIME: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_reaches_the_mtls_bank_through_the_proxy_with_a_token_that_renews_itself() {
    let bank = Bank::new();
    // The token endpoint authenticates the client by its certificate (RFC 8705).
    let tokens = TokenServer::start_tls(bank.server(), LIFETIME, "shop").await;
    let upstream = payments(&bank, tokens.tokens()).await;
    let proxy = ConnectProxy::with_credentials("svc-shop", "proxy-pw").await;
    let more =
        format!("proxy = \"{}\"\nproxy_auth_env = \"PROXY_AUTH\"\n{}", proxy.url(), oauth(&tokens, "tls"));
    let mut env = credentials();
    env.push(("PROXY_AUTH", "svc-shop:proxy-pw".to_owned()));
    let served = serve(&upstream, &files(&bank), &more, &env);
    for i in 0..5 {
        let answer = pay(&served, &format!("order-{i}")).await;
        assert_eq!(answer.status(), 201, "{:?}", answer.text().await);
        tokio::time::sleep(Duration::from_millis(900)).await;
    }
    assert!(upstream.requests().iter().all(|s| s.client_cert.as_deref() == Some("CN=shop")));
    let tunnels = proxy.tunnels();
    assert!(tunnels.contains(&upstream.addr.to_string()), "{tunnels:?}");
    assert!(tunnels.len() >= 2, "the token endpoint is reached through the proxy too: {tunnels:?}");
    let fetched = tokens.requests();
    assert!((2..=4).contains(&fetched), "a 2 s token over 4.5 s renewed, not fetched per call: {fetched}");
    let log = served.log();
    assert!(!log.contains("proxy-pw") && !log.contains("token-"), "no secret in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_without_ca_file_is_tls_untrusted_after_exactly_one_attempt() {
    let bank = Bank::new();
    let upstream = Upstream::start_tls(bank.server(), |_, _| Reply::status(201)).await;
    let tls = format!(
        "cert_file = \"{}\"\nkey_file = \"{}\"\n",
        bank.path("client.pem").display(),
        bank.path("client.key").display()
    );
    let served = serve(&upstream, &tls, "", &[]);
    let answer = pay(&served, "order-1").await;
    assert_eq!(answer.headers()["ballast-attempts"], "1");
    let (status, body) = problem(answer).await;
    assert_eq!((status, body["ballast"]["reason"].as_str()), (502, Some("tls_untrusted")), "{body}");
    assert_eq!(body["ballast"]["sent"], false);
    assert_eq!(body["ballast"]["rule"], "R-RES-RE-X2");
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("certificate") && detail.contains("[systems.bank.tls] ca_file"), "{detail}");
    assert_eq!(upstream.count(), 0);
    assert_eq!(upstream.connections(), 1, "one handshake, not three");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bank_that_wants_a_client_certificate_says_so() {
    let bank = Bank::new();
    let upstream = Upstream::start_tls(bank.server(), |_, _| Reply::status(201)).await;
    let tls = format!("ca_file = \"{}\"\n", bank.path("ca.pem").display());
    let served = serve(&upstream, &tls, "", &[]);
    let answer = pay(&served, "order-1").await;
    assert_eq!(answer.headers()["ballast-attempts"], "1");
    let (status, body) = problem(answer).await;
    assert_eq!(
        (status, body["ballast"]["reason"].as_str()),
        (502, Some("tls_client_cert_refused")),
        "{body}"
    );
    assert!(body["detail"].as_str().unwrap().contains("cert_file"), "{body}");
    assert_eq!(upstream.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_calls_across_two_token_expiries_fetch_three_tokens_and_none_fails() {
    let bank = Bank::new();
    let tokens = TokenServer::start(LIFETIME, "shop", "s3cret").await;
    let upstream = payments(&bank, tokens.tokens()).await;
    let served = serve(&upstream, &files(&bank), &oauth(&tokens, "basic"), &credentials());
    let gateway = Arc::new(served.gateway.clone());
    let mut answers = Vec::new();
    // Five waves of 100 at once, 0.9 s apart: the token renews at 1.6 s
    // and 3.2 s of its life.
    for wave in 0..5 {
        let calls: Vec<_> = (0..100)
            .map(|i| {
                let gateway = Arc::clone(&gateway);
                tokio::spawn(async move {
                    client()
                        .post(format!("{gateway}/call/bank/payments"))
                        .header("idempotency-key", format!("order-{wave}-{i}"))
                        .send()
                        .await
                        .map(|a| a.status().as_u16())
                })
            })
            .collect();
        answers.extend(calls);
        tokio::time::sleep(Duration::from_millis(900)).await;
    }
    let mut failed = 0;
    for call in answers {
        if call.await.unwrap().ok() != Some(201) {
            failed += 1;
        }
    }
    assert_eq!(failed, 0, "{}", served.log());
    let fetched = tokens.requests();
    assert!(fetched <= 3, "500 calls over two expiries: {fetched} token requests");
    assert_eq!(upstream.count(), 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_token_endpoint_down_keyed_writes_are_deferred_and_delivered_after() {
    let bank = Bank::new();
    let tokens = TokenServer::start(Duration::from_secs(60), "shop", "s3cret").await;
    let upstream = payments(&bank, tokens.tokens()).await;
    let served = serve(&upstream, &files(&bank), &oauth(&tokens, "body"), &credentials());
    tokens.fail_for(Duration::from_secs(5));
    let mut handles = Vec::new();
    for i in 0..10 {
        let answer = served.defer("bank/payments", &format!("order-{i}")).await;
        assert_eq!(answer.status(), 202, "{:?}", answer.text().await);
        handles.push(answer.headers()["location"].to_str().unwrap().to_owned());
    }
    assert_eq!(upstream.count(), 0, "nothing was sent without a token");
    // The queue's schedule (1 s, 2 s, 4 s, … with jitter) takes them past the outage.
    let deadline = std::time::Instant::now() + Duration::from_secs(45);
    loop {
        let mut done = 0;
        for handle in &handles {
            if served.task(handle).await["state"] == "completed" {
                done += 1;
            }
        }
        if done == handles.len() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{done} of 10 delivered in 45 s: {}", served.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut keys: Vec<String> =
        upstream.requests().iter().filter_map(|s| s.key().map(str::to_owned)).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 10, "every payment charged");
    assert_eq!(upstream.count(), 10, "each once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_replaced_while_calls_run_fails_none_and_is_used() {
    let bank = Bank::new();
    let upstream = Upstream::start_tls(bank.server(), |_, _| Reply::status(201)).await;
    let served = serve(&upstream, &files(&bank), "", &[]);
    let gateway = Arc::new(served.gateway.clone());
    let callers: Vec<_> = (0..10)
        .map(|c| {
            let gateway = Arc::clone(&gateway);
            tokio::spawn(async move {
                let mut failed = 0;
                for i in 0..20 {
                    let answer = client()
                        .post(format!("{gateway}/call/bank/payments"))
                        .header("idempotency-key", format!("order-{c}-{i}"))
                        .send()
                        .await;
                    if answer.map(|a| a.status().as_u16()).ok() != Some(201) {
                        failed += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
                failed
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The renewal lands as a deploy tool writes it: the key, then the certificate.
    let (cert, key) = bank.ca.client("shop-renewed").write(bank.dir.path(), "next");
    std::fs::rename(key, bank.path("client.key")).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::rename(cert, bank.path("client.pem")).unwrap();
    let mut failed = 0;
    for caller in callers {
        failed += caller.await.unwrap();
    }
    assert_eq!(failed, 0, "{}", served.log());
    assert_eq!(upstream.count(), 200);
    let presented: Vec<Option<String>> = upstream.requests().into_iter().map(|s| s.client_cert).collect();
    let renewed = presented.iter().filter(|c| c.as_deref() == Some("CN=shop-renewed")).count();
    assert!(renewed > 0, "the calls after the rotation present the new certificate: {presented:?}");
    assert_eq!(pay(&served, "after").await.status(), 201);
    let last = upstream.requests().last().unwrap().client_cert.clone();
    assert_eq!(last.as_deref(), Some("CN=shop-renewed"), "the new certificate is in use");
    assert!(served.log().contains("TLS files changed"), "{}", served.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_401_renews_the_token_and_resends_once() {
    let bank = Bank::new();
    let tokens = TokenServer::start(Duration::from_secs(60), "shop", "s3cret").await;
    let check = tokens.tokens();
    // The bank revoked the first token it saw.
    let upstream = Upstream::start_tls(bank.server(), move |seen, _| {
        if seen.header("authorization") != Some("Bearer token-1") && check.valid(seen) {
            Reply::status(201)
        } else {
            Reply::status(401)
        }
    })
    .await;
    let served = serve(&upstream, &files(&bank), &oauth(&tokens, "basic"), &credentials());
    let answer = pay(&served, "order-1").await;
    assert_eq!(answer.status(), 201);
    assert_eq!(answer.headers()["ballast-attempts"], "1", "the resend is the same attempt");
    assert_eq!((tokens.requests(), upstream.count()), (2, 2), "one renewal, one resend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_bank_is_spoken_to_over_h2() {
    let bank = Bank::new();
    let upstream = Upstream::start_tls(bank.server().http2(), |_, _| Reply::status(201)).await;
    let served = serve(&upstream, &files(&bank), "", &[]);
    assert_eq!(pay(&served, "order-1").await.status(), 201);
    assert_eq!(upstream.requests()[0].version, http::Version::HTTP_2);
    let never = serve(&upstream, &files(&bank), "http2 = \"never\"", &[]);
    assert_eq!(pay(&never, "order-2").await.status(), 201);
    assert_eq!(upstream.requests()[1].version, http::Version::HTTP_11);
}

#[test]
fn lint_reads_the_files_serve_would_refuse() {
    let bank = Bank::new();
    bank.ca.client_expired("shop", Duration::from_secs(3600)).write(bank.dir.path(), "client");
    let config = bank.path("ballast.toml");
    std::fs::write(
        &config,
        format!(
            "[systems.bank]\nbase_url = \"https://127.0.0.1:1/\"\n\n[systems.bank.tls]\n{}",
            files(&bank)
        ),
    )
    .unwrap();
    let out = support::ballast(&["lint", config.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("expired on"), "{said}");
}

#[test]
fn the_bank_example_lints_clean_with_its_files_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let ca = Ca::new("Bank Root CA");
    ca.write(&certs, "bank-root-ca");
    ca.client("shop").write(&certs, "shop-client");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/bank/ballast.toml");
    let config = dir.path().join("ballast.toml");
    std::fs::copy(example, &config).unwrap();
    let out = support::ballast(&["lint", config.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let out = support::ballast(&["explain", config.to_str().unwrap()]);
    let explained = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(explained.contains("reached: TLS trusting none roots and certs/bank-root-ca.pem"), "{explained}");
    assert!(
        explained.contains("OAuth 2.0 token from https://auth.bank.example/oauth2/token (client tls)"),
        "{explained}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_near_its_end_is_a_metric_a_column_and_one_alert() {
    let bank = Bank::new();
    bank.ca.client_until("shop", Duration::from_secs(5 * 24 * 3600)).write(bank.dir.path(), "client");
    let upstream = Upstream::start_tls(bank.server(), |_, _| Reply::status(201)).await;
    let hook = Upstream::start(|_, _| Reply::status(200)).await;
    let more = "\n[[alerts.webhook]]\nurl_env = \"ALERT_URL\"\nformat = \"json\"\n";
    let served =
        serve(&upstream, &format!("{}{more}", files(&bank)), "", &[("ALERT_URL", hook.url("/alerts"))]);
    ballast_test_support::eventually("the expiry is alerted", || async { hook.count() > 0 }).await;
    let alert: Value = serde_json::from_slice(&hook.requests()[0].body).unwrap();
    assert_eq!(alert["alert"], "tls_client_cert_expiring");
    assert_eq!(alert["system"], "bank");
    assert!(alert["summary"].as_str().unwrap().contains("in 4 day(s)"), "{alert}");
    let metrics =
        client().get(format!("{}/metrics", served.admin)).send().await.unwrap().text().await.unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("ballast_tls_client_cert_expiry_timestamp_seconds{system=\"bank\"}"))
        .unwrap_or_else(|| panic!("no expiry metric: {metrics}"));
    let at: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!((at - now - 5.0 * 86_400.0).abs() < 120.0, "{line}");
    let page = client().get(format!("{}/ui/", served.admin)).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("class=\"tag expiring\""), "the dashboard flags it");
    assert!(!page.contains("BEGIN"), "no key material on the page");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(hook.count(), 1, "alerted once");
}
