//! What a rate limit the fleet holds costs beside one each replica holds
//! alone: calls at a steady pace through replicas in this process, each a
//! member of a fleet on a real PostgreSQL (its own replica id, its own
//! keeper), the limit set above the pace so that the bucket grants every
//! permit. Reported: CPU of this process per permit, database round trips
//! (leases) per 1,000 permits, and the CPU PostgreSQL's backends spent.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast::{Policy, RateLimit};
use ballast_fleet::{Fleet, Identity, Member, Members};
use tokio_util::sync::CancellationToken;

use crate::gateway_bench::cpu::{used, Who};

/// One run.
#[derive(Debug, Clone)]
pub struct FleetRun {
    /// The PostgreSQL URL (a schema of its own is made in it).
    pub url: String,
    /// Calls a second to each replica.
    pub per_replica: u32,
    /// How long each configuration runs.
    pub seconds: u64,
}

/// What one configuration cost.
#[derive(Debug, Clone)]
pub struct Row {
    /// `1 × local`, `fleet of 1`, `3 × local`, `fleet of 3`.
    pub name: String,
    /// Calls a second, all replicas together.
    pub calls_per_second: f64,
    /// Permits taken.
    pub permits: u64,
    /// This process's CPU per permit.
    pub cpu_per_permit: Duration,
    /// Leases (database round trips) per 1,000 permits.
    pub round_trips_per_1000: f64,
    /// CPU PostgreSQL's backends spent a second.
    pub pg_cpu_share: f64,
}

struct One(Policy);

impl Members for One {
    fn members(&self) -> Vec<Member> {
        vec![Member::new("crm", self.0.clone())]
    }
}

/// Runs 1 and 3 replicas, each with its own local limit, then holding one
/// limit as a fleet.
pub async fn run(opts: &FleetRun) -> anyhow::Result<Vec<Row>> {
    install_recorder()?;
    let schema = format!("fleet_bench_{}", uuid::Uuid::now_v7().simple());
    let admin = sqlx::PgPool::connect(&opts.url).await?;
    sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&admin).await?;
    let separator = if opts.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{separator}options=-c%20search_path%3D{schema}", opts.url);
    let mut rows = Vec::new();
    for replicas in [1, 3] {
        rows.push(configuration(opts, &url, &format!("{replicas} × local"), replicas, false).await?);
        rows.push(configuration(opts, &url, &format!("fleet of {replicas}"), replicas, true).await?);
    }
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&admin).await?;
    Ok(rows)
}

async fn configuration(
    opts: &FleetRun,
    url: &str,
    name: &str,
    replicas: u32,
    fleet: bool,
) -> anyhow::Result<Row> {
    let rate = opts.per_replica * replicas * 2;
    let stop = CancellationToken::new();
    let mut policies = Vec::new();
    let mut members = Vec::new();
    let mut leases = 0.0;
    for n in 0..replicas {
        let limit = RateLimit::per_second(rate).burst(rate / 10);
        let limit = if fleet { limit.fleet() } else { limit };
        let policy = Policy::builder("crm").rate_limit(limit).build()?;
        if fleet {
            let me = Identity {
                host: "bench".into(),
                pid: std::process::id(),
                version: "bench".into(),
                config_digest: format!("{rate}"),
                admin: format!("replica {n}"),
                queue_schema: None,
            };
            let member = Fleet::join(url, me).await?;
            members.push(member.run(Arc::new(One(policy.clone())), stop.clone()));
        }
        policies.push(policy);
    }
    // A second of warm-up, then the measured run.
    drive(&policies, opts.per_replica, Duration::from_secs(1)).await;
    let leases_before = lease_count();
    let (cpu, pg) = (used(&Who::Process(std::process::id())), used(&Who::Named("postgres")));
    let started = Instant::now();
    let permits = drive(&policies, opts.per_replica, Duration::from_secs(opts.seconds)).await;
    let elapsed = started.elapsed();
    let cpu = used(&Who::Process(std::process::id())).zip(cpu).map(|(after, before)| after - before);
    let pg = used(&Who::Named("postgres")).zip(pg).map(|(after, before)| after - before);
    if fleet {
        leases = lease_count() - leases_before;
    }
    stop.cancel();
    for member in members {
        member.await?;
    }
    Ok(Row {
        name: name.to_owned(),
        calls_per_second: permits as f64 / elapsed.as_secs_f64(),
        permits,
        cpu_per_permit: cpu.unwrap_or_default() / u32::try_from(permits.max(1)).unwrap_or(u32::MAX),
        round_trips_per_1000: leases * 1000.0 / permits.max(1) as f64,
        pg_cpu_share: pg.unwrap_or_default().as_secs_f64() / elapsed.as_secs_f64(),
    })
}

/// Calls every policy `per_second` times a second for `time`, in rounds of
/// a millisecond; the permits taken.
async fn drive(policies: &[Policy], per_second: u32, time: Duration) -> u64 {
    let mut runs = tokio::task::JoinSet::new();
    for policy in policies {
        let policy = policy.clone();
        runs.spawn(async move {
            let mut taken = 0u64;
            let per_round = (per_second / 1000).max(1);
            let mut every = tokio::time::interval(Duration::from_millis(1));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let until = Instant::now() + time;
            while Instant::now() < until {
                every.tick().await;
                for _ in 0..per_round {
                    if policy.read(|_| async { Ok::<_, std::convert::Infallible>(()) }).await.is_ok() {
                        taken += 1;
                    }
                }
            }
            taken
        });
    }
    runs.join_all().await.into_iter().sum()
}

/// Leases so far, as `ballast_fleet_leases_total` counts them (every
/// replica's), read from the Prometheus recorder `run` installs.
fn lease_count() -> f64 {
    let Some(handle) = RECORDER.get() else { return 0.0 };
    handle
        .render()
        .lines()
        .filter(|line| line.starts_with("ballast_fleet_leases_total"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

static RECORDER: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
    std::sync::OnceLock::new();

/// Installs the recorder the lease count is read from (once a process).
pub fn install_recorder() -> anyhow::Result<()> {
    if RECORDER.get().is_none() {
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
        let _ = RECORDER.set(handle);
    }
    Ok(())
}
