//! The dashboard over HTTP, as a browser without JavaScript sees it: the
//! overview, the task list and a task's page, the actions and their CSRF
//! token, and the login that a token beyond loopback requires.

mod support;

use ballast::Classified;
use ballast_queue::{Handler, NewTask, Queue, TaskContext, TaskState, Worker};
use ballast_test_support::{eventually, send, Reply, Upstream};
use support::{client, serve, serve_with};
use tokio_util::sync::CancellationToken;

const SYSTEMS: &str = r#"
[systems.pay]
base_url = "http://{upstream}/"
critical = true

[systems.pay.breaker]
kind = "consecutive"
threshold = 3
half_open_after = "30s"

[systems.pay.bulkhead]
limit = 8
queue = 4
"#;

/// Fails every task permanently.
struct Decline;

impl Handler for Decline {
    type Payload = serde_json::Value;
    type Error = Classified;
    async fn handle(&self, _: TaskContext, _: serde_json::Value) -> Result<(), Classified> {
        Err(Classified::permanent("card declined <script>alert(1)</script>"))
    }
}

/// Makes task 1 (`charge`) fail and leaves task 2 pending for an hour.
async fn tasks(queue: &Queue) {
    queue.enqueue(NewTask::new("charge", &serde_json::json!({"order": 42, "amount": 100}))).await.unwrap();
    let later = std::time::Duration::from_secs(3600);
    queue.enqueue(NewTask::new("charge", &serde_json::json!({"order": 43})).run_after(later)).await.unwrap();
    run_until_failed(queue, 1).await;
}

/// Runs a worker that declines every `charge` until task `id` has failed.
async fn run_until_failed(queue: &Queue, id: i64) {
    let worker = Worker::builder(queue.clone()).handler("charge", Decline).build().unwrap();
    let stop = CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()));
    eventually("the task fails", || async {
        queue.get(id).await.unwrap().unwrap().state == TaskState::Failed
    })
    .await;
    stop.cancel();
    running.await.unwrap();
}

