//! The admin routes read a background snapshot of the queue: readiness
//! reports a queue database that stopped answering, and `/metrics` keeps
//! answering meanwhile.

use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use ballast_http::Systems;
use ballast_queue::{Queue, QueueMonitor};
use ballast_server::Admin;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

const PG_ENV: &str = "BALLAST_TEST_PG";

fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| PrometheusBuilder::new().install_recorder().expect("recorder")).clone()
}

/// A TCP proxy to PostgreSQL that the test can cut, like a network partition.
struct Proxy {
    addr: std::net::SocketAddr,
    cut: CancellationToken,
}

impl Proxy {
    async fn start(target: (String, u16)) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = CancellationToken::new();
        let stop = cut.clone();
        tokio::spawn(async move {
            let mut pipes = JoinSet::new();
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    accepted = listener.accept() => {
                        let Ok((mut client, _)) = accepted else { continue };
                        let target = target.clone();
                        pipes.spawn(async move {
                            if let Ok(mut server) = TcpStream::connect(target).await {
                                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                            }
                        });
                    }
                }
            }
            // Dropping the listener refuses new connections; aborting the
            // pipes breaks the open ones.
            pipes.abort_all();
        });
        Self { addr, cut }
    }
}

async fn get(router: &axum::Router, path: &str) -> (StatusCode, String) {
    let response = router.clone().oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn eventually(
    what: &str,
    router: &axum::Router,
    path: &str,
    check: impl Fn(StatusCode, &str) -> bool,
) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = get(router, path).await;
        if check(status, &body) {
            return body;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}: {status} {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_reports_an_unreachable_queue_database_and_metrics_keep_answering() {
    let Ok(url) = std::env::var(PG_ENV) else {
        eprintln!("skipped: {PG_ENV} not set");
        return;
    };
    // Installed before anything registers a metric handle.
    let prometheus = prometheus();
    let direct = PgConnectOptions::from_str(&url).expect("valid BALLAST_TEST_PG url");
    let admin_pool = PgPool::connect_with(direct.clone())
        .await
        .unwrap_or_else(|e| panic!("{PG_ENV}={url} is set but PostgreSQL is unreachable: {e}"));
    let schema = format!("t_{}", uuid::Uuid::now_v7().simple());
    sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&admin_pool).await.unwrap();

    let proxy = Proxy::start((direct.get_host().to_owned(), direct.get_port())).await;
    let through_proxy =
        direct.clone().host("127.0.0.1").port(proxy.addr.port()).options([("search_path", &schema)]);
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(through_proxy)
        .await
        .unwrap();
    let queue = Queue::from_postgres(pool);
    queue.migrate().await.unwrap();

    let stop = CancellationToken::new();
    let monitor = QueueMonitor::builder(queue)
        .every(Duration::from_millis(100))
        .timeout(Duration::from_secs(1))
        .spawn(stop.clone());
    let router = Admin::new(prometheus, Systems::default(), monitor).router();

    eventually("ready", &router, "/health/ready", |s, _| s == StatusCode::OK).await;
    eventually("reachable", &router, "/metrics", |_, m| m.contains("ballast_queue_reachable 1")).await;

    proxy.cut.cancel();
    let report =
        eventually("not ready", &router, "/health/ready", |s, _| s == StatusCode::SERVICE_UNAVAILABLE).await;
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["ready"], false);
    assert_eq!(report["queue"]["reachable"], false, "{report}");
    assert!(report["queue"]["error"].as_str().is_some_and(|e| !e.is_empty()), "{report}");
    // Scrapes read the snapshot: they answer while the database does not.
    let (status, metrics) = get(&router, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(metrics.contains("ballast_queue_reachable 0"), "{metrics}");
    assert_eq!(get(&router, "/health/live").await.0, StatusCode::OK);

    stop.cancel();
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&admin_pool).await.unwrap();
}
