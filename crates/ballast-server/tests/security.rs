//! `ballast serve` under attack: slow bodies, other hosts and origins,
//! secrets at rest and on screen, guessed logins, spoofed forwarding headers.

mod support;

use std::time::Duration;

use ballast_test_support::{eventually, send, Reply, Upstream};
use serde_json::Value;
use support::{client, serve_text, Served};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A configuration: SQLite in the temp dir, both listeners on free ports,
/// and `rest` (with `{upstream}`).
fn config(queue: &str, serve: &str, gateway: &str, rest: &str) -> String {
    format!(
        "[queue]\nurl = \"sqlite://{{dir}}/queue.db\"\npoll_interval = \"100ms\"\n{queue}\n\
         [serve]\nlisten = \"127.0.0.1:0\"\n{serve}\n[gateway]\nlisten = \"127.0.0.1:0\"\n{gateway}\n{rest}"
    )
}

const PAY: &str = r#"
[systems.pay]
base_url = "http://{upstream}/"
dedupes_by_key = true
key_ttl = "1h"
retry = "none"
"#;

async fn start(upstream: &Upstream, text: &str) -> Served {
    serve_text(&upstream.addr.to_string(), text).await
}

fn host_of(url: &str) -> &str {
    url.trim_start_matches("http://")
}

/// Headers of a request with a large body, then its first byte only.
async fn slow_body(addr: &str, path: &str) -> Option<TcpStream> {
    let mut socket = TcpStream::connect(addr).await.ok()?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Idempotency-Key: slow\r\nContent-Length: 100000\r\n\r\nt"
    );
    socket.write_all(head.as_bytes()).await.ok()?;
    Some(socket)
}

/// 200 connections sending a large body a byte a second, on each listener:
/// liveness, readiness and gateway calls keep answering within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_take_neither_the_probes_nor_the_gateway() {
    let upstream = Upstream::start(|_, _| Reply::body(200, "ok")).await;
    let text = config("", "max_connections = 64", "max_connections = 64", PAY);
    let served = start(&upstream, &text).await;
    let mut slow = Vec::new();
    for (base, path) in [(&served.admin, "/ui/login"), (&served.gateway, "/call/pay/payments")] {
        for _ in 0..200 {
            if let Some(socket) = slow_body(host_of(base), path).await {
                slow.push(socket);
            }
        }
    }
    assert!(slow.len() >= 300, "the flood connected: {}", slow.len());
    let trickle = tokio::spawn(async move {
        loop {
            for socket in &mut slow {
                let _ = socket.write_all(b"x").await;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });

    let quick = reqwest::Client::builder().timeout(Duration::from_secs(1)).build().unwrap();
    for round in 0..5 {
        for probe in ["/health/live", "/health/ready"] {
            let answer = quick.get(format!("{}{probe}", served.admin)).send().await;
            assert_eq!(answer.map(|r| r.status().as_u16()).ok(), Some(200), "{probe}, round {round}");
        }
        let call = quick.get(format!("{}/call/pay/orders/1", served.gateway)).send().await;
        assert_eq!(call.map(|r| r.status().as_u16()).ok(), Some(200), "a gateway call, round {round}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    trickle.abort();
}

/// A body slower than `body_read_timeout` is answered 408, nothing sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_slower_than_its_timeout_is_answered_408() {
    let upstream = Upstream::start(|_, _| Reply::status(201)).await;
    let served = start(&upstream, &config("", "", "body_read_timeout = \"500ms\"", PAY)).await;
    let mut socket = slow_body(host_of(&served.gateway), "/call/pay/payments").await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the connection is closed after the answer");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"reason\":\"body_timeout\""), "{answer}");
    assert_eq!(upstream.count(), 0);
}

