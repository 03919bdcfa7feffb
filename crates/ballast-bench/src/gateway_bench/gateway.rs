//! ballast's gateway, in-process: `ballast_server::Server` on a runtime of
//! its own, as `ballast serve` builds it — the gateway on an event loop per
//! core (`[gateway] workers`, unless told otherwise), the admin listener and
//! the worker on the main runtime — and one system pointing at the upstream.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context;
use ballast_config::Config;
use ballast_server::Server;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio_util::sync::CancellationToken;

/// The main runtime's threads of the plain gateway and of the provider's.
const THREAD_NAME: &str = "ballast";
const PROVIDER_THREAD_NAME: &str = "provider";

/// The system's name, as it appears in `/call/{system}/…`.
pub const SYSTEM: &str = "up";

/// The guide's stack (retry 3 with the default budget → count breaker 0.5
/// over 50 → bulkhead → aggressive timeout), the bulkhead 512 wide so that
/// no run's connections fill it: a rejected call would be an error, not a
/// faster hop.
const SYSTEM_CONFIG: &str = include_str!("system.toml");

/// A running gateway; stopped when dropped.
pub struct BenchGateway {
    runtime: Option<tokio::runtime::Runtime>,
    stop: CancellationToken,
    addr: SocketAddr,
    thread_name: &'static str,
    _dir: tempfile::TempDir,
}

/// The variables the provider's client id and secret are read from.
const CLIENT_ID_ENV: &str = "BALLAST_BENCH_CLIENT_ID";
const CLIENT_SECRET_ENV: &str = "BALLAST_BENCH_CLIENT_SECRET";

impl BenchGateway {
    /// Starts `ballast serve` with a SQLite queue in a temp dir, its admin
    /// listener and gateway on free loopback ports, and the one system, on
    /// `workers` event loops (`None`: one per core).
    pub fn start(upstream: SocketAddr, workers: Option<usize>) -> anyhow::Result<BenchGateway> {
        let system = SYSTEM_CONFIG.replace("{upstream}", &upstream.to_string());
        Self::launch(&system, workers, THREAD_NAME)
    }

    /// As [`start`](Self::start), the system a provider as banks are:
    /// reached over TLS, trusting the CA in `ca_file` only, with an OAuth
    /// 2.0 token from the upstream's `/token`.
    pub fn provider(
        upstream: SocketAddr,
        workers: Option<usize>,
        ca_file: &Path,
    ) -> anyhow::Result<BenchGateway> {
        let system = SYSTEM_CONFIG.replace("http://{upstream}", &format!("https://{upstream}")).replace(
            "{upstream}",
            &upstream.to_string(),
        ) + &format!(
            "\n[systems.up.tls]\nroots = \"none\"\nca_file = \"{ca}\"\n\n[systems.up.auth]\nkind = \"oauth2\"\ntoken_url = \"https://{upstream}/token\"\nclient_id_env = \"{CLIENT_ID_ENV}\"\nclient_secret_env = \"{CLIENT_SECRET_ENV}\"\n",
            ca = ca_file.display()
        );
        std::env::set_var(CLIENT_ID_ENV, "bench");
        std::env::set_var(CLIENT_SECRET_ENV, "bench-secret");
        Self::launch(&system, workers, PROVIDER_THREAD_NAME)
    }

    fn launch(
        system: &str,
        workers: Option<usize>,
        thread_name: &'static str,
    ) -> anyhow::Result<BenchGateway> {
        let dir = tempfile::tempdir().context("a temp dir for the gateway's queue")?;
        let workers = workers.map(|n| format!("workers = {n}\n")).unwrap_or_default();
        let text = format!(
            "[queue]\nurl = \"sqlite://{}\"\n\n[serve]\nlisten = \"127.0.0.1:0\"\n\n[gateway]\nlisten = \"127.0.0.1:0\"\n{workers}{system}",
            dir.path().join("queue.db").display(),
        );
        let config = Config::parse("gateway-bench.toml", text)?;
        let runtime =
            tokio::runtime::Builder::new_multi_thread().enable_all().thread_name(thread_name).build()?;
        let server = runtime.block_on(Server::bind(&config, prometheus(), None))?;
        let addr = server.gateway_addr().context("the configuration has a [gateway]")?;
        let stop = CancellationToken::new();
        runtime.spawn(server.run(stop.clone()));
        Ok(BenchGateway { runtime: Some(runtime), stop, addr, thread_name, _dir: dir })
    }

    /// Where the gateway listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The names its threads start with — its event loops' (`gw:PORT/N`)
    /// and its main runtime's — by which its CPU time is found.
    pub fn threads(&self) -> Vec<String> {
        vec![format!("gw:{}/", self.addr.port()), self.thread_name.to_owned()]
    }
}

impl Drop for BenchGateway {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

/// The process's Prometheus recorder, installed on first use as `ballast
/// serve` installs it (metric handles taken before that record nowhere).
pub fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .install_recorder()
                // Another recorder is installed: ballast records into that one.
                .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder().handle())
        })
        .clone()
}
