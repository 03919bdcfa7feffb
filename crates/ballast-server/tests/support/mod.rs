//! `ballast serve` running in-process on a configuration of the test's, in
//! front of a ballast-test-support upstream.

// Each test binary uses a different part of it.
#![allow(dead_code)]

use std::sync::OnceLock;
use std::time::Duration;

use ballast_config::Config;
use ballast_server::Server;
use ballast_test_support::Upstream;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;

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

impl Served {
    /// A GET of `system_path` (`pay/orders/1`) through the gateway.
    pub async fn read(&self, system_path: &str) -> reqwest::Response {
        client().get(format!("{}/call/{system_path}", self.gateway)).send().await.expect("an answer")
    }

    /// A keyed write to `system_path` (`pay/payments`) through the gateway
    /// whose caller asks for deferral (`Prefer: respond-async`).
    pub async fn defer(&self, system_path: &str, key: &str, body: &'static str) -> reqwest::Response {
        let request = client().post(format!("{}/call/{system_path}", self.gateway)).body(body);
        ballast_test_support::send(request, &[("Idempotency-Key", key), ("Prefer", "respond-async")]).await
    }
}

/// A client that follows no redirect and waits long enough for any test.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}
