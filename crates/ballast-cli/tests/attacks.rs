//! The second round of attacks and chaos, through the real binary as they
//! were found: an upstream's headers cannot panic or stall a system, no
//! spelling of a path or a method changes what a call is, the gateway
//! answers only its own names and never forwards TRACE, seal keys rotate and
//! a changed delivery is held, a deferred query stays secret, and readiness
//! sees a queue file that is gone.

mod support;

use ballast_test_support::{eventually, send, Reply, Upstream};
use serde_json::Value;
use support::{client, raw, Served};

fn reason(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["ballast"]["reason"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// A request written by hand to the gateway, with `headers` and a body.
fn request(method: &str, target: &str, headers: &str) -> String {
    format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Length: 2\r\nConnection: close\r\n\r\n{{}}")
}

/// N1, N3: an upstream that answers `X-RateLimit-Reset: 1e25`, then
/// `Retry-After: 999999999`, neither crashes an attempt nor stalls the
/// system past `max_hold`; the hold is in the metrics, and a reload clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_s_rate_headers_can_neither_panic_nor_stall_a_system() {
    let upstream = Upstream::start(|seen, _| match seen.target.as_str() {
        "/huge-reset" => {
            Reply::status(200).header("x-ratelimit-remaining", "0").header("x-ratelimit-reset", "1e25")
        }
        "/forever" => Reply::status(429).header("retry-after", "999999999"),
        _ => Reply::status(201),
    })
    .await;
    let rest = "[systems.sms]\nbase_url = \"http://{up}/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\nretry = \"none\"\n\
                [systems.sms.rate_limit]\nrate = \"100/s\"\nadaptive = true\nmax_hold = \"3s\"\n";
    let served = Served::start(&upstream, "", rest);
    let write = send(
        client().post(format!("{}/call/sms/forever", served.gateway)),
        &[("idempotency-key", "msg-1"), ("prefer", "respond-async")],
    )
    .await;
    let status = write.status().as_u16();
    assert_eq!(status, 429, "the upstream's own answer, passed on: {}", write.text().await.unwrap());
    let held = client().get(format!("{}/call/sms/x", served.gateway)).send().await.unwrap();
    assert_eq!(held.status().as_u16(), 503);
    let wait: u64 = held.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(wait <= 3, "Retry-After: 999999999 holds at most max_hold: {wait}");
    let metrics =
        client().get(format!("{}/metrics", served.admin)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("ballast_rate_limit_hold_seconds{system=\"sms\"}"), "{metrics}");
    served.hang_up();
    eventually("the reload forgets the hold", || async {
        served.log().contains("configuration reloaded")
            && client().get(format!("{}/call/sms/x", served.gateway)).send().await.unwrap().status().as_u16()
                == 201
    })
    .await;

    let read = client().get(format!("{}/call/sms/huge-reset", served.gateway)).send().await.unwrap();
    assert_eq!(read.status().as_u16(), 200, "the answer reached the caller");
    let held = client().get(format!("{}/call/sms/x", served.gateway)).send().await.unwrap();
    assert_eq!(held.status().as_u16(), 503, "a spent quota holds the system");
    let wait: u64 = held.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(wait <= 3, "held at most max_hold, not for 1e25 s: {wait}");
    eventually("the hold ends", || async {
        client().get(format!("{}/call/sms/x", served.gateway)).send().await.unwrap().status().as_u16() == 201
    })
    .await;
    assert!(!served.log().contains("panicked"), "nothing panicked:\n{}", served.log());
}

/// N2: with routes declared, no spelling of a path or a method turns a
/// `keyed_write` into an unkeyed write or a `write_once` into a retried one;
/// an undeclared write is refused unsent; a method override is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_spelling_of_a_path_or_a_method_changes_what_a_call_is() {
    let upstream = Upstream::start(|_, _| Reply::status(503)).await;
    let rest = "[systems.pay]\nbase_url = \"http://{up}/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\n\
                [systems.pay.retry]\nmax_attempts = 3\nfirst_delay = \"100ms\"\nmax_delay = \"200ms\"\n\
                [systems.pay.routes]\n\"POST /payments\" = \"keyed_write\"\n\"PATCH /payments/{id}\" = \"write_once\"\n";
    let served = Served::start(&upstream, "", rest);
    for target in ["payments/", "pay%6Dents", "payments;x=1", "//payments"] {
        for method in ["POST", "post"] {
            let (status, body) =
                raw(&served.gateway, &request(method, &format!("/call/pay/{target}"), "")).await;
            assert_eq!((status, reason(&body).as_str()), (400, "key_required"), "{method} {target}: {body}");
        }
    }
    for target in ["Payments", "payments%2F", "payments/7/extra"] {
        let (status, body) = raw(&served.gateway, &request("POST", &format!("/call/pay/{target}"), "")).await;
        assert_eq!((status, reason(&body).as_str()), (400, "unrouted"), "{target}: {body}");
        assert!(
            body.contains("POST /payments") && body.contains("R-RES-RE-1"),
            "it names the routes: {body}"
        );
    }
    assert_eq!(upstream.count(), 0, "nothing was sent");
    for (n, target) in ["payments/7/", "payments//7", "payments/7;v=1"].iter().enumerate() {
        let key = format!("Idempotency-Key: patch-{n}\r\n");
        let (status, body) =
            raw(&served.gateway, &request("PATCH", &format!("/call/pay/{target}"), &key)).await;
        assert_eq!(status, 503, "{target}: {body}");
        assert_eq!(upstream.count(), n + 1, "{target} is write_once: sent once, not retried");
    }
    let (status, body) =
        raw(&served.gateway, &request("PATCH", "/call/pay/payments%2F7", "Idempotency-Key: patch-x\r\n"))
            .await;
    assert_eq!((status, reason(&body).as_str()), (400, "unrouted"), "{body}");
    let before = upstream.count();
    let overridden = raw(
        &served.gateway,
        "GET /call/pay/payments HTTP/1.1\r\nHost: 127.0.0.1\r\nX-HTTP-Method-Override: POST\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(overridden.0, 503);
    let sent: Vec<_> = upstream.requests().into_iter().skip(before).collect();
    assert!(sent.len() > 1, "a GET is a read, retried: {}", sent.len());
    assert!(
        sent.iter().all(|s| s.method == "GET" && s.header("x-http-method-override").is_none()),
        "the override never reached the upstream that would act on it"
    );
}

/// N4, N5: a rebound name is answered 421 and TRACE / CONNECT 405, with
/// nothing sent (the system's credential is never echoed back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_answers_only_its_own_names_and_never_traces() {
    let upstream = Upstream::start(|seen, _| Reply::body(200, format!("{:?}", seen.headers))).await;
    let rest = "[systems.echo]\nbase_url = \"http://{up}/\"\n[systems.echo.headers]\nAuthorization = { env = \"ATTACKS_PARTNER_TOKEN\" }\n";
    let served = Served::start_with(
        &upstream,
        "",
        rest,
        &[("ATTACKS_PARTNER_TOKEN", "Bearer partner-secret".to_owned())],
    );
    let rebound =
        "GET /call/echo/x HTTP/1.1\r\nHost: attacker.example\r\nOrigin: http://attacker.example\r\n\
                   Sec-Fetch-Site: same-origin\r\nConnection: close\r\n\r\n";
    let (status, body) = raw(&served.gateway, rebound).await;
    assert_eq!((status, reason(&body).as_str()), (421, "unknown_host"), "{body}");
    for method in ["TRACE", "trace"] {
        let trace = format!("{method} /call/echo/x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        let (status, body) = raw(&served.gateway, &trace).await;
        assert_eq!((status, reason(&body).as_str()), (405, "method_not_allowed"), "{body}");
        assert!(!body.contains("partner-secret"), "{body}");
    }
    let (status, _) = raw(
        &served.gateway,
        "CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 405);
    assert_eq!(upstream.count(), 0, "nothing was sent");
    let own = client().get(format!("{}/call/echo/x", served.gateway)).send().await.unwrap();
    assert_eq!(own.status().as_u16(), 200, "its own name is served");
}

/// A keyed write the caller defers while the upstream answers 503, with a
/// credential and a query.
async fn defer_sealed(served: &Served, key: &str) -> String {
    let deferred = send(
        client()
            .post(format!("{}/call/pay/payments?token=tk-secret-{key}", served.gateway))
            .body(r#"{"amount":100}"#),
        &[("idempotency-key", key), ("prefer", "respond-async"), ("authorization", "Bearer caller-secret")],
    )
    .await;
    assert_eq!(deferred.status().as_u16(), 202);
    deferred.headers()["location"].to_str().unwrap().to_owned()
}

const SEALED_PAY: &str =
    "[systems.pay]\nbase_url = \"http://{up}/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\nretry = \"none\"\n";

/// N6: seal keys rotate — the new key seals, an old one listed after it
/// still opens; a delivery whose key is gone is held (not failed), and
/// `serve` says so at start; N13: the query is sealed with the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seal_keys_rotate_and_a_delivery_without_its_key_is_held() {
    let (old, new) = ("aa".repeat(32), "bb".repeat(32));
    let upstream = Upstream::start(|_, _| Reply::status(503)).await;
    // A lease of a second: a killed serve's attempt is taken over at once.
    let queue = "seal_key_env = \"ATTACKS_SEAL_KEY\"\nlease = \"1s\"\n";
    let mut served = Served::start_with(&upstream, queue, SEALED_PAY, &[("ATTACKS_SEAL_KEY", old.clone())]);
    let first = defer_sealed(&served, "pay-1").await;
    let stored: Vec<u8> = std::fs::read_dir(served.dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("tasks.db"))
        .flat_map(|e| std::fs::read(e.path()).unwrap_or_default())
        .collect();
    assert!(!stored.windows(9).any(|w| w == b"tk-secret"), "the query is sealed at rest");

    let _ = served.child.kill();
    let _ = served.child.wait();
    let sent_with_the_old_key = upstream.count_with("idempotency-key", "pay-1");
    served.restart(&[("ATTACKS_SEAL_KEY", new.clone())]);
    eventually("serve says a waiting delivery's key is gone", || async {
        served.log().contains("no configured seal key")
    })
    .await;
    upstream.rescript(|_, _| Reply::status(201));
    // Its handle is made from the key that sealed it: while that key is
    // gone, the task is the operator's to see, not the caller's.
    assert_eq!(client().get(format!("{}{first}", served.gateway)).send().await.unwrap().status(), 404);
    eventually("the delivery is held, not failed", || async {
        support::queued(served.dir.path()).iter().any(|task| {
            task["state"] == "pending" && task["last_error"].as_str().is_some_and(|e| e.contains("rotated"))
        })
    })
    .await;
    assert_eq!(
        upstream.count_with("idempotency-key", "pay-1"),
        sent_with_the_old_key,
        "never sent without its key"
    );

    served.restart(&[("ATTACKS_SEAL_KEY", format!("{new},{old}"))]);
    // A held delivery is looked at again every few minutes; an operator
    // who brought the key back runs it now (the dashboard's Run now).
    let db = format!("sqlite://{}", served.dir.path().join("tasks.db").display());
    let id: i64 = first.trim_start_matches("/tasks/").split('.').next().unwrap().parse().unwrap();
    assert!(ballast_queue::Queue::connect(&db).await.unwrap().run_now(id).await.unwrap());
    eventually("the old key, listed after the new one, opens it", || async {
        served.task(&first).await["state"] == "completed"
    })
    .await;
    let delivered =
        upstream.requests().into_iter().rfind(|s| s.header("idempotency-key") == Some("pay-1")).unwrap();
    assert_eq!(delivered.header("authorization"), Some("Bearer caller-secret"));
    assert_eq!(delivered.target, "/payments?token=tk-secret-pay-1", "the query comes out of the seal");
}

/// N10: a database writer who changes a sealed delivery's method and path
/// gets nothing sent: it no longer opens, and is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_delivery_changed_in_the_database_is_held_not_sent() {
    let upstream = Upstream::start(|_, _| Reply::status(503)).await;
    let queue = "seal_key_env = \"ATTACKS_SEAL_KEY_2\"\nlease = \"1s\"\n";
    let mut served =
        Served::start_with(&upstream, queue, SEALED_PAY, &[("ATTACKS_SEAL_KEY_2", "cc".repeat(32))]);
    let location = defer_sealed(&served, "pay-2").await;
    // Changed while no worker holds it, as a writer to the database would.
    let _ = served.child.kill();
    let _ = served.child.wait();
    let db = format!("sqlite://{}", served.dir.path().join("tasks.db").display());
    let pool = sqlx::SqlitePool::connect(&db).await.unwrap();
    sqlx::query(
        "UPDATE ballast_tasks SET payload = json_set(payload, '$.method', 'DELETE', '$.path', 'admin/accounts/42')",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    upstream.rescript(|_, _| Reply::status(201));
    served.restart(&[("ATTACKS_SEAL_KEY_2", "cc".repeat(32))]);
    eventually("the changed delivery is held", || async {
        served.task(&location).await["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("changed after it was stored"))
    })
    .await;
    assert_eq!(served.task(&location).await["state"], "pending");
    assert!(upstream.requests().iter().all(|s| s.method != "DELETE"), "nothing was sent as DELETE");
}

/// N13: without a seal key a deferred write's query is stored as sent, and
/// the dashboard masks its values as errors and spans do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_query_is_masked_on_the_dashboard() {
    let upstream = Upstream::start(|_, _| Reply::status(503)).await;
    let served = Served::start(&upstream, "", SEALED_PAY);
    let deferred = send(
        client().post(format!("{}/call/pay/payments?token=tk-secret-3&x=1", served.gateway)),
        &[("idempotency-key", "pay-3"), ("prefer", "respond-async")],
    )
    .await;
    assert_eq!(deferred.status().as_u16(), 202);
    let page =
        client().get(format!("{}/ui/tasks/1", served.admin)).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("token=***") && !page.contains("tk-secret-3"), "{page}");
}

/// N9: when the queue's file is removed under `serve`, readiness fails and
/// a deferral is refused (not answered 202 into a file nobody opens again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_fails_and_deferrals_are_refused_when_the_queue_file_is_gone() {
    let upstream = Upstream::start(|_, _| Reply::status(503)).await;
    let served = Served::start(&upstream, "", &format!("[serve]\nstats_interval = \"1s\"\n{SEALED_PAY}"));
    let ready = || async { client().get(format!("{}/health/ready", served.admin)).send().await.unwrap() };
    assert_eq!(ready().await.status().as_u16(), 200);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(served.dir.path().join(format!("tasks.db{suffix}")));
    }
    eventually("readiness sees the file gone", || async { ready().await.status().as_u16() == 503 }).await;
    let body: Value = ready().await.json().await.unwrap();
    let why = body["queue"]["storage_error"].as_str().unwrap_or_default().to_owned();
    assert!(why.contains("removed or replaced"), "{body}");
    let deferred = send(
        client().post(format!("{}/call/pay/payments", served.gateway)),
        &[("idempotency-key", "pay-4"), ("prefer", "respond-async")],
    )
    .await;
    assert_eq!(deferred.status().as_u16(), 503, "not a 202 into a lost file");
    assert_eq!(reason(&deferred.text().await.unwrap()), "queue_unavailable");
}
