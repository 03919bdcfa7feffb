//! The dashboard in a real browser: headless Chromium driven over WebDriver.
//! An operator opens the overview, follows the failed tasks to one, retries
//! it and sees it pending; without JavaScript the forms work the same; with
//! `[serve] token_env` the browser is sent to the login form and let in only
//! with the token.
//!
//! Needs `chromium` and `chromedriver` on the PATH (Debian: `apt-get install
//! chromium chromium-driver`). Without them each test says it was skipped and
//! passes, unless `BALLAST_TEST_BROWSER` is set (as in CI): then a missing
//! browser fails it. The overview test saves a screenshot of the overview to
//! `target/dashboard-overview.png`, and with `BALLAST_UPDATE_SCREENSHOT=1`
//! also to `docs/dashboard-overview.png`, the README's picture; the fleet
//! test (which needs `BALLAST_TEST_PG` too) likewise `fleet.png`.

mod chromium;
#[path = "../support/mod.rs"]
mod support;

use std::path::Path;
use std::time::Duration;

use ballast::{BreakerState, Classified};
use ballast_queue::{Handler, NewTask, Queue, TaskContext, TaskState, Worker};
use ballast_test_support::{eventually, Reply, Seen, Upstream};
use chromium::{until, Browser, Scripts};
use fantoccini::Locator;
use support::{client, serve_with, Served};
use tokio_util::sync::CancellationToken;

const SCREENSHOT_ENV: &str = "BALLAST_UPDATE_SCREENSHOT";

const SYSTEMS: &str = include_str!("../configs/browser.toml");

/// Declines every `charge` and delivers everything else.
struct DeclinesCharges;

impl Handler for DeclinesCharges {
    type Payload = serde_json::Value;
    type Error = Classified;
    async fn handle(&self, task: TaskContext, _: serde_json::Value) -> Result<(), Classified> {
        if task.kind() == "charge" {
            Err(Classified::permanent("402 Payment Required: card declined"))
        } else {
            Ok(())
        }
    }
}

/// `ballast serve` in front of the scripted upstream, its stats counted
/// every second, with [a day's tasks](a_days_tasks).
async fn a_day() -> (Upstream, Served, Queue) {
    let upstream = Upstream::start(upstream_script).await;
    let served = serve_with(&upstream, "stats_interval = \"1s\"", SYSTEMS).await;
    let queue = a_days_tasks(&served).await;
    (upstream, served, queue)
}

/// A day's queue: task 1 (`charge`) failed, task 2 (`charge`) pending for an
/// hour, three `notify` tasks completed, a `crm.sync` pending.
async fn a_days_tasks(served: &Served) -> Queue {
    let queue =
        Queue::connect(&format!("sqlite://{}", served.dir.path().join("queue.db").display())).await.unwrap();
    let later = Duration::from_secs(3600);
    queue.enqueue(NewTask::new("charge", &serde_json::json!({"order": 42, "amount": 100}))).await.unwrap();
    queue
        .enqueue(NewTask::new("charge", &serde_json::json!({"order": 43, "amount": 250})).run_after(later))
        .await
        .unwrap();
    for order in [40, 41, 42] {
        queue
            .enqueue(NewTask::new("notify", &serde_json::json!({"order": order, "via": "sms"})))
            .await
            .unwrap();
    }
    queue
        .enqueue(NewTask::new("crm.sync", &serde_json::json!({"contact": 7})).run_after(later))
        .await
        .unwrap();
    let worker = Worker::builder(queue.clone())
        .handler("charge", DeclinesCharges)
        .handler("notify", DeclinesCharges)
        .build()
        .unwrap();
    let stop = CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()));
    eventually("task 1 fails and the notifications go out", || async {
        let state = |id| {
            let queue = &queue;
            async move { queue.get(id).await.unwrap().unwrap().state }
        };
        state(1).await == TaskState::Failed && state(5).await == TaskState::Completed
    })
    .await;
    stop.cancel();
    running.await.unwrap();
    queue
}

/// Some calls through the gateway: `pay` and `crm` answer, `sms` is down
/// until its breaker opens.
async fn traffic(served: &Served) {
    for n in 0..6 {
        client().get(format!("{}/call/pay/orders/{n}", served.gateway)).send().await.unwrap();
        client().get(format!("{}/call/crm/contacts/{n}", served.gateway)).send().await.unwrap();
    }
    eventually("the sms breaker opens", || async {
        client().get(format!("{}/call/sms/messages/1", served.gateway)).send().await.unwrap();
        served.systems.get("sms").unwrap().breaker_state() == Some(BreakerState::Open)
    })
    .await;
}

