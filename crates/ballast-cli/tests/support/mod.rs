//! `ballast serve` as the tests start it: the real binary on a file they
//! write, its addresses read from its first lines.

// Each test binary uses a different part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ballast_test_support::Upstream;
use serde_json::Value;

/// A running `ballast serve`, killed if the test ends first.
pub struct Served {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub admin: String,
    pub gateway: String,
    /// The lines after the addresses, as far as the tests read them.
    pub lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// Starts `ballast serve` on a file of `[queue]` (SQLite in a temp dir,
    /// polled every 100 ms, plus `queue`), a `[gateway]` on a free port, and
    /// `rest`, in which `{up}` stands for `upstream`'s address.
    pub fn start(upstream: &Upstream, queue: &str, rest: &str) -> Served {
        Served::start_with(upstream, queue, rest, &[])
    }

    /// [`start`](Self::start) with `env` set for the process.
    pub fn start_with(upstream: &Upstream, queue: &str, rest: &str, env: &[(&str, String)]) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[queue]\nurl = \"sqlite://{}\"\npoll_interval = \"100ms\"\n{queue}\n[gateway]\nlisten = \"127.0.0.1:0\"\n\n{}",
            dir.path().join("tasks.db").display(),
            rest.replace("{up}", &upstream.addr.to_string())
        );
        std::fs::write(dir.path().join("ballast.toml"), text).unwrap();
        let (child, admin, gateway, lines) = spawn(dir.path(), env);
        Served { child, dir, admin, gateway, lines }
    }

    /// Starts `ballast serve` on the whole configuration `text` (its own
    /// temp dir), with `env` set for the process.
    pub fn start_text(text: &str, env: &[(&str, String)]) -> Served {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ballast.toml"), text).unwrap();
        let (child, admin, gateway, lines) = spawn(dir.path(), env);
        Served { child, dir, admin, gateway, lines }
    }

    /// Stops this `ballast serve` and starts another on the same file and
    /// queue, with `env`; its log goes on in the same file.
    pub fn restart(&mut self, env: &[(&str, String)]) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        (self.child, self.admin, self.gateway, self.lines) = spawn(self.dir.path(), env);
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("ballast.toml")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    pub fn hang_up(&self) {
        let sent = Command::new("kill").args(["-HUP", &self.child.id().to_string()]).status().unwrap();
        assert!(sent.success());
    }

    pub async fn task(&self, location: &str) -> Value {
        let response = client().get(format!("{}{location}", self.gateway)).send().await.unwrap();
        response.json().await.unwrap()
    }

    /// A keyed POST the caller lets the gateway defer.
    /// The task at `location` (`/tasks/{handle}`, a 202's `Location`) once
    /// it ends, or as it stands after 30 s.
    pub async fn waited(&self, location: &str) -> Value {
        let url = format!("{}{location}?wait=30s", self.gateway);
        client().get(url).send().await.unwrap().json().await.unwrap()
    }

    pub async fn defer(&self, path: &str, key: &str) -> reqwest::Response {
        client()
            .post(format!("{}/call/{path}", self.gateway))
            .header("idempotency-key", key)
            .header("prefer", "respond-async")
            .body(r#"{"amount":100}"#)
            .send()
            .await
            .unwrap()
    }
}

/// `ballast serve` on `dir`'s `ballast.toml`, its log appended to `stderr.log`.
fn spawn(
    dir: &Path,
    env: &[(&str, String)],
) -> (Child, String, String, std::io::Lines<BufReader<std::process::ChildStdout>>) {
    let stderr = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("stderr.log")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ballast"))
        .args(["serve", "--config"])
        .arg(dir.join("ballast.toml"))
        .args(["--listen", "127.0.0.1:0"])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut address = |what: &str| {
        let line = lines.next().and_then(Result::ok).unwrap_or_default();
        let scheme = if line.contains(" on https://") { "https" } else { "http" };
        let url =
            line.split("://").nth(1).and_then(|s| s.split(' ').next()).map(|a| format!("{scheme}://{a}"));
        url.unwrap_or_else(|| {
            let log = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
            panic!("no {what} address in {line:?}; serve's log:\n{log}")
        })
    };
    let admin = address("admin");
    let gateway = address("gateway");
    (child, admin, gateway, lines)
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap()
}

pub fn ballast(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ballast")).args(args).output().unwrap()
}

/// `ballast queue list --format json` of the served queue.
pub fn queued(dir: &Path) -> Vec<Value> {
    let db = format!("sqlite://{}", dir.join("tasks.db").display());
    let out = ballast(&["queue", "--db", &db, "list", "--format", "json"]);
    let listed: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    listed.as_array().cloned().unwrap_or_default()
}

/// Sends `request` as raw bytes (so no client normalizes its method, path
/// or headers) and returns the status and the body.
pub async fn raw(gateway: &str, request: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = gateway.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// The variable that names the PostgreSQL server tests may use.
pub const PG_ENV: &str = "BALLAST_TEST_PG";

/// A fresh schema named after `name` on the test server, as a queue URL;
/// `None` (the test says it was skipped) without `BALLAST_TEST_PG`.
pub async fn pg_queue(name: &str) -> Option<String> {
    let Ok(url) = std::env::var(PG_ENV) else {
        eprintln!("skipped: {PG_ENV} not set");
        return None;
    };
    let schema = format!("{name}_{}", std::process::id());
    let admin = sqlx::PgPool::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("{PG_ENV}={url} is set but PostgreSQL is unreachable: {e}"));
    sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).execute(&admin).await.unwrap();
    sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&admin).await.unwrap();
    let separator = if url.contains('?') { '&' } else { '?' };
    Some(format!("{url}{separator}options=-c%20search_path%3D{schema}"))
}

/// A relay in front of the PostgreSQL server of the queue `url`, and `url`
/// through it: a test cuts or partitions the database without touching the
/// server other tests share.
pub async fn through_relay(url: &str) -> (ballast_test_support::Relay, String) {
    let host = url.split('@').nth(1).unwrap().split('/').next().unwrap();
    let pg = tokio::net::lookup_host(host).await.unwrap().next().unwrap();
    let relay = ballast_test_support::Relay::start(pg).await;
    let through = url.replacen(&pg.to_string(), &relay.addr.to_string(), 1);
    (relay, through)
}