/// The admin listener answers only its own names; its actions only its own
/// origin; the gateway no browser page of another site.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_hosts_and_origins_are_refused() {
    let upstream = Upstream::start(|_, _| Reply::status(201)).await;
    let served = start(&upstream, &config("", "allowed_hosts = [\"ops.example\"]", "", PAY)).await;
    let ui = format!("{}/ui/", served.admin);

    let rebound = client().get(&ui).header("host", "attacker.example:9464").send().await.unwrap();
    assert_eq!(rebound.status().as_u16(), 421);
    assert_eq!(rebound.json::<Value>().await.unwrap()["ballast"]["reason"], "unknown_host");
    let named = client().get(&ui).header("host", "ops.example").send().await.unwrap();
    assert_eq!(named.status().as_u16(), 200);

    let task = served
        .queue
        .enqueue(ballast_queue::NewTask::new("charge", &1).run_after(Duration::from_secs(3600)))
        .await
        .unwrap();
    let page = client().get(format!("{}/ui/tasks/{}", served.admin, task.id)).send().await.unwrap();
    let page = page.text().await.unwrap();
    let at = page.find("name=\"csrf\" value=\"").unwrap() + 19;
    let csrf = page[at..at + 32].to_owned();
    let cancel = format!("{}/ui/tasks/{}/cancel", served.admin, task.id);
    let forged = send(
        client().post(&cancel).form(&[("csrf", csrf.as_str())]),
        &[("origin", "http://attacker.example"), ("sec-fetch-site", "cross-site")],
    )
    .await;
    assert_eq!(forged.status().as_u16(), 403, "a valid CSRF token from another site is not enough");
    let state = served.queue.get(task.id).await.unwrap().unwrap().state;
    assert_eq!(state, ballast_queue::TaskState::Pending);
    let own = client().post(&cancel).header("sec-fetch-site", "same-origin").form(&[("csrf", csrf.as_str())]);
    assert_ne!(own.send().await.unwrap().status().as_u16(), 403, "from its own page it acts");
    assert_eq!(served.queue.get(task.id).await.unwrap().unwrap().state, ballast_queue::TaskState::Cancelled);

    let page_post = send(
        client().post(format!("{}/call/pay/payments", served.gateway)),
        &[("sec-fetch-site", "cross-site"), ("origin", "https://attacker.example")],
    )
    .await;
    assert_eq!(page_post.status().as_u16(), 403);
    assert_eq!(page_post.json::<Value>().await.unwrap()["ballast"]["reason"], "cross_site");
    assert_eq!(upstream.count(), 0, "nothing was forwarded");
}

