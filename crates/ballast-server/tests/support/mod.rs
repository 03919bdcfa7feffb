//! An upstream HTTP/1.1 server whose answers a test scripts, recording every
//! request it reads; and a `ballast serve` running in-process on a
//! configuration of the test's.

// Each test binary uses a different part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ballast_config::Config;
use ballast_server::Server;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// One request as the upstream read it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    /// Header names lower-cased; repeated headers joined with ", ".
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

/// What the upstream does with one request.
pub enum Reply {
    /// Status, extra headers, body.
    With(u16, Vec<(&'static str, &'static str)>, &'static str),
    /// Reads the request, then closes the connection without an answer.
    Drop,
    /// Waits, then does the rest.
    Late(Duration, Box<Reply>),
}

pub type Script = dyn Fn(&Seen, usize) -> Reply + Send + Sync;

/// The upstream: `script` gets each request and how many came before, plus one.
pub struct Upstream {
    pub addr: std::net::SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    script: Arc<Mutex<Arc<Script>>>,
}

impl Upstream {
    pub async fn start(script: impl Fn(&Seen, usize) -> Reply + Send + Sync + 'static) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Mutex<Arc<Script>>> = Arc::new(Mutex::new(Arc::new(script)));
        let (log, scripted) = (Arc::clone(&seen), Arc::clone(&script));
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let script = Arc::clone(&scripted.lock().unwrap());
                tokio::spawn(answer(socket, Arc::clone(&log), script));
            }
        });
        Upstream { addr, seen, script }
    }

    /// Answers from now on with `script`.
    pub fn rescript(&self, script: impl Fn(&Seen, usize) -> Reply + Send + Sync + 'static) {
        *self.script.lock().unwrap() = Arc::new(script);
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn answer(mut socket: TcpStream, log: Arc<Mutex<Vec<Seen>>>, script: Arc<Script>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.lines();
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let target = request_line.next().unwrap_or_default().to_owned();
    let mut headers: HashMap<String, String> = HashMap::new();
    for (name, value) in lines.filter_map(|l| l.split_once(':')) {
        let entry = headers.entry(name.trim().to_ascii_lowercase()).or_default();
        if !entry.is_empty() {
            entry.push_str(", ");
        }
        entry.push_str(value.trim());
    }
    let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    while buf.len() < head_end + length {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let seen = Seen { method, target, headers, body: buf[head_end..head_end + length].to_vec() };
    let n = {
        let mut log = log.lock().unwrap();
        log.push(seen.clone());
        log.len()
    };
    let mut reply = script(&seen, n);
    while let Reply::Late(wait, then) = reply {
        tokio::time::sleep(wait).await;
        reply = *then;
    }
    match reply {
        Reply::Drop | Reply::Late(..) => {}
        Reply::With(status, extra, body) => {
            let mut out =
                format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
            for (k, v) in extra {
                out.push_str(&format!("{k}: {v}\r\n"));
            }
            out.push_str("\r\n");
            out.push_str(body);
            let _ = socket.write_all(out.as_bytes()).await;
            let _ = socket.shutdown().await;
        }
    }
}

/// The recorder every server of this test binary records into, as
/// `ballast serve` installs it.
pub fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| ballast_server::admin::install_recorder().expect("recorder")).clone()
}

/// `ballast serve` running in-process; stopped when dropped.
pub struct Served {
    pub admin: String,
    pub gateway: String,
    pub systems: ballast_http::Systems,
    pub queue: ballast_queue::Queue,
    stop: CancellationToken,
    pub dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Starts `ballast serve` on a configuration made of a SQLite `[queue]` in a
/// temp dir, listeners on free loopback ports, and `rest`, in which
/// `{upstream}` stands for `upstream`'s address.
pub async fn serve(upstream: &Upstream, rest: &str) -> Served {
    serve_with(upstream, "", rest).await
}

/// [`serve`] with `serve_lines` added to `[serve]`.
pub async fn serve_with(upstream: &Upstream, serve_lines: &str, rest: &str) -> Served {
    let text = format!(
        "[queue]\nurl = \"sqlite://{{dir}}/queue.db\"\npoll_interval = \"100ms\"\n\n[serve]\nlisten = \"127.0.0.1:0\"\n{serve_lines}\n{rest}"
    );
    serve_text(&upstream.addr.to_string(), &text).await
}

/// `ballast serve` on the whole configuration `text`, in which `{dir}`
/// stands for a temp dir and `{upstream}` for `upstream`.
pub async fn serve_text(upstream: &str, text: &str) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let text = text.replace("{dir}", &dir.path().display().to_string()).replace("{upstream}", upstream);
    let path = dir.path().join("ballast.toml");
    std::fs::write(&path, &text).unwrap();
    let config = Config::load(&path).unwrap();
    let server = Server::bind(&config, prometheus(), None).await.unwrap();
    let admin = format!("http://{}", server.admin_addr());
    let gateway = server.gateway_addr().map(|a| format!("http://{a}")).unwrap_or_default();
    let systems = server.systems().clone();
    let queue = server.queue().clone();
    let stop = CancellationToken::new();
    tokio::spawn(server.run(stop.clone()));
    Served { admin, gateway, systems, queue, stop, dir }
}

/// A client that follows no redirect and waits long enough for any test.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Polls `check` until it holds, for up to 20 s.
pub async fn eventually<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