fn csrf(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a form with a CSRF token") + 19;
    page[at..at + 32].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_a_failed_task_and_retries_it() {
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let served = serve(&upstream, SYSTEMS).await;
    let queue =
        Queue::connect(&format!("sqlite://{}", served.dir.path().join("queue.db").display())).await.unwrap();
    tasks(&queue).await;

    let overview = client().get(format!("{}/ui/", served.admin)).send().await.unwrap().text().await.unwrap();
    assert!(
        overview.contains("data-system=\"pay\"") && overview.contains("class=\"tag\">critical<"),
        "{overview}"
    );
    assert!(overview.contains("0 / 8"), "in flight against the bulkhead's limit");
    eventually("the queue is counted", || async {
        let live =
            client().get(format!("{}/ui/live", served.admin)).send().await.unwrap().text().await.unwrap();
        live.contains("data-kind=\"charge\"") && live.contains("Retry all failed")
    })
    .await;

    let list = client()
        .get(format!("{}/ui/tasks?kind=charge", served.admin))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (two, one) = (list.find("/ui/tasks/2").unwrap(), list.find("/ui/tasks/1").unwrap());
    assert!(two < one, "newest first");

    let page =
        client().get(format!("{}/ui/tasks/1", served.admin)).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("&quot;amount&quot;: 100"), "the payload, pretty and escaped: {page}");
    assert!(page.contains("card declined &lt;script&gt;"), "errors are escaped: {page}");
    assert!(!page.contains("<script>alert"), "nothing from the table runs in the page");

    let url = format!("{}/ui/tasks/1/retry", served.admin);
    let forged = client().post(&url).form(&[("csrf", "0".repeat(32))]).send().await.unwrap();
    assert_eq!(forged.status().as_u16(), 403);
    assert_eq!(
        queue.get(1).await.unwrap().unwrap().state,
        TaskState::Failed,
        "a forged form changes nothing"
    );
    let done = client().post(&url).form(&[("csrf", csrf(&page))]).send().await.unwrap();
    assert_eq!(done.status().as_u16(), 303);
    assert_eq!(queue.get(1).await.unwrap().unwrap().state, TaskState::Pending);
    let back = done.headers()["location"].to_str().unwrap().to_owned();
    let shown = client().get(format!("{}{back}", served.admin)).send().await.unwrap().text().await.unwrap();
    assert!(shown.contains("task 1 retried"), "{shown}");

    let cancel = format!("{}/ui/tasks/2/cancel", served.admin);
    assert_eq!(
        client().post(&cancel).form(&[("csrf", csrf(&page))]).send().await.unwrap().status().as_u16(),
        303
    );
    assert_eq!(queue.get(2).await.unwrap().unwrap().state, TaskState::Cancelled);

    let css = client().get(format!("{}/ui/assets/style.css", served.admin)).send().await.unwrap();
    assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_dashboard_asks_for_it_and_scrapers_need_none() {
    std::env::set_var("BALLAST_UI_TEST_TOKEN", "operator-s3cret-2026");
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let served = serve_with(&upstream, "token_env = \"BALLAST_UI_TEST_TOKEN\"", SYSTEMS).await;

    let refused = client().get(format!("{}/ui/", served.admin)).send().await.unwrap();
    assert_eq!(
        (refused.status().as_u16(), refused.headers()["location"].to_str().unwrap()),
        (303, "/ui/login")
    );
    let bearer = send(
        client().get(format!("{}/ui/", served.admin)),
        &[("authorization", "Bearer operator-s3cret-2026")],
    )
    .await;
    assert_eq!(bearer.status().as_u16(), 200);
    assert_eq!(
        client().get(format!("{}/metrics", served.admin)).send().await.unwrap().status().as_u16(),
        200
    );
    assert_eq!(
        client().get(format!("{}/health/live", served.admin)).send().await.unwrap().status().as_u16(),
        200
    );

    let wrong =
        client().post(format!("{}/ui/login", served.admin)).form(&[("token", "guess")]).send().await.unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    let login = client()
        .post(format!("{}/ui/login", served.admin))
        .form(&[("token", "operator-s3cret-2026")])
        .send()
        .await;
    let login = login.unwrap();
    let cookie = login.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    let session = cookie.split(';').next().unwrap();
    let page = client().get(format!("{}/ui/", served.admin)).header("cookie", session).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
}

/// A failed write holding its sequence: the write behind it is shown held
/// (and cannot be run before its turn), and the operator releases the
/// failed one from the dashboard, which makes the held one due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_holding_its_sequence_is_released_from_the_dashboard() {
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let served = serve(&upstream, SYSTEMS).await;
    let queue =
        Queue::connect(&format!("sqlite://{}", served.dir.path().join("queue.db").display())).await.unwrap();
    let in_seq =
        |order: u32| NewTask::new("charge", &serde_json::json!({ "order": order })).sequence("customer/42");
    let first = queue.enqueue(in_seq(1)).await.unwrap().id;
    let second = queue.enqueue(in_seq(2)).await.unwrap().id;
    run_until_failed(&queue, first).await;

    let get = |path: String| async move { client().get(path).send().await.unwrap().text().await.unwrap() };
    let list = get(format!("{}/ui/tasks?kind=charge", served.admin)).await;
    assert!(list.contains("class=\"tag\"") && list.contains(">held<"), "{list}");
    let held = get(format!("{}/ui/tasks/{second}", served.admin)).await;
    assert!(held.contains("customer/42") && held.contains("held behind an earlier write"), "{held}");
    assert!(!held.contains("id=\"retry\""), "a held write cannot be run before its turn: {held}");

    let failed = get(format!("{}/ui/tasks/{first}", served.admin)).await;
    assert!(failed.contains("id=\"release\"") && failed.contains("holds it until released"), "{failed}");
    let release = format!("{}/ui/tasks/{first}/release", served.admin);
    let done = client().post(&release).form(&[("csrf", csrf(&failed))]).send().await.unwrap();
    assert_eq!(done.status().as_u16(), 303);
    let back = done.headers()["location"].to_str().unwrap().to_owned();
    assert!(get(format!("{}{back}", served.admin)).await.contains("left its sequence"));
    assert!(!queue.get(second).await.unwrap().unwrap().is_held(), "the write behind it is due");
    let again = client().post(&release).form(&[("csrf", csrf(&failed))]).send().await.unwrap();
    let said = get(format!("{}{}", served.admin, again.headers()["location"].to_str().unwrap())).await;
    assert!(said.contains("not a failed task of a sequence"), "{said}");
}