/// Caller credentials and the body are sealed before they are stored; the
/// system's own credential comes from the environment and is never stored;
/// the dashboard shows names, never values; the delivery sends them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_sealed_at_rest_and_hidden_on_screen() {
    std::env::set_var("SECURITY_TEST_SEAL_KEY", "4f".repeat(32));
    std::env::set_var("SECURITY_TEST_PARTNER_KEY", "partner-secret-3");
    let upstream = Upstream::start(|_, _| Reply::status(503)).await;
    let rest =
        format!("{PAY}\n[systems.pay.headers]\nX-Partner-Key = {{ env = \"SECURITY_TEST_PARTNER_KEY\" }}\n");
    let text = config("seal_key_env = \"SECURITY_TEST_SEAL_KEY\"\n", "", "", &rest);
    let served = start(&upstream, &text).await;

    let deferred = send(
        client().post(format!("{}/call/pay/payments", served.gateway)).body(r#"{"card":"4111111111111111"}"#),
        &[
            ("idempotency-key", "order-9-pay"),
            ("prefer", "respond-async"),
            ("authorization", "Bearer caller-secret-1"),
            ("x-api-key", "api-secret-2"),
            ("x-request-id", "r-9"),
        ],
    )
    .await;
    assert_eq!(deferred.status().as_u16(), 202);
    let first = &upstream.requests()[0];
    assert_eq!(first.header("x-partner-key"), Some("partner-secret-3"), "the system's credential is added");
    assert_eq!(first.header("authorization"), Some("Bearer caller-secret-1"));

    let secrets = ["caller-secret-1", "api-secret-2", "4111111111111111", "partner-secret-3"];
    let stored = std::fs::read_dir(served.dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("queue.db"))
        .flat_map(|e| std::fs::read(e.path()).unwrap_or_default())
        .collect::<Vec<u8>>();
    assert!(!stored.is_empty());
    for secret in secrets {
        assert!(!contains(&stored, secret.as_bytes()), "{secret} is in the queue's files");
    }
    let task = served.queue.list(&Default::default()).await.unwrap().remove(0);
    let page = client().get(format!("{}/ui/tasks/{}", served.admin, task.id)).send().await.unwrap();
    let page = page.text().await.unwrap();
    assert!(
        page.contains("authorization") && page.contains("x-api-key") && page.contains("(sealed)"),
        "{page}"
    );
    for secret in secrets {
        assert!(!page.contains(secret), "{secret} is on the dashboard");
    }

    upstream.rescript(|_, _| Reply::status(201));
    eventually("the deferred write is delivered", || async {
        served.queue.get(task.id).await.unwrap().unwrap().state == ballast_queue::TaskState::Completed
    })
    .await;
    let delivered = upstream.requests().pop().unwrap();
    assert_eq!(delivered.header("authorization"), Some("Bearer caller-secret-1"));
    assert_eq!(delivered.header("x-api-key"), Some("api-secret-2"));
    assert_eq!(delivered.header("x-partner-key"), Some("partner-secret-3"));
    assert_eq!(delivered.header("x-request-id"), Some("r-9"));
    assert_eq!(delivered.text(), r#"{"card":"4111111111111111"}"#);
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Without a seal key, a deferral that would store a credential is refused
/// unsent, and says how to configure one; a header variable that is not set
/// keeps `serve` from starting, naming the variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_seal_key_a_credential_is_never_stored() {
    let upstream = Upstream::start(|_, _| Reply::status(503)).await;
    let served = start(&upstream, &config("", "", "", PAY)).await;
    let refused = send(
        client().post(format!("{}/call/pay/payments", served.gateway)),
        &[
            ("idempotency-key", "order-10-pay"),
            ("prefer", "respond-async"),
            ("authorization", "Bearer caller-secret-4"),
        ],
    )
    .await;
    assert_eq!(refused.status().as_u16(), 400);
    let problem: Value = refused.json().await.unwrap();
    assert_eq!(problem["ballast"]["reason"], "seal_key_missing");
    assert!(problem["detail"].as_str().unwrap().contains("seal_key_env"), "{problem}");
    assert_eq!(upstream.count(), 0, "nothing sent");
    assert!(served.queue.list(&Default::default()).await.unwrap().is_empty(), "nothing stored");

    let rest =
        format!("{PAY}\n[systems.pay.headers]\nAuthorization = {{ env = \"SECURITY_TEST_SURELY_UNSET\" }}\n");
    let dir = tempfile::tempdir().unwrap();
    let text = config("", "", "", &rest).replace("{dir}", &dir.path().display().to_string());
    let config = ballast_config::Config::parse("t.toml", text.replace("{upstream}", "127.0.0.1:1")).unwrap();
    let err =
        ballast_server::Server::bind(&config, support::prometheus(), None).await.unwrap_err().to_string();
    assert!(err.contains("SECURITY_TEST_SURELY_UNSET") && err.contains("not set"), "{err}");
}

/// Wrong tokens are throttled per peer and counted, by the form and as a
/// bearer token alike; tokens shorter than 16 bytes are refused at start;
/// sessions end after `session_ttl`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_are_limited_and_sessions_expire() {
    std::env::set_var("SECURITY_TEST_ADMIN_TOKEN", "operator-token-0123456789");
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let serve = "token_env = \"SECURITY_TEST_ADMIN_TOKEN\"\nsession_ttl = \"1s\"";
    let served = start(&upstream, &config("", serve, "", PAY)).await;
    let login = format!("{}/ui/login", served.admin);
    let try_token = |token: &'static str| client().post(&login).form(&[("token", token)]).send();

    let right = try_token("operator-token-0123456789").await.unwrap();
    let cookie = right.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(cookie.contains("Max-Age=1") && cookie.contains("HttpOnly"), "{cookie}");
    let session = cookie.split(';').next().unwrap().to_owned();
    let ui = format!("{}/ui/", served.admin);
    let inside = client().get(&ui).header("cookie", &session).send().await.unwrap();
    assert_eq!(inside.status().as_u16(), 200);
    eventually("the session expires on the server", || async {
        let page = client().get(&ui).header("cookie", &session).send().await.unwrap();
        page.status().is_redirection()
    })
    .await;

    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(try_token("a-guess-at-the-token").await.unwrap().status().as_u16());
    }
    // The right login spent nothing; a burst of 5 refused guesses, then 429.
    assert_eq!(statuses[..5], [401; 5], "{statuses:?}");
    assert!(statuses[5..].iter().all(|s| *s == 429), "{statuses:?}");
    let limited = try_token("operator-token-0123456789").await.unwrap();
    assert_eq!(limited.status().as_u16(), 429, "the right token waits while its own address guesses");
    assert!(limited.headers().contains_key("retry-after"));
    let bearer = client().get(&ui).bearer_auth("another-guess").send().await.unwrap();
    assert_eq!(bearer.status().as_u16(), 429, "a bearer token on /ui is the same check");
    let metrics =
        client().get(format!("{}/metrics", served.admin)).send().await.unwrap().text().await.unwrap();
    for line in [
        "ballast_auth_failures_total{listener=\"serve\",reason=\"wrong_token\"} 5",
        "ballast_auth_failures_total{listener=\"serve\",reason=\"throttled\"} 5",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }

    std::env::set_var("SECURITY_TEST_SHORT_TOKEN", "short-token");
    let dir = tempfile::tempdir().unwrap();
    let text = config("", "token_env = \"SECURITY_TEST_SHORT_TOKEN\"", "", PAY)
        .replace("{dir}", &dir.path().display().to_string())
        .replace("{upstream}", "127.0.0.1:1");
    let config = ballast_config::Config::parse("t.toml", text).unwrap();
    let err =
        ballast_server::Server::bind(&config, support::prometheus(), None).await.unwrap_err().to_string();
    assert!(err.contains("shorter than 16 bytes") && !err.contains("short-token"), "{err}");
}

