//! # ballast-fleet — a fleet of ballast gateways on one PostgreSQL
//!
//! Several replicas of `ballast serve` on one PostgreSQL queue share the
//! work already; with this crate they share what describes a system too,
//! without another moving part:
//!
//! - **replicas know each other** ([`replicas`]): each registers, heartbeats
//!   and is seen gone after a few missed beats; configuration drift and a
//!   clock off the database's are flagged;
//! - **a rate limit the whole fleet holds** ([`limits`]): permits leased in
//!   batches from one bucket per system in the database, what a replica
//!   learns from a 429 or a `RateLimit` header reaching every replica with
//!   its next lease; without the database each replica holds its share;
//! - **a circuit breaker the whole fleet holds** ([`breakers`],
//!   [`quorum`]): the system opens on every replica when a quorum sees it
//!   failing — one replica whose own network path broke opens only its own
//!   breaker — and one replica at a time probes;
//! - **the fleet's series** ([`samples`]): calls, 429s and breakers of every
//!   replica over the last 15 minutes, for every replica's dashboard.
//!
//! SQLite stays single-node: a fleet needs the database its replicas share.
//!
//! ```no_run
//! # async fn run(members: std::sync::Arc<dyn ballast_fleet::Members>) -> Result<(), ballast_fleet::FleetError> {
//! use ballast_fleet::{Fleet, Identity};
//! use tokio_util::sync::CancellationToken;
//!
//! let me = Identity {
//!     host: "gw-1".into(),
//!     pid: std::process::id(),
//!     version: "0.1.0".into(),
//!     config_digest: "4be1…".into(),
//!     admin: "10.0.0.5:9464".into(),
//!     queue_schema: Some(7),
//! };
//! let fleet = Fleet::join("postgres://ballast@db/ballast", me).await?;
//! let stop = CancellationToken::new();
//! let running = fleet.run(members, stop.clone());
//! for replica in fleet.view().replicas().await? {
//!     println!("{} {} {}", replica.state.as_str(), replica.identity.host, replica.identity.version);
//! }
//! # stop.cancel(); let _ = running.await; Ok(()) }
//! ```

pub mod breakers;
mod error;
pub mod limits;
pub mod quorum;
pub mod replicas;
pub mod samples;
mod schema;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ballast::{BreakerState, Policy};
use sqlx::postgres::{PgPool, PgPoolOptions};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use error::FleetError;
pub use replicas::{Identity, Replica, ReplicaState};
pub use samples::{Point, Series};

/// One external system as the fleet sees it on this replica, now: a
/// [`RateLimit::fleet`](ballast::RateLimit::fleet) limit of its policy is
/// fed from the fleet's bucket, a [`Breaker::fleet`](ballast::Breaker::fleet)
/// breaker held by the fleet.
#[derive(Clone)]
pub struct Member {
    /// The system's name: the same on every replica.
    pub name: String,
    /// Its policy.
    pub policy: Policy,
    /// Calls made since it was built.
    pub calls: u64,
    /// Attempts sent to the system since it was built.
    pub sent: u64,
    /// Calls the policy refused unsent since it was built (an open
    /// breaker, a full bulkhead, no rate-limit permit).
    pub refused: u64,
    /// 429 answers it got since it was built.
    pub throttled: u64,
    /// Its breaker's state, if it has one.
    pub breaker: Option<BreakerState>,
}

impl Member {
    /// System `name` with `policy`, nothing counted yet: its counts and
    /// its breaker's state are filled in by whoever reports on it.
    pub fn new(name: impl Into<String>, policy: Policy) -> Self {
        Self { name: name.into(), policy, calls: 0, sent: 0, refused: 0, throttled: 0, breaker: None }
    }
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member").field("name", &self.name).finish_non_exhaustive()
    }
}

/// The systems of this replica as they are now (a reload replaces them).
pub trait Members: Send + Sync + 'static {
    /// Every system, now.
    fn members(&self) -> Vec<Member>;
}

/// How long the fleet's database may take to answer a connection: past it
/// `ballast fleet` and a replica's start give up and say so, rather than
/// wait out sqlx's 30 s.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Reading the fleet without being part of it: what `ballast fleet` and the
/// dashboard show.
#[derive(Debug, Clone)]
pub struct FleetView {
    pool: PgPool,
}

impl FleetView {
    /// Connects to the fleet's database (the queue's `postgres://…` URL).
    pub async fn connect(url: &str) -> Result<FleetView, FleetError> {
        let view = Self::reading(url).await?;
        schema::migrate(&view.pool).await?;
        Ok(view)
    }

    /// Connects to the fleet's database without creating the fleet's
    /// tables: what `ballast lint` reads with, on a database a fleet may
    /// never have run on.
    pub async fn reading(url: &str) -> Result<FleetView, FleetError> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            let scheme = url.split("://").next().unwrap_or(url);
            return Err(FleetError::NotPostgres(scheme.to_owned()));
        }
        let pool = PgPoolOptions::new()
            .max_connections(3)
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect(url)
            .await
            .map_err(|e| match e {
                sqlx::Error::PoolTimedOut => FleetError::Unreachable(CONNECT_TIMEOUT),
                e => FleetError::Database(e),
            })?;
        Ok(FleetView { pool })
    }

    /// The most replicas that ran at once in the last `since`, from their
    /// start, heartbeat and stop times; 0 when none did (or no fleet ever
    /// ran on this database). Reads only.
    pub async fn most_at_once(&self, since: Duration) -> Result<u32, FleetError> {
        replicas::most_at_once(&self.pool, since).await
    }

    /// The replicas seen in the last hour, newest first.
    pub async fn replicas(&self) -> Result<Vec<Replica>, FleetError> {
        replicas::list(&self.pool, Duration::from_secs(3600)).await
    }

    /// The fleet's calls, 429s and breakers per system over the last 15 minutes.
    pub async fn series(&self) -> Result<Vec<Series>, FleetError> {
        samples::series(&self.pool).await
    }
}

