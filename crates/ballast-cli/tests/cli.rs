//! The `ballast` binary: exit codes, formats and the snapshot of its output.

use std::process::{Command, Output};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../ballast-config/tests/fixtures");

fn ballast(args: &[&str]) -> Output {
    // Run from the workspace root so file names in the output are stable and relative.
    Command::new(env!("CARGO_BIN_EXE_ballast"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn lint_exit_codes() {
    let clean = ballast(&["lint", "examples/ballast.toml"]);
    assert_eq!(clean.status.code(), Some(0), "{}", stdout(&clean));

    let warning_only = ballast(&["lint", &format!("{FIXTURES}/re4_warning.toml")]);
    assert_eq!(warning_only.status.code(), Some(0));

    let errors = ballast(&["lint", &format!("{FIXTURES}/bad.toml")]);
    assert_eq!(errors.status.code(), Some(1));

    // Unknown keys and wrong types are errors like the rules' (exit 1) ...
    let unknown = ballast(&["lint", &format!("{FIXTURES}/unknown_key.toml")]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(stdout(&unknown).contains("unknown_key.toml:3:1"), "{}", stdout(&unknown));

    // ... only a file that is not TOML is unusable (exit 2), still located.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "[systems.sber.retry]\nmax_attempts = = 3\n").unwrap();
    let broken = ballast(&["lint", &broken.display().to_string()]);
    assert_eq!(broken.status.code(), Some(2));
    assert!(stdout(&broken).contains("broken.toml:2:"), "{}", stdout(&broken));
    assert!(stdout(&broken).contains("invalid TOML"), "{}", stdout(&broken));

    let missing = ballast(&["lint", "no/such/file.toml", "examples/ballast.toml"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stdout(&missing).contains("no/such/file.toml"));
}

#[test]
fn lint_reports_unknown_keys_and_wrong_types_beside_the_rule_findings() {
    let out = ballast(&["lint", "--format", "json", &format!("{FIXTURES}/unknown_and_rules.toml")]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let findings: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings = findings.as_array().unwrap();
    let keys: Vec<_> = findings[0].as_object().unwrap().keys().cloned().collect();
    let mut expected = ["rule", "severity", "file", "line", "column", "message", "help"].map(String::from);
    expected.sort();
    assert_eq!(keys, expected);
    let got: Vec<_> = findings.iter().map(|f| (f["rule"].as_str(), f["line"].as_u64().unwrap())).collect();
    assert_eq!(got, [(None, 2), (Some("R-RES-RE-4"), 6), (Some("R-RES-RE-3"), 7), (None, 8), (None, 12)]);
    assert!(findings[3]["help"].as_str().unwrap().contains("did you mean `retry_on`?"));
}

#[test]
fn lint_human_output_snapshot() {
    let out = ballast(&["lint", "crates/ballast-config/tests/fixtures/bad.toml"]);
    let expected = include_str!("snapshots/lint_bad.txt");
    assert_eq!(stdout(&out), expected);
}

#[test]
fn lint_json_is_one_array_across_files() {
    let out = ballast(&[
        "lint",
        "--format",
        "json",
        "crates/ballast-config/tests/fixtures/x4.toml",
        "crates/ballast-config/tests/fixtures/cb1.toml",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let expected = include_str!("snapshots/lint_x4_cb1.json");
    assert_eq!(stdout(&out), expected);
}

#[test]
fn explain_one_system() {
    let out = ballast(&["explain", "examples/ballast.toml", "--system", "sber"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(text.starts_with("system `sber`"), "{text}");
    assert!(text.contains("in-memory window: 4s"), "{text}");
    assert!(text.contains("key_ttl 24h: the key outlives every retry"), "{text}");
    assert!(!text.contains("system `crm`"));

    let unknown = ballast(&["explain", "examples/ballast.toml", "--system", "sbr"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("did you mean `sber`"));
}

/// `ballast queue` against a SQLite queue prepared through the library.
mod queue {
    use super::*;

    use ballast::{Classified, IdempotencyKey};
    use ballast_queue::{Handler, ListFilter, NewTask, Queue, TaskContext, TaskState, Worker};
    use serde_json::Value;
    use tokio_util::sync::CancellationToken;

    /// Succeeds for "ok", fails permanently for anything else.
    struct Sms;

    impl Handler for Sms {
        type Payload = String;
        type Error = Classified;
        async fn handle(&self, _: TaskContext, text: String) -> Result<(), Classified> {
            if text == "ok" {
                Ok(())
            } else {
                Err(Classified::permanent(
                    "the gateway declined the card: insufficient funds, the payment will not go through",
                ))
            }
        }
    }

    /// A queue file with, of kind `sms`: task 1 completed, tasks 2 and 3
    /// failed, task 4 pending in an hour; and task 5 of kind `charge`, pending.
    async fn prepared() -> (tempfile::TempDir, String, Queue) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db").display().to_string();
        let queue = Queue::connect(&format!("sqlite://{path}")).await.unwrap();
        queue.migrate().await.unwrap();
        let key = |n: &str| IdempotencyKey::v5(n, "sms");
        queue.enqueue(NewTask::new("sms", "ok").key(key("a"))).await.unwrap();
        queue.enqueue(NewTask::new("sms", "fail").key(key("b"))).await.unwrap();
        queue.enqueue(NewTask::new("sms", "fail")).await.unwrap();
        let later = std::time::Duration::from_secs(3600);
        queue.enqueue(NewTask::new("sms", "ok").run_after(later)).await.unwrap();
        queue.enqueue(NewTask::new("charge", &100).max_attempts(3)).await.unwrap();

        let worker = Worker::builder(queue.clone()).handler("sms", Sms).build().unwrap();
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(worker.run(shutdown.clone()));
        let settled = |tasks: &[ballast_queue::TaskInfo]| {
            tasks.iter().filter(|t| matches!(t.state, TaskState::Completed | TaskState::Failed)).count() == 3
        };
        for _ in 0..500 {
            if settled(&queue.list(&ListFilter::default()).await.unwrap()) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        shutdown.cancel();
        running.await.unwrap();
        (dir, path, queue)
    }

    fn json(o: &Output) -> Value {
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
    }

    fn stderr(o: &Output) -> String {
        String::from_utf8_lossy(&o.stderr).into_owned()
    }

    /// `o` exited with `code`, saying `message` on stderr.
    fn exits_saying(o: &Output, code: i32, message: &str) {
        assert_eq!(o.status.code(), Some(code), "{}", stderr(o));
        assert!(stderr(o).contains(message), "{}", stderr(o));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn stats_and_list_in_human_and_json() {
        let (_dir, db, _) = prepared().await;

        let stats = ballast(&["queue", "--db", &db, "stats"]);
        assert_eq!(stats.status.code(), Some(0), "{}", stderr(&stats));
        let text = stdout(&stats);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "KIND    PENDING  RUNNING  COMPLETED  FAILED  CANCELLED  OLDEST DUE", "{text}");
        assert!(lines[1].starts_with("charge        1        0          0       0          0  "), "{text}");
        assert_eq!(lines[2], "sms           1        0          1       2          0           -", "{text}");

        let stats =
            json(&ballast(&["queue", "--db", &format!("sqlite://{db}"), "--format", "json", "stats"]));
        let sms = stats.as_array().unwrap().iter().find(|s| s["kind"] == "sms").unwrap();
        assert_eq!(
            (sms["pending"].as_u64(), sms["completed"].as_u64(), sms["failed"].as_u64()),
            (Some(1), Some(1), Some(2))
        );
        assert_eq!(sms["oldest_due_age_secs"], Value::Null, "the pending sms is not due yet");

        let list = ballast(&["queue", "--db", &db, "list", "--state", "failed"]);
        assert_eq!(list.status.code(), Some(0));
        let text = stdout(&list);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("ID  KIND  STATE   ATTEMPT  RUN AT"), "{text}");
        assert!(lines[1].starts_with(" 2  sms   failed     1/10  "), "{text}");
        assert!(lines[1].contains(&IdempotencyKey::v5("b", "sms").to_string()), "{text}");
        assert!(lines[1].ends_with("the gateway declined the card: insufficient funds, the paym…"), "{text}");
        assert!(lines[2].contains(" - "), "task 3 has no key: {text}");

        let list = json(&ballast(&["queue", "--db", &db, "list", "--kind", "charge", "--format", "json"]));
        let tasks = list.as_array().unwrap();
        assert_eq!(tasks.len(), 1);
        assert_eq!((tasks[0]["id"].as_i64(), tasks[0]["state"].as_str()), (Some(5), Some("pending")));
        assert_eq!((tasks[0]["attempt"].as_u64(), tasks[0]["max_attempts"].as_u64()), (Some(0), Some(3)));
        assert_eq!(tasks[0]["payload"], 100);
        assert!(tasks[0]["run_at"].as_str().unwrap().ends_with('Z'));

        let page = ballast(&["queue", "--db", &db, "list", "--limit", "2"]);
        assert!(stdout(&page).ends_with("(more may follow: --after 2)\n"), "{}", stdout(&page));
        let next = json(&ballast(&["queue", "--db", &db, "list", "--after", "2", "--format", "json"]));
        assert_eq!(
            next.as_array().unwrap().iter().map(|t| t["id"].as_i64().unwrap()).collect::<Vec<_>>(),
            [3, 4, 5]
        );
    }

    /// A queue file in SQLite's rollback-journal mode, as a copy taken for
    /// inspection may be, with two `sms` tasks: one pending, one failed.
    async fn delete_mode_queue(dir: &std::path::Path) -> String {
        use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
        let path = dir.join("tasks.db");
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Delete);
        let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options).await.unwrap();
        let queue = Queue::from_sqlite(pool.clone());
        queue.migrate().await.unwrap();
        let later = std::time::Duration::from_secs(3600);
        queue.enqueue(NewTask::new("sms", "ok").run_after(later)).await.unwrap();
        queue.enqueue(NewTask::new("sms", "fail")).await.unwrap();
        let worker = Worker::builder(queue.clone()).handler("sms", Sms).build().unwrap();
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(worker.run(shutdown.clone()));
        for _ in 0..500 {
            if queue.get(2).await.unwrap().is_some_and(|t| t.state == TaskState::Failed) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        shutdown.cancel();
        running.await.unwrap();
        pool.close().await;
        path.display().to_string()
    }

    /// The journal mode recorded in the file, read without changing it.
    async fn journal_mode(path: &str) -> String {
        use sqlx::{ConnectOptions as _, Connection as _};
        let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path).read_only(true);
        let mut conn = options.connect().await.unwrap();
        let mode = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut conn).await.unwrap();
        conn.close().await.unwrap();
        mode
    }

    /// The `stats` and `list` runs of the two tests below, checked.
    fn look(run: impl Fn(&[&str]) -> Output) {
        let stats = run(&["stats", "--format", "json"]);
        assert_eq!(stats.status.code(), Some(0), "{}", stderr(&stats));
        let sms = &json(&stats)[0];
        assert_eq!((sms["pending"].as_u64(), sms["failed"].as_u64()), (Some(1), Some(1)), "{sms}");
        let list = run(&["list", "--state", "failed"]);
        assert_eq!(list.status.code(), Some(0), "{}", stderr(&list));
        assert!(stdout(&list).lines().nth(1).unwrap().starts_with(" 2  sms   failed"), "{}", stdout(&list));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn stats_and_list_leave_the_database_file_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let db = delete_mode_queue(dir.path()).await;
        let before = std::fs::read(&db).unwrap();

        look(|args| ballast(&[&["queue", "--db", &db][..], args].concat()));

        assert_eq!(journal_mode(&db).await, "delete", "the journal mode is the file's, not the reader's");
        assert!(std::fs::read(&db).unwrap() == before, "the file changed by being read");
    }

    /// An operator who may read the service's queue but not write it.
    #[tokio::test(flavor = "multi_thread")]
    async fn stats_and_list_read_a_file_the_user_cannot_write() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        use std::os::unix::process::CommandExt as _;
        let dir = tempfile::tempdir().unwrap();
        let db = delete_mode_queue(dir.path()).await;
        if std::fs::metadata(&db).unwrap().uid() != 0 {
            eprintln!("skipped: only root can run the binary as another user");
            return;
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
        const NOBODY: u32 = 65_534;

        look(|args| {
            Command::new(env!("CARGO_BIN_EXE_ballast"))
                .args([&["queue", "--db", &db][..], args].concat())
                .uid(NOBODY)
                .gid(NOBODY)
                .output()
                .expect("the binary runs")
        });
        assert_eq!(journal_mode(&db).await, "delete");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn retry_cancel_and_prune_act_or_say_why_not() {
        let (_dir, db, queue) = prepared().await;
        let run = |args: &[&str]| ballast(&[&["queue", "--db", &db][..], args].concat());

        let retried = run(&["retry", "2", "--format", "json"]);
        assert_eq!(retried.status.code(), Some(0), "{}", stderr(&retried));
        assert_eq!(json(&retried), serde_json::json!({ "retried": 1, "ids": [2] }));
        assert_eq!(queue.get(2).await.unwrap().unwrap().state, TaskState::Pending);
        let again = run(&["retry", "2", "--format", "json"]);
        exits_saying(&again, 1, "task 2 is pending, not failed: nothing to retry");
        assert_eq!(json(&again)["retried"], 0);
        assert_eq!(json(&again)["ids"], serde_json::json!([]));
        let unknown = run(&["retry", "99"]);
        exits_saying(&unknown, 1, "no task 99");

        assert_eq!(run(&["retry", "--all-failed", "--kind", "charge"]).status.code(), Some(1));
        let all = run(&["retry", "--all-failed", "--format", "json"]);
        assert_eq!((all.status.code(), json(&all)), (Some(0), serde_json::json!({ "retried": 1 })));
        let none = run(&["retry", "--all-failed"]);
        exits_saying(&none, 1, "no failed tasks");

        let cancelled = run(&["cancel", "5"]);
        assert_eq!((cancelled.status.code(), stdout(&cancelled).as_str()), (Some(0), "task 5 cancelled\n"));
        let twice = run(&["cancel", "5", "--format", "json"]);
        exits_saying(&twice, 1, "task 5 is already cancelled: nothing to cancel");
        assert_eq!(
            (json(&twice)["cancelled"].as_u64(), json(&twice)["ids"].as_array().map(Vec::len)),
            (Some(0), Some(0))
        );

        let kept = run(&["prune", "--older-than", "7d", "--format", "json"]);
        assert_eq!((kept.status.code(), json(&kept)["pruned"].as_u64()), (Some(0), Some(0)));
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let pruned = run(&["prune", "--older-than", "1ms"]);
        assert_eq!(pruned.status.code(), Some(0));
        assert_eq!(stdout(&pruned), "2 task(s) finalized more than 1ms ago deleted\n");
        assert_eq!(queue.get(1).await.unwrap(), None, "the completed task is gone");
        assert!(queue.get(2).await.unwrap().is_some(), "pending tasks stay");
    }

    #[test]
    fn bad_arguments_and_missing_databases_exit_2() {
        let missing = ballast(&["queue", "--db", "no/such/tasks.db", "stats"]);
        exits_saying(&missing, 2, "no queue database at \"no/such/tasks.db\"");
        // An existing database without the queue's table is not silently migrated.
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("other.db");
        std::fs::File::create(&empty).unwrap();
        let empty = empty.display().to_string();
        for args in [&["stats"][..], &["list"], &["retry", "--all-failed"]] {
            let out = ballast(&[&["queue", "--db", &empty][..], args].concat());
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            let message = format!(
                "no {} table in sqlite://{empty}: is this the queue's database?",
                ballast_queue::TABLE
            );
            assert!(stderr(&out).contains(&message), "{}", stderr(&out));
            assert!(stderr(&out).contains("`ballast serve` or `Queue::migrate()` creates it"));
        }
        let tables = std::fs::metadata(&empty).unwrap().len();
        assert_eq!(tables, 0, "nothing was created in {empty}");
        let no_db = ballast(&["queue", "stats"]);
        exits_saying(&no_db, 2, "needs --db");
        for args in [
            &["retry"][..],
            &["retry", "1", "--all-failed"],
            &["list", "--state", "done"],
            &["prune", "--older-than", "7x"],
        ] {
            let out = ballast(&[&["queue", "--db", "tasks.db"][..], args].concat());
            assert_eq!(out.status.code(), Some(2), "{args:?}");
        }
    }
}

/// `ballast serve` delivering deferred writes to a local gateway.
mod serve {
    use super::*;

    use std::collections::HashMap;
    use std::io::{BufRead, BufReader};
    use std::process::{Child, Stdio};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use ballast::IdempotencyKey;
    use ballast_http::{Delivery, Request};
    use ballast_queue::Queue;
    use ballast_test_support::{eventually, Reply, Upstream};
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpStream;

    /// A payment gateway: 503 while down, otherwise 201. Each answer closes
    /// its connection, so every delivery needs a connection of its own.
    struct Gateway {
        up: Arc<AtomicBool>,
        /// Requests answered 201, per key: more than one would be a
        /// duplicate delivery after success.
        applied: Arc<Mutex<HashMap<String, u32>>>,
        upstream: Upstream,
    }

    impl Gateway {
        async fn start() -> Gateway {
            let up = Arc::new(AtomicBool::new(true));
            let applied: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
            let (is_up, effects) = (Arc::clone(&up), Arc::clone(&applied));
            let upstream = Upstream::start(move |seen, _| {
                let status = if is_up.load(Ordering::SeqCst) {
                    *effects.lock().unwrap().entry(seen.key().unwrap_or_default().to_owned()).or_default() +=
                        1;
                    201
                } else {
                    503
                };
                Reply::status(status).header("connection", "close")
            })
            .await;
            Gateway { up, applied, upstream }
        }

        fn requests_with(&self, key: &IdempotencyKey) -> usize {
            self.upstream.count_with("idempotency-key", key.as_str())
        }

        fn applied(&self, key: &IdempotencyKey) -> u32 {
            self.applied.lock().unwrap().get(key.as_str()).copied().unwrap_or(0)
        }
    }

    /// The running binary, killed if the test fails before stopping it.
    struct Served(Child);

    impl Drop for Served {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    async fn get(url: &str) -> (u16, String) {
        let response = reqwest::get(url).await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// A gateway that is up, a queue file and a configuration: `[queue]` on
    /// that file polled every 100 ms, then `systems` with `{gateway}` standing
    /// for the gateway's address.
    struct Setup {
        dir: tempfile::TempDir,
        gateway: Gateway,
        db: std::path::PathBuf,
        config: std::path::PathBuf,
    }

    impl Setup {
        async fn new(systems: &str) -> Setup {
            let dir = tempfile::tempdir().unwrap();
            let gateway = Gateway::start().await;
            let db = dir.path().join("tasks.db");
            let config = dir.path().join("ballast.toml");
            let queue = format!("[queue]\nurl = \"sqlite://{}\"\npoll_interval = \"100ms\"\n", db.display());
            let systems = systems.replace("{gateway}", &gateway.upstream.addr.to_string());
            std::fs::write(&config, queue + &systems).unwrap();
            Setup { dir, gateway, db, config }
        }

        /// Starts `ballast serve` (with at most `fds` open files, if given) and
        /// returns it with the first line it printed; its stderr goes to
        /// `stderr.log` in the temp dir.
        fn serve(&self, fds: Option<u32>) -> (Served, String) {
            let stderr = std::fs::File::create(self.dir.path().join("stderr.log")).unwrap();
            let limit = fds.map(|n| format!("ulimit -n {n} && ")).unwrap_or_default();
            let child = Command::new("sh")
                .args(["-c", &format!("{limit}exec \"$0\" \"$@\"")])
                .arg(env!("CARGO_BIN_EXE_ballast"))
                .args(["serve", "--config", &self.config.display().to_string(), "--listen", "127.0.0.1:0"])
                .stdout(Stdio::piped())
                .stderr(stderr)
                .spawn()
                .unwrap();
            let mut served = Served(child);
            let mut first = String::new();
            BufReader::new(served.0.stdout.take().unwrap()).read_line(&mut first).unwrap();
            (served, first)
        }
    }

    /// The admin address in `ballast serve`'s first line.
    fn address(first: &str) -> String {
        let addr = first.split("http://").nth(1).and_then(|s| s.split(' ').next()).unwrap_or_default();
        assert!(!addr.is_empty(), "no address in {first:?}");
        addr.to_owned()
    }

    /// The value of one sample line of the Prometheus text, if present.
    fn try_sample(metrics: &str, series: &str) -> Option<f64> {
        let line = metrics.lines().find(|l| l.starts_with(&format!("{series} ")));
        line.and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// The value of one sample line of the Prometheus text.
    fn sample(metrics: &str, series: &str) -> f64 {
        try_sample(metrics, series).unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn delivers_deferred_writes_once_reports_metrics_and_readiness_and_stops_on_sigterm() {
        let setup = Setup::new(
            r#"
[systems.pay]
base_url = "http://{gateway}/api/"
critical = true
dedupes_by_key = true
key_ttl = "7d"
retry = "none"

[systems.pay.breaker]
kind = "consecutive"
threshold = 2
half_open_after = "1s"
"#,
        )
        .await;
        let (dir, gateway, db) = (&setup.dir, &setup.gateway, &setup.db);
        let (mut served, first) = setup.serve(None);
        assert!(first.ends_with(&format!(" 1 systems, queue sqlite://{}\n", db.display())), "{first}");
        let addr = address(&first);
        let (metrics_url, ready_url, systems_url) = (
            format!("http://{addr}/metrics"),
            format!("http://{addr}/health/ready"),
            format!("http://{addr}/health/systems"),
        );
        assert_eq!(get(&format!("http://{addr}/health/live")).await.0, 200);
        assert_eq!(get(&ready_url).await.0, 200);

        let queue = Queue::connect(&format!("sqlite://{}", db.display())).await.unwrap();
        let pay = |order: &str| {
            let key = IdempotencyKey::v5(order, "register-payment");
            let request = Request::post("payments").json(&serde_json::json!({ "order": order }));
            (Delivery::from_request("pay", &request).unwrap().task(&key), key)
        };

        // A delivery arrives once, with its key, and is counted.
        let (task, a) = pay("order-1");
        queue.enqueue(task).await.unwrap();
        eventually("order-1 is paid", || async { gateway.applied(&a) == 1 }).await;
        assert_eq!(gateway.requests_with(&a), 1);
        let ok = r#"ballast_calls_total{system="pay",kind="keyed_write",outcome="ok"}"#;
        eventually("the call is counted", || async { sample(&get(&metrics_url).await.1, ok) == 1.0 }).await;
        let completed = r#"ballast_queue_tasks{kind="ballast.http.delivery/pay",state="completed"}"#;
        // The queue's counts are refreshed in the background, not by the scrape.
        eventually("the queue is counted", || async {
            try_sample(&get(&metrics_url).await.1, completed) == Some(1.0)
        })
        .await;

        // Two failed deliveries open the critical system's breaker: the
        // system is unavailable, the gateway stays ready (it still takes and
        // defers the writes meant for it).
        gateway.up.store(false, Ordering::SeqCst);
        let ((task_b, b), (task_c, c)) = (pay("order-2"), pay("order-3"));
        queue.enqueue_batch(vec![task_b, task_c]).await.unwrap();
        eventually("pay unavailable", || async { get(&systems_url).await.0 == 503 }).await;
        let (status, report) = get(&ready_url).await;
        let report: serde_json::Value = serde_json::from_str(&report).unwrap();
        assert_eq!(
            (status, report["ready"].as_bool(), report["systems"][0]["state"].as_str()),
            (200, Some(true), Some("open")),
            "{report}"
        );
        let systems: serde_json::Value = serde_json::from_str(&get(&systems_url).await.1).unwrap();
        assert_eq!(
            (systems["status"].as_str(), systems["systems"][0]["status"].as_str()),
            (Some("unavailable"), Some("unavailable")),
            "{systems}"
        );

        // The gateway recovers: after the half-open delay a probe goes through,
        // the breaker closes and both payments are applied once.
        gateway.up.store(true, Ordering::SeqCst);
        eventually("orders 2 and 3 are paid", || async { gateway.applied(&b) + gateway.applied(&c) == 2 })
            .await;
        eventually("pay up again", || async { get(&systems_url).await.0 == 200 }).await;
        assert_eq!(get(&ready_url).await.0, 200);
        let metrics = get(&metrics_url).await.1;
        assert_eq!(sample(&metrics, ok), 3.0);
        assert!(
            sample(&metrics, r#"ballast_calls_total{system="pay",kind="keyed_write",outcome="transient"}"#)
                >= 2.0
        );
        assert_eq!(sample(&metrics, r#"ballast_breaker_state{system="pay"}"#), 0.0);
        for key in [&a, &b, &c] {
            assert!(
                gateway.upstream.requests().iter().all(|r| r.key().is_some_and(|k| !k.is_empty())),
                "every request carries a key"
            );
            assert_eq!(gateway.applied(key), 1);
        }

        let kill = Command::new("kill").args(["-TERM", &served.0.id().to_string()]).status().unwrap();
        assert!(kill.success());
        let deadline = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(status) = served.0.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "still running after SIGTERM");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let log = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap();
        assert!(status.success(), "{status:?}\n{log}");
        assert!(log.contains("ballast serve: stopped; 3 delivered"), "{log}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flood_of_half_sent_requests_neither_stops_deliveries_nor_health_checks() {
        let setup = Setup::new(
            r#"
[serve]
max_connections = 32
header_read_timeout = "2s"

[systems.pay]
base_url = "http://{gateway}/api/"
dedupes_by_key = true
key_ttl = "7d"
"#,
        )
        .await;
        let (gateway, db) = (&setup.gateway, &setup.db);
        // Room for the worker and a few dozen connections, not for the flood.
        let (_served, first) = setup.serve(Some(128));
        let addr = address(&first);

        // 600 clients each send half a request and then nothing.
        let mut flood = Vec::new();
        for _ in 0..600 {
            let connect = TcpStream::connect(addr.as_str());
            if let Ok(Ok(mut socket)) = tokio::time::timeout(Duration::from_secs(2), connect).await {
                let _ = socket.write_all(b"GET /health/live HTTP/1.1\r\nHost: x\r\n").await;
                flood.push(socket);
            }
        }
        assert!(flood.len() > 128, "the flood got through the accept queue: {}", flood.len());

        let queue = Queue::connect(&format!("sqlite://{}", db.display())).await.unwrap();
        let keys: Vec<IdempotencyKey> =
            (0..20).map(|i| IdempotencyKey::v5(format!("order-{i}"), "register-payment")).collect();
        let tasks = keys
            .iter()
            .map(|key| {
                let request = Request::post("payments").json(&serde_json::json!({ "key": key.as_str() }));
                Delivery::from_request("pay", &request).unwrap().task(key)
            })
            .collect();
        queue.enqueue_batch(tasks).await.unwrap();
        eventually("every delivery arrives during the flood", || async {
            keys.iter().all(|k| gateway.applied(k) == 1)
        })
        .await;

        let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
        let live = client.get(format!("http://{addr}/health/live")).send().await;
        assert_eq!(live.map(|r| r.status().as_u16()).ok(), Some(200), "liveness answers during the flood");
        let metrics =
            client.get(format!("http://{addr}/metrics")).send().await.unwrap().text().await.unwrap();
        assert!(metrics.contains("ballast_queue_reachable 1"), "{metrics}");
        drop(flood);
    }

    #[test]
    fn a_configuration_with_errors_is_not_served() {
        let out = ballast(&["serve", "--config", "crates/ballast-config/tests/fixtures/bad.toml"]);
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("R-RES-RE-3") && stderr.contains("not started"), "{stderr}");
        assert!(out.stdout.is_empty(), "nothing listens");
    }
}