/// N7: guessing the gateway's token from many addresses (all of 127/8 is
/// this host) is throttled for the listener; the operator's own address,
/// which presented the right token before, is not locked out by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guessing_from_many_addresses_is_throttled_and_the_operator_gets_through() {
    std::env::set_var("SECURITY_TEST_GATEWAY_TOKEN", "gateway-token-0123456789");
    let upstream = Upstream::start(|_, _| Reply::body(200, "ok")).await;
    let served = start(&upstream, &config("", "", "token_env = \"SECURITY_TEST_GATEWAY_TOKEN\"", PAY)).await;
    let url = format!("{}/call/pay/orders/1", served.gateway);
    let from = |last: u8| {
        reqwest::Client::builder()
            .local_address(std::net::IpAddr::from([127, 0, 3, last]))
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    };
    let operator = from(1);
    let first = operator.get(&url).bearer_auth("gateway-token-0123456789").send().await.unwrap();
    assert_eq!(first.status().as_u16(), 200);
    let mut statuses = Vec::new();
    let started = std::time::Instant::now();
    for last in 2..=120u8 {
        let guess = from(last).get(&url).bearer_auth(format!("guess-{last}")).send().await.unwrap();
        statuses.push(guess.status().as_u16());
    }
    // The listener's bucket: a burst of 50 wrong tokens, then 10 a second,
    // however many addresses they come from (a slow run earns more).
    let earned = 50.0 + 10.0 * started.elapsed().as_secs_f64();
    let refused = statuses.iter().filter(|s| **s == 401).count();
    assert!(
        refused >= 50 && refused as f64 <= earned + 1.0,
        "{refused} wrong tokens looked at, {earned:.0} earned: rotating addresses does not help: {statuses:?}"
    );
    assert_eq!(refused + statuses.iter().filter(|s| **s == 429).count(), statuses.len(), "{statuses:?}");
    let again = operator.get(&url).bearer_auth("gateway-token-0123456789").send().await.unwrap();
    assert_eq!(again.status().as_u16(), 200, "the operator is not locked out by others' guessing");
    assert_eq!(upstream.count(), 2, "only the operator's calls went through");
}

