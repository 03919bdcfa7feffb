//! # ballast-server — what `ballast serve` runs
//!
//! One loaded [`Config`] becomes a running service: the durable worker that
//! delivers deferred writes to the configured systems, and an admin listener
//! with Prometheus metrics (`/metrics`), liveness (`/health/live`) and
//! readiness (`/health/ready`). The `ballast` binary only parses its
//! arguments and calls this crate, so tests and embedding services can run
//! the same thing without a process.
//!
//! The admin listener is hardened against floods ([`listener`]): a header
//! read timeout and a cap on connections, so slow or half-sent requests
//! cannot use up the descriptors the worker needs. Queue counts come from a
//! background snapshot ([`ballast_queue::QueueMonitor`]) on a connection of
//! its own: a scrape never touches the database, and readiness reports an
//! unreachable queue database.
//!
//! Traces go out over OTLP when configured ([`telemetry`]): the gateway's
//! server span continues a caller's `traceparent`, every attempt and every
//! delivery of a deferred write are in the same trace.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use ballast_config::Config;
//! use tokio_util::sync::CancellationToken;
//!
//! let config = Config::load("ballast.toml")?;
//! let prometheus = ballast_server::admin::install_recorder()?;
//! let server = ballast_server::Server::bind(&config, prometheus, None).await?;
//! println!("admin on http://{}", server.admin_addr());
//! let summary = server.run(CancellationToken::new()).await?;
//! println!("{} delivered", summary.completed);
//! # Ok(()) }
//! ```

pub mod admin;
pub mod alerts;
pub mod auth;
pub mod build;
mod certificates;
pub mod drain;
pub mod event_loops;
mod fleet;
pub mod gateway;
pub mod listener;
#[cfg(target_os = "linux")]
mod listening;
pub mod origin;
pub mod reload;
pub mod telemetry;
pub mod tls;
pub mod ui;

use std::net::SocketAddr;
use std::time::Duration;

use ballast_config::{Config, ConfigError};
use ballast_http::delivery::{CallbackHandler, CALLBACK_KIND};
use ballast_http::{DeliveryHandler, Systems, DELIVERY_KIND};
use ballast_queue::{QueueMonitor, RunSummary, Worker};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use admin::Admin;
use alerts::{Webhooks, ALERT_KIND};
use auth::Token;
pub use gateway::Gateway;
pub use listener::Limits;
pub use ui::Ui;