/// This replica in the fleet: registered, until [`run`](Self::run)'s
/// `stop` marks it stopped.
#[derive(Debug, Clone)]
pub struct Fleet {
    view: FleetView,
    id: Uuid,
    /// Live replicas at the last heartbeat, this one included.
    live: Arc<AtomicU64>,
}

impl Fleet {
    /// Joins the fleet of the database at `url`: creates the fleet's tables
    /// if need be and registers this replica as `me`.
    pub async fn join(url: &str, me: Identity) -> Result<Fleet, FleetError> {
        let view = FleetView::connect(url).await?;
        let id = replicas::register(&view.pool, &me).await?;
        let live = replicas::heartbeat(&view.pool, id).await?;
        Ok(Fleet { view, id, live: Arc::new(AtomicU64::new(live)) })
    }

    /// This replica's id.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// Live replicas at the last heartbeat, this one included.
    pub fn live(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }

    /// Reads the fleet.
    pub fn view(&self) -> &FleetView {
        &self.view
    }

    /// Heartbeats, feeds the fleet-wide rate limits and holds the
    /// fleet-wide breakers of `members`, and writes their samples, until
    /// `stop`; then marks this replica stopped.
    pub fn run(&self, members: Arc<dyn Members>, stop: CancellationToken) -> JoinHandle<()> {
        let fleet = self.clone();
        tokio::spawn(async move { fleet.supervise(members, stop).await })
    }

    async fn supervise(self, members: Arc<dyn Members>, stop: CancellationToken) {
        let pool = self.view.pool.clone();
        let buckets = Arc::new(limits::PgBuckets { pool: pool.clone(), replica: self.id });
        let live = metrics::gauge!("ballast_fleet_replicas");
        let mut keepers: HashMap<(String, &'static str), (usize, CancellationToken)> = HashMap::new();
        let mut beat = tokio::time::interval(replicas::HEARTBEAT_EVERY);
        let mut sample = tokio::time::interval(samples::SAMPLE_EVERY);
        let mut unreachable = false;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = beat.tick() => {
                    match replicas::heartbeat(&pool, self.id).await {
                        Ok(n) => {
                            self.live.store(n, Ordering::Relaxed);
                            live.set(n as f64);
                            if std::mem::take(&mut unreachable) {
                                tracing::info!("the fleet's database answers again");
                            }
                        }
                        Err(e) if !unreachable => {
                            unreachable = true;
                            tracing::warn!(error = %e, live_replicas = self.live(), "the fleet's database cannot be reached: each replica holds its share of fleet-wide limits meanwhile");
                        }
                        Err(_) => {}
                    }
                    self.keep(&members.members(), &buckets, &mut keepers, &stop);
                }
                _ = sample.tick() => {
                    if let Err(e) = samples::write(&pool, self.id, &members.members()).await {
                        tracing::debug!(error = %e, "fleet samples not written; next time");
                    }
                }
            }
        }
        for (_, (_, keeper)) in keepers {
            keeper.cancel();
        }
        if let Err(e) = replicas::leave(&pool, self.id).await {
            tracing::debug!(error = %e, "could not mark this replica stopped; it is seen gone after its heartbeats stop");
        }
    }

    /// Starts a keeper for every fleet-wide limit and breaker of `members`
    /// that has none, replaces those whose policy a reload replaced, and
    /// stops those whose system is gone.
    fn keep(
        &self,
        members: &[Member],
        buckets: &Arc<limits::PgBuckets>,
        keepers: &mut HashMap<(String, &'static str), (usize, CancellationToken)>,
        stop: &CancellationToken,
    ) {
        let mut wanted = Vec::new();
        for member in members {
            if let Some(limiter) = member.policy.rate_limiter().filter(|l| l.shared().is_some()) {
                wanted.push(((member.name.clone(), "limit"), limiter as *const _ as usize, member));
            }
            if let Some(breaker) = member.policy.breaker().filter(|b| b.config().fleet_quorum().is_some()) {
                wanted.push(((member.name.clone(), "breaker"), breaker as *const _ as usize, member));
            }
        }
        keepers.retain(|key, (identity, keeper)| {
            let kept = wanted.iter().any(|(k, id, _)| k == key && id == identity);
            if !kept {
                keeper.cancel();
            }
            kept
        });
        for (key, identity, member) in wanted {
            if keepers.contains_key(&key) {
                continue;
            }
            let token = stop.child_token();
            let (system, policy) = (member.name.clone(), member.policy.clone());
            match key.1 {
                "limit" => {
                    tokio::spawn(limits::keep(
                        Arc::clone(buckets),
                        system,
                        policy,
                        Arc::clone(&self.live),
                        token.clone(),
                    ));
                }
                _ => {
                    let quorum = member.policy.breaker().and_then(|b| b.config().fleet_quorum()).unwrap_or(2);
                    tokio::spawn(breakers::keep(
                        self.view.pool.clone(),
                        self.id,
                        system,
                        policy,
                        quorum,
                        token.clone(),
                    ));
                }
            }
            keepers.insert(key, (identity, token));
        }
    }
}