/// Every `/ui` answer tells the browser what it may load and that it may
/// not be framed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_answers_carry_the_browser_s_security_headers() {
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let served = start(&upstream, &config("", "", "", PAY)).await;
    for path in ["/ui/", "/ui/login", "/ui/tasks", "/ui/assets/style.css"] {
        let answer = client().get(format!("{}{path}", served.admin)).send().await.unwrap();
        let headers = answer.headers();
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"),
            "{path}: {csp}"
        );
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        assert_eq!(headers["x-frame-options"], "DENY", "{path}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(headers["referrer-policy"], "no-referrer", "{path}");
    }
}

/// Caller-sent forwarding headers do not reach the upstream unless the
/// gateway is told to trust them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_are_dropped_unless_trusted() {
    for (trust, kept) in [("", false), ("trust_forwarded = true", true)] {
        let upstream = Upstream::start(|_, _| Reply::status(200)).await;
        let served = start(&upstream, &config("", "", trust, PAY)).await;
        send(
            client().get(format!("{}/call/pay/orders/1", served.gateway)),
            &[("x-forwarded-for", "6.6.6.6"), ("forwarded", "for=6.6.6.6"), ("x-real-ip", "6.6.6.6")],
        )
        .await;
        let seen = &upstream.requests()[0];
        for name in ["x-forwarded-for", "forwarded", "x-real-ip"] {
            assert_eq!(seen.header(name).is_some(), kept, "{name} with {trust:?}");
        }
    }
}

/// A webhook's URL is a secret as a whole: what its failed deliveries say
/// shows its scheme and host only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_s_url_stays_out_of_errors() {
    // Nothing listens on port 9: every post fails to connect.
    std::env::set_var("SECURITY_TEST_HOOK_URL", "http://127.0.0.1:9/services/T00/B00/SECRETTOKEN123");
    let upstream = Upstream::start(|_, _| Reply::body(422, "declined")).await;
    let hook = "[[alerts.webhook]]\nurl_env = \"SECURITY_TEST_HOOK_URL\"\nformat = \"slack\"\n";
    let served = start(&upstream, &config("", "", "", &format!("{hook}{PAY}"))).await;
    let key = ballast::IdempotencyKey::v5("order-11", "pay");
    let delivery =
        ballast_http::Delivery::from_request("pay", &ballast_http::Request::post("payments")).unwrap();
    served.queue.enqueue(delivery.task(&key)).await.unwrap();

    let alert_error = || async {
        let tasks = served.queue.list(&Default::default()).await.unwrap();
        tasks.into_iter().find(|t| t.kind == "ballast.alert").and_then(|t| t.last_error.map(|e| (t.id, e)))
    };
    eventually("the alert's post fails", || async { alert_error().await.is_some() }).await;
    let (id, error) = alert_error().await.unwrap();
    assert!(
        error.contains("127.0.0.1") && !error.contains("SECRETTOKEN123") && !error.contains("services"),
        "{error}"
    );
    let page =
        client().get(format!("{}/ui/tasks/{id}", served.admin)).send().await.unwrap().text().await.unwrap();
    assert!(!page.contains("SECRETTOKEN123"), "{page}");
    let overview = client().get(format!("{}/ui/", served.admin)).send().await.unwrap().text().await.unwrap();
    assert!(!overview.contains("SECRETTOKEN123"), "{overview}");
}