/// How long the gateway waits for the queue's database on a caller's
/// behalf (a deferral, a key's look-up, a task's state) before it answers
/// `503 queue_unavailable`: with the database away a caller is answered
/// within 2 s.
pub const QUEUE_ANSWER: std::time::Duration = std::time::Duration::from_millis(1500);
/// How often the Prometheus recorder drains its histograms when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Why `ballast serve` could not start or stopped early.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The configuration refused its settings.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A listener's certificate cannot be served.
    #[error("[{section}] tls_cert_file: {source}")]
    Tls {
        /// `serve` or `gateway`.
        section: &'static str,
        /// Why.
        source: tls::ListenerTlsError,
    },
    /// A running part of the configuration could not be built.
    #[error(transparent)]
    Build(#[from] build::BuildError),
    /// The queue database could not be opened or prepared.
    #[error("cannot {what} the queue at {url}: {source}")]
    Queue {
        /// What was being done: "open" or "prepare".
        what: &'static str,
        /// The queue's URL, its secrets masked.
        url: String,
        /// Why.
        source: ballast_queue::Error,
    },
    /// The queue's database did not answer within the connect timeout.
    #[error(
        "the queue at {url} did not answer within {after:?}: check that its database is up and reachable \
         ([queue] url); not started"
    )]
    QueueUnreachable {
        /// The queue's URL, its secrets masked.
        url: String,
        /// How long it was given.
        after: Duration,
    },
    /// The worker's settings were refused.
    #[error("cannot build the delivery worker: {0}")]
    Worker(#[source] ballast_queue::WorkerBuildError),
    /// The admin address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A listener beyond loopback without its token, or a token variable unset.
    #[error(transparent)]
    Token(#[from] auth::TokenError),
    /// An alert webhook's URL is missing or unusable.
    #[error(transparent)]
    Alerts(#[from] alerts::AlertsError),
    /// The HTTP client that sends callbacks could not be built.
    #[error("cannot build the client that sends callbacks: {0}")]
    CallbackClient(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The worker task panicked.
    #[error("the delivery worker panicked")]
    WorkerPanicked,
    /// A `[queue.periodic.NAME]` call's request cannot be made.
    #[error("[queue.periodic.{name}]: {reason}")]
    Periodic {
        /// Its name.
        name: String,
        /// Why.
        reason: String,
    },
    /// The gateway's event loops could not be started.
    #[error("cannot start the gateway's event loops: {0}")]
    EventLoop(#[source] std::io::Error),
    /// This replica could not join the fleet of its PostgreSQL queue.
    #[error("cannot join the fleet at {url}: {source}")]
    Fleet {
        /// The queue's URL, its secrets masked.
        url: String,
        /// Why.
        source: ballast_fleet::FleetError,
    },
}

/// A service built from a configuration, its listeners bound, not yet running.
#[derive(Debug)]
pub struct Server {
    worker: Worker,
    admin: Admin,
    ui: Ui,
    hosts: origin::Hosts,
    listener: TcpListener,
    limits: Limits,
    gateway: Option<(Gateway, event_loops::Sockets, Limits, Option<tls::ListenerTls>)>,
    /// The admin listener's TLS, if it speaks it.
    admin_tls: Option<tls::ListenerTls>,
    systems: Systems,
    config: Config,
    queue: ballast_queue::Queue,
    queue_url: String,
    prometheus: PrometheusHandle,
    /// This replica in the fleet of its PostgreSQL queue.
    fleet: Option<ballast_fleet::Fleet>,
    /// Stops the background tasks started by `bind` (the queue monitor).
    background: CancellationToken,
    /// Where alerts go, for the certificates' expiry.
    webhooks: Webhooks,
    /// The drain a SIGTERM or `/admin/drain` begins.
    drain: drain::Drain,
    /// Cancelled when the drain closes: the listeners stop accepting, the
    /// worker claiming, the gateway's waiters waiting.
    closing: CancellationToken,
}

impl Server {
    /// Builds every system of `config`, opens and migrates its queue, starts
    /// the queue monitor on a connection of its own and binds the admin
    /// listener (`listen`, else `[serve] listen`). `prometheus` must already be
    /// installed as the global recorder ([`admin::install_recorder`]): metric
    /// handles taken before that record nowhere.
    pub async fn bind(
        config: &Config,
        prometheus: PrometheusHandle,
        listen: Option<SocketAddr>,
    ) -> Result<Server, ServeError> {
        raise_descriptor_limit();
        ballast_http::metrics::describe();
        let settings = config.serve()?;
        let systems = Systems::new(build::http_systems(config)?);
        let queue_settings = config.queue()?;
        let queue_url = ballast::redact_url(&queue_settings.url);
        let queue_error = |what| {
            let url = queue_url.clone();
            move |source| ServeError::Queue { what, url, source }
        };
        let queue = tokio::time::timeout(ballast_fleet::CONNECT_TIMEOUT, build::queue(&queue_settings))
            .await
            .map_err(|_| ServeError::QueueUnreachable {
                url: queue_url.clone(),
                after: ballast_fleet::CONNECT_TIMEOUT,
            })?
            .map_err(queue_error("open"))?;
        queue.migrate().await.map_err(queue_error("prepare"))?;
        // Counting runs read-only on a pool of its own, so it never waits
        // for, or delays, a connection the worker needs.
        let counts = ballast_queue::Queue::connect_read_only(&queue_settings.url)
            .await
            .map_err(queue_error("open"))?;
        let background = CancellationToken::new();
        let monitor = QueueMonitor::builder(counts)
            .every(settings.stats_interval)
            .timeout(settings.stats_interval)
            .storage(queue.clone())
            .spawn(background.clone());
        // Readiness reflects the database from the first request on.
        monitor.first_refresh().await;
        build::retention(&queue_settings).spawn(queue.clone(), background.clone());
        warn_unopenable(&queue, &systems).await;
        let webhooks = Webhooks::from_settings(&config.alerts()?)?;
        let alerting = webhooks.clone();
        let gateway_settings = config.gateway()?;
        let callbacks = build::callbacks(gateway_settings.as_ref())?;
        build::check_callbacks(&systems.all(), &callbacks)?;
        // Told where this process listens once it is bound: no callback goes there.
        let own_listeners = callbacks.clone();
        // A caller waits on the gateway's queue statements: bounded, so a
        // database away is a 503 at once, not a hang.
        let deferrals = queue.clone().answering_within(QUEUE_ANSWER);
        let periodic = build::periodic(&queue_settings, &queue)?;
        let worker = build::worker(&queue_settings, queue.clone(), periodic.clone())
            .handler(
                DELIVERY_KIND,
                DeliveryHandler::shared(systems.clone()).max_age(queue_settings.schedule.max_age),
            )
            .handler(
                CALLBACK_KIND,
                CallbackHandler::new(queue, systems.clone(), callbacks.clone())
                    .map_err(|e| ServeError::CallbackClient(e.into()))?,
            )
            .handler(ALERT_KIND, webhooks.handler())
            .alert(webhooks)
            .build()
            .map_err(ServeError::Worker)?;
        let drain = drain::Drain::new(settings.drain_delay, settings.drain_timeout);
        // The listeners stop accepting, the worker claiming, the waiters waiting.
        let closing = CancellationToken::new();
        let gateway = match gateway_settings {
            None => None,
            Some(g) => {
                let l = &g.listener;
                let token = Token::for_listener("gateway", l.listen, l.token_env.as_deref())?;
                let tls = listener_tls("gateway", l.tls.as_ref())?;
                let workers =
                    g.workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
                let sockets = event_loops::Sockets::bind(l.listen, workers)
                    .map_err(|source| ServeError::Bind { addr: l.listen, source })?;
                // Services call the gateway, not probes: no reserve.
                let limits = Limits::of(l, 0);
                let parts = gateway::Parts {
                    systems: systems.clone(),
                    queue: deferrals.clone(),
                    token,
                    hosts: Some(origin::Hosts::gateway(sockets.local_addr(), &l.allowed_hosts)),
                    callbacks,
                    drain: drain.clone(),
                    stopping: closing.clone(),
                };
                Some((Gateway::new(&g, parts), sockets, limits, tls))
            }
        };
        let addr = listen.unwrap_or(settings.listener.listen);
        // Refused before anything listens: beyond loopback only with a token.
        let admin_token = Token::for_listener("serve", addr, settings.listener.token_env.as_deref())?;
        let admin_tls = listener_tls("serve", settings.listener.tls.as_ref())?;
        let listener = TcpListener::bind(addr).await.map_err(|source| ServeError::Bind { addr, source })?;
        let gateway_addr = gateway.as_ref().map(|(_, sockets, _, _)| sockets.local_addr());
        own_listeners.serving_on(listener.local_addr().ok().into_iter().chain(gateway_addr));
        let fleet = match deferrals.backend() {
            ballast_queue::Backend::Postgres => {
                let admin = listener.local_addr().map_or_else(|_| addr.to_string(), |a| a.to_string());
                let joined = fleet::join(&queue_settings.url, config.source().text(), admin).await;
                Some(joined.map_err(|source| ServeError::Fleet { url: queue_url.clone(), source })?)
            }
            ballast_queue::Backend::Sqlite => None,
        };
        let hosts = origin::Hosts::new(addr, &settings.listener.allowed_hosts);
        let limits = Limits::of(&settings.listener, listener::PROBE_RESERVE);
        let ui = Ui::new(
            systems.clone(),
            deferrals.clone(),
            monitor.clone(),
            admin_token.clone().zip(settings.listener.token_env.clone()),
            settings.session_ttl,
        )
        .fleet(fleet.as_ref().map(|f| (f.view().clone(), f.id())))
        .periodic(periodic)
        .secure_cookies(admin_tls.is_some());
        let admin = match (&admin_token, settings.protect_metrics) {
            (Some(token), true) => {
                Admin::new(prometheus.clone(), systems.clone(), monitor).protected(token.clone())
            }
            _ => Admin::new(prometheus.clone(), systems.clone(), monitor),
        }
        .drain(drain.clone(), admin_token.clone());
        Ok(Server {
            worker,
            admin,
            ui,
            hosts,
            listener,
            admin_tls,
            limits,
            gateway,
            systems,
            config: config.clone(),
            queue: deferrals,
            queue_url,
            prometheus,
            fleet,
            background,
            webhooks: alerting,
            drain,
            closing,
        })
    }

    /// The drain that stopping this server goes through ([`drain`]): its
    /// summary says what it did with the calls it met.
    pub fn drain(&self) -> &drain::Drain {
        &self.drain
    }

    /// This replica in the fleet of its PostgreSQL queue, if it is on one.
    pub fn fleet(&self) -> Option<&ballast_fleet::Fleet> {
        self.fleet.as_ref()
    }

    /// The admin listener's address (the port chosen, when bound to port 0).
    pub fn admin_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// The admin listener's URL: `https://` when it speaks TLS.
    pub fn admin_url(&self) -> String {
        let scheme = if self.admin_tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.admin_addr())
    }

    /// The gateway's URL, when `[gateway]` is configured: `https://` when
    /// it speaks TLS.
    pub fn gateway_url(&self) -> Option<String> {
        self.gateway.as_ref().map(|(_, sockets, _, tls)| {
            let scheme = if tls.is_some() { "https" } else { "http" };
            format!("{scheme}://{}", sockets.local_addr())
        })
    }

    /// The gateway's address, when `[gateway]` is configured.
    pub fn gateway_addr(&self) -> Option<SocketAddr> {
        self.gateway.as_ref().map(|(_, sockets, _, _)| sockets.local_addr())
    }

    /// The external systems, as they are now (a reload replaces them).
    pub fn systems(&self) -> &Systems {
        &self.systems
    }

    /// The queue deliveries are deferred to, with the schedule its tasks
    /// and the worker follow ([`ballast_queue::Queue::schedule`]).
    pub fn queue(&self) -> &ballast_queue::Queue {
        &self.queue
    }

    /// The queue's URL, its secrets masked.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Runs the worker, the admin listener and the gateway until `shutdown`
    /// is cancelled (or `POST /admin/drain` is asked); then drains in
    /// phases ([`drain`]): readiness fails at once while the listeners
    /// serve on for `[serve] drain_delay`; then the gateway stops
    /// accepting, the worker finishes or releases its in-flight deliveries
    /// and calls in flight get `[serve] drain_timeout` — any still running
    /// then is answered, never cut; last the admin listener stops. On
    /// SIGHUP the configuration file is read again ([`reload`]).
    pub async fn run(self, shutdown: CancellationToken) -> Result<RunSummary, ServeError> {
        let _stop_background = self.background.drop_guard();
        let drain = self.drain.clone();
        tokio::spawn(drain.clone().run());
        let closing = self.closing.clone();
        {
            let (drain, shutdown, closing) = (drain.clone(), shutdown.clone(), closing.clone());
            tokio::spawn(async move {
                tokio::select! {
                    () = shutdown.cancelled() => {
                        drain.begin();
                    }
                    () = drain.reached(drain::Phase::Draining) => {}
                }
                drain.reached(drain::Phase::Closing).await;
                closing.cancel();
            });
        }
        // Everything that lives as long as the process serves.
        let done = CancellationToken::new();
        let mut gateway = match self.gateway {
            None => None,
            Some((gateway, sockets, limits, tls)) => {
                let router = gateway.router();
                let loops = event_loops::Loops::start(sockets, &router, limits, tls, &closing, drain.grace())
                    .map_err(ServeError::EventLoop)?;
                Some(loops)
            }
        };
        tokio::spawn(upkeep(self.prometheus, done.clone()));
        let fleet = self.fleet.map(|fleet| fleet.run(fleet::members(&self.systems), done.clone()));
        tokio::spawn(certificates::watch(
            self.systems.clone(),
            self.queue.clone(),
            self.webhooks,
            done.clone(),
        ));
        tokio::spawn(reload::on_sighup(self.config, self.systems, self.queue, done.clone()));
        tokio::spawn(self.ui.clone().sample_rates(done.clone()));
        let worker = tokio::spawn(self.worker.run(closing.clone()));
        let router = self
            .admin
            .router()
            .merge(self.ui.router())
            .layer(axum::middleware::from_fn_with_state(self.hosts, origin::admit_host));
        // Readiness answers (503) through the whole drain: the admin
        // listener stops last.
        let admin_stop = CancellationToken::new();
        let admin = tokio::spawn(listener::serve(
            self.listener,
            router,
            self.limits,
            self.admin_tls,
            admin_stop.clone(),
            ADMIN_GRACE,
        ));
        closing.cancelled().await;
        if let Some(loops) = gateway.as_mut() {
            loops.served().await;
        }
        let summary = worker.await.map_err(|_| ServeError::WorkerPanicked);
        admin_stop.cancel();
        let _ = admin.await;
        done.cancel();
        // Marks this replica stopped: the others see it gone at once.
        if let Some(fleet) = fleet {
            let _ = fleet.await;
        }
        if let Some(loops) = gateway {
            tokio::task::spawn_blocking(move || loops.release()).await.ok();
        }
        summary
    }
}

/// A listener's TLS from its files, read and checked before it listens.
fn listener_tls(
    section: &'static str,
    files: Option<&(std::path::PathBuf, std::path::PathBuf)>,
) -> Result<Option<tls::ListenerTls>, ServeError> {
    files
        .map(|(cert, key)| tls::ListenerTls::load(cert, key))
        .transpose()
        .map_err(|source| ServeError::Tls { section, source })
}

/// How long the admin listener's last requests may take once the drain is done.
const ADMIN_GRACE: Duration = Duration::from_secs(2);

/// Says at start which waiting deliveries were sealed with a key none of
/// the configured ones is: they are held, not sent, until it comes back
/// (a rotation that dropped the old key too soon).
async fn warn_unopenable(queue: &ballast_queue::Queue, systems: &Systems) {
    let Ok(by_key) = queue.unfinished_by(DELIVERY_KIND, "seal_key").await else { return };
    let all = systems.all();
    for (id, waiting) in by_key.into_iter().filter(|(id, _)| !id.is_empty()) {
        if !all.iter().any(|s| s.seal_key().is_some_and(|key| key.opens_id(&id))) {
            tracing::warn!(
                key_id = %id,
                waiting,
                "deliveries sealed with a key no configured seal key is are waiting: they are held, not sent, \
                 until the key is back — put it after the current key in the variable [queue] seal_key_env \
                 names, comma-separated, and restart; held deliveries are looked at every 5 minutes (Run now \
                 on the dashboard for at once)"
            );
        }
    }
}

async fn upkeep(prometheus: PrometheusHandle, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(UPKEEP_EVERY);
    while shutdown.run_until_cancelled(every.tick()).await.is_some() {
        prometheus.run_upkeep();
    }
}

/// Raises the soft limit on open files to the hard limit, so the worker's
/// connections have room beside the listeners' capped ones.
fn raise_descriptor_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(e) => tracing::debug!(error = %e, "cannot raise the open-file limit"),
    }
}

/// The README's example, compiled and run as a doc test so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