fn upstream_script(seen: &Seen, _: usize) -> Reply {
    if seen.target.starts_with("/messages") {
        Reply::body(503, "sms gateway down")
    } else {
        Reply::body(200, "{}").header("content-type", "application/json")
    }
}

fn save_screenshot(png: &[u8], name: &str) {
    assert!(png.starts_with(b"\x89PNG"), "the screenshot is a PNG");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("the target directory");
    std::fs::write(target.join(name), png).unwrap();
    if std::env::var_os(SCREENSHOT_ENV).is_some_and(|v| v == "1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::write(docs.join(name), png).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_follows_a_failed_task_and_retries_it() {
    let Some(browser) = Browser::start(Scripts::On).await else { return };
    let (_upstream, served, queue) = a_day().await;
    traffic(&served).await;

    let overview = format!("{}/ui/", served.admin);
    browser.reload_until(&overview, "tr[data-kind='charge'] a.failed", |n| n == "1").await;
    browser.until_text("tr[data-kind='notify'] a.completed", |n| n == "3").await;
    browser.until_text("tr[data-system='pay'] .tag", |s| s == "critical").await;
    // The breaker, and attempts in flight against the bulkhead's limit.
    browser.until_text("tr[data-system='pay']", |s| s.contains("closed") && s.contains("0 / 8")).await;
    browser.until_text("tr[data-system='sms']", |s| s.contains("open") && s.contains("503")).await;

    // Calls while the page is open give the rates of its next refresh.
    for n in 0..10 {
        client().get(format!("{}/call/pay/orders/{n}", served.gateway)).send().await.unwrap();
        if n % 3 == 0 {
            client().get(format!("{}/call/crm/contacts/{n}", served.gateway)).send().await.unwrap();
        }
    }
    until("the live part is refreshed", || async {
        browser.client.find(Locator::Css("#live[data-refreshed]")).await.ok()
    })
    .await;
    browser.until_text("tr[data-kind='charge'] a.failed", |n| n == "1").await;
    save_screenshot(&browser.client.screenshot().await.unwrap(), "dashboard-overview.png");

    // The link is in the refreshed part: the swap may replace it mid-click.
    let failed = "/ui/tasks?kind=charge&state=failed";
    until("the failed charges are listed", || async {
        if browser.at().await == failed {
            return Some(());
        }
        if let Ok(link) = browser.client.find(Locator::Css("tr[data-kind='charge'] a.failed")).await {
            let _ = link.click().await;
        }
        None
    })
    .await;
    let rows = browser.client.find_all(Locator::Css("main table tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 1, "one failed charge");
    assert!(rows[0].text().await.unwrap().contains("card declined"));
    browser.click("a[href='/ui/tasks/1']").await;
    browser.until_text("h2 .state", |s| s == "failed").await;
    browser.until_text("td.error", |s| s.contains("card declined")).await;

    browser.click("#retry").await;
    browser.until_text("h2 .state", |s| s == "pending").await;
    browser.until_text("p.said", |s| s.contains("task 1 retried")).await;
    assert_eq!(queue.get(1).await.unwrap().unwrap().state, TaskState::Pending);
    browser.click("header nav a[href='/ui/']").await;
    browser.until_text("tr[data-kind='charge'] a.pending", |n| n == "2").await;
    browser.until_text("tr[data-kind='charge'] a.failed", |n| n == "0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_javascript_the_forms_work_the_same() {
    let Some(browser) = Browser::start(Scripts::Off).await else { return };
    let (_upstream, served, queue) = a_day().await;

    let overview = format!("{}/ui/", served.admin);
    browser.reload_until(&overview, "tr[data-kind='charge'] a.failed", |n| n == "1").await;
    browser.click("tr[data-kind='charge'] form button").await;
    browser.until_text("p.said", |s| s.contains("1 failed task(s) of charge retried")).await;
    assert_eq!(queue.get(1).await.unwrap().unwrap().state, TaskState::Pending);

    browser.goto(&format!("{}/ui/tasks/2", served.admin)).await;
    browser.click("#cancel").await;
    browser.until_text("h2 .state", |s| s == "cancelled").await;
    assert_eq!(queue.get(2).await.unwrap().unwrap().state, TaskState::Cancelled);
    browser.reload_until(&overview, "tr[data-kind='charge'] a.cancelled", |n| n == "1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_browser_logs_in_first() {
    let Some(browser) = Browser::start(Scripts::On).await else { return };
    std::env::set_var("BALLAST_BROWSER_TEST_TOKEN", "operator-s3cret-2026");
    let upstream = Upstream::start(upstream_script).await;
    let served = serve_with(&upstream, "token_env = \"BALLAST_BROWSER_TEST_TOKEN\"", SYSTEMS).await;

    browser.goto(&format!("{}/ui/tasks", served.admin)).await;
    assert_eq!(browser.at().await, "/ui/login", "sent to the login form");
    browser.type_into("input[name='token']", "operator-guess").await;
    browser.click("main form button[type='submit']").await;
    browser.until_text("[role='alert']", |s| s == "That is not the token.").await;
    assert_eq!(browser.at().await, "/ui/login");
    assert!(browser.text("tr[data-system='pay']").await.is_none(), "nothing shown without the token");

    browser.type_into("input[name='token']", "operator-s3cret-2026").await;
    browser.click("main form button[type='submit']").await;
    browser.until_text("tr[data-system='pay'] .tag", |s| s == "critical").await;
    assert_eq!(browser.at().await, "/ui/");

    browser.click("header form button").await;
    until("logged out", || async { (browser.at().await == "/ui/login").then_some(()) }).await;
    browser.goto(&format!("{}/ui/", served.admin)).await;
    assert_eq!(browser.at().await, "/ui/login", "the session is closed");
}

/// Two replicas on one PostgreSQL queue: the Fleet page of either lists
/// both, live, and draws each system's attempts sent, calls refused and
/// 429s over the last 15 minutes and the last hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_page_shows_every_replica_and_the_fleet_s_calls() {
    let Ok(pg) = std::env::var("BALLAST_TEST_PG") else {
        eprintln!("skipped: BALLAST_TEST_PG not set");
        return;
    };
    let Some(browser) = Browser::start(Scripts::On).await else { return };
    let schema = format!("fleet_ui_{}", uuid::Uuid::now_v7().simple());
    let admin = sqlx::PgPool::connect(&pg).await.unwrap();
    sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&admin).await.unwrap();
    let separator = if pg.contains('?') { '&' } else { '?' };
    let queue = format!("{pg}{separator}options=-c%20search_path%3D{schema}");
    let upstream = Upstream::start(upstream_script).await;
    let text = format!(
        "[queue]\nurl = \"{queue}\"\n[serve]\nlisten = \"127.0.0.1:0\"\n[gateway]\nlisten = \"127.0.0.1:0\"\n\
         [systems.pay]\nbase_url = \"http://{{upstream}}/\"\n[systems.pay.rate_limit]\nrate = \"50/s\"\nscope = \"fleet\"\n"
    );
    let replicas = [
        support::serve_text(&upstream.addr.to_string(), &text).await,
        support::serve_text(&upstream.addr.to_string(), &text).await,
    ];
    let started = std::time::Instant::now();
    // Samples are written every 5 s: a few of them make a line.
    while started.elapsed() < Duration::from_secs(16) {
        for replica in &replicas {
            client().get(format!("{}/call/pay/orders/1", replica.gateway)).send().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    browser
        .reload_until(&format!("{}/ui/fleet", replicas[0].admin), "#replicas tbody", |rows| {
            rows.matches("live").count() == 2
        })
        .await;
    browser.until_text("#replicas tbody", |rows| rows.contains("this one") && !rows.contains("drift")).await;
    browser
        .until_text("section[data-system='pay'] h2", |h| {
            h.contains("sent/s") && h.contains("refused/s") && h.contains("429/s")
        })
        .await;
    for line in ["sent", "refused", "throttled"] {
        let lines = browser
            .client
            .find_all(Locator::Css(&format!("section[data-system='pay'] svg.chart polyline.{line}")))
            .await
            .unwrap();
        assert_eq!(lines.len(), 2, "the fleet's {line} a second, drawn over 15 minutes and an hour");
    }
    save_screenshot(&browser.client.screenshot().await.unwrap(), "fleet.png");
}
