//! A circuit breaker the fleet holds (`[systems.NAME.breaker] scope =
//! "fleet"`, `quorum = 2`): every replica publishes its own breaker's
//! verdict (`ballast_fleet_verdicts`) every [`TICK`] and reads the fleet's
//! (`ballast_fleet_breakers`) in the same round trip; the rule is in
//! [`crate::quorum`]. The replica's own breaker is what calls meet: the
//! fleet holds it open ([`ballast::breaker::CircuitBreaker::restore`]) or
//! lets it go ([`ballast::breaker::CircuitBreaker::reset`]). Without the
//! database each replica keeps its own breaker, as without a fleet.

use std::time::{Duration, SystemTime};

use ballast::breaker::{BreakerSnapshot, CircuitBreaker};
use ballast::{BreakerState, Policy};
use sqlx::PgPool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::quorum::{step, Fleet, Local, Step, PROBE_LEASE};
use crate::replicas::GONE_AFTER;

/// How often a replica publishes its verdict and reads the fleet's.
pub const TICK: Duration = Duration::from_millis(250);

/// How long a replica holds the fleet's probe lease without a call to probe
/// with before it passes the lease on: a replica no traffic reaches would
/// otherwise keep the fleet open for the lease's length. It does not take
/// the lease again for [`PROBE_LEASE`].
pub const PROBE_IDLE: Duration = Duration::from_secs(1);

/// A breaker's state and since when, to tell a move from the last tick.
fn observe(breaker: &CircuitBreaker) -> (BreakerState, Instant) {
    (breaker.state(), Instant::now() - breaker.in_state_for())
}

/// Keeps `policy`'s breaker of `system` in step with the fleet until `stop`.
pub(crate) async fn keep(
    pool: PgPool,
    me: Uuid,
    system: String,
    policy: Policy,
    quorum: u32,
    stop: CancellationToken,
) {
    let Some(breaker) = policy.breaker() else { return };
    let mut seen = observe(breaker);
    let mut held = false;
    let mut reachable = true;
    let mut probing_since: Option<Instant> = None;
    let mut passed_at: Option<Instant> = None;
    let mut every = tokio::time::interval(TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while stop.run_until_cancelled(every.tick()).await.is_some() {
        let now = observe(breaker);
        // Two observations a moment apart: a state entered within a tick
        // moved even if it is the state seen before.
        let moved = now.0 != seen.0 || now.1.duration_since(seen.1) > Duration::from_millis(1);
        let own_open = matches!(now.0, BreakerState::Open | BreakerState::HalfOpen) && !held;
        let fleet = match read(&pool, me, &system, own_open).await {
            Ok(fleet) => {
                if !reachable {
                    tracing::info!(%system, "the fleet's breaker is reachable again");
                    reachable = true;
                }
                fleet
            }
            Err(e) => {
                if reachable {
                    tracing::warn!(%system, error = %e, "the fleet's breaker cannot be reached: this replica keeps its own breaker meanwhile");
                    reachable = false;
                }
                seen = now;
                continue;
            }
        };
        let local = Local { state: now.0, moved, held_by_fleet: held };
        let mut todo = step(fleet.0, local, quorum);
        if !fleet.0.mine {
            probing_since = None;
        }
        let idle = now.0 == BreakerState::Open && !moved;
        if todo == Step::Stay
            && fleet.0.mine
            && idle
            && probing_since.is_some_and(|at| at.elapsed() >= PROBE_IDLE)
        {
            todo = Step::PassProbe;
        }
        if todo == Step::TakeProbe && passed_at.is_some_and(|at| at.elapsed() < PROBE_LEASE) {
            todo = Step::HoldOpen;
        }
        let done = match todo {
            Step::Stay => Ok(()),
            Step::OpenFleet => open(&pool, &system, breaker.open_for()).await,
            Step::TakeProbe => match take_probe(&pool, me, &system).await {
                Ok(true) => {
                    probing_since = Some(Instant::now());
                    // This replica's next call is the fleet's probe.
                    breaker.restore(&BreakerSnapshot {
                        state: BreakerState::Open,
                        half_open_at: Some(SystemTime::now()),
                    });
                    held = false;
                    Ok(())
                }
                other => other.map(drop),
            },
            Step::PassProbe => {
                probing_since = None;
                passed_at = Some(Instant::now());
                breaker.restore(&BreakerSnapshot {
                    state: BreakerState::Open,
                    half_open_at: Some(SystemTime::now() + PROBE_LEASE),
                });
                held = true;
                pass_probe(&pool, me, &system).await
            }
            Step::CloseFleet => close(&pool, me, &system).await,
            Step::ReopenFleet => reopen(&pool, me, &system, breaker.open_for()).await,
            Step::HoldOpen => {
                // Until the fleet's probe time, or the holder's lease, and a tick more.
                let until = Duration::from_secs_f64(fleet.0.half_open_in.max(fleet.1).max(0.0)) + TICK * 4;
                if !(breaker.state() == BreakerState::Open
                    && breaker.next_probe_in().is_some_and(|left| left + TICK >= until))
                {
                    breaker.restore(&BreakerSnapshot {
                        state: BreakerState::Open,
                        half_open_at: Some(SystemTime::now() + until),
                    });
                }
                held = true;
                Ok(())
            }
            Step::Release => {
                breaker.reset();
                held = false;
                Ok(())
            }
        };
        if let Err(e) = done {
            tracing::debug!(%system, error = %e, "a fleet breaker step failed; tried again next tick");
        }
        seen = observe(breaker);
    }
}

/// Publishes this replica's own verdict and reads the fleet's breaker, in
/// one round trip; with the time left on the probe lease.
async fn read(pool: &PgPool, me: Uuid, system: &str, own_open: bool) -> Result<(Fleet, f64), sqlx::Error> {
    let (open, half_open_in, mine, held, probe_left, opens): (bool, f64, bool, bool, f64, i64) =
        sqlx::query_as(
            "WITH verdict AS (
             INSERT INTO ballast_fleet_verdicts (system, replica, open) VALUES ($1, $2, $3)
             ON CONFLICT (system, replica) DO UPDATE SET
                 changed_at = CASE WHEN ballast_fleet_verdicts.open <> EXCLUDED.open THEN now()
                                   ELSE ballast_fleet_verdicts.changed_at END,
                 open = EXCLUDED.open, seen_at = now()),
         fleet AS (INSERT INTO ballast_fleet_breakers (system) VALUES ($1) ON CONFLICT (system) DO NOTHING)
         SELECT coalesce(f.open, false),
                coalesce(extract(epoch FROM f.half_open_at - now()), 0)::float8,
                coalesce(f.probe_holder = $2, false),
                coalesce(f.probe_holder IS NOT NULL AND f.probe_until > now(), false),
                coalesce(extract(epoch FROM f.probe_until - now()), 0)::float8,
                (SELECT count(*) FROM ballast_fleet_verdicts v
                 JOIN ballast_fleet_replicas r ON r.id = v.replica
                 WHERE v.system = $1 AND v.open AND v.replica <> $2 AND r.stopped_at IS NULL
                   AND r.heartbeat_at > now() - $4 * interval '1 millisecond')
                + CASE WHEN $3 THEN 1 ELSE 0 END
         FROM (SELECT 1) AS one LEFT JOIN ballast_fleet_breakers f ON f.system = $1",
        )
        .bind(system)
        .bind(me)
        .bind(own_open)
        .bind(GONE_AFTER.as_millis() as f64)
        .fetch_one(pool)
        .await?;
    let fleet = Fleet { open, half_open_in, mine, held, opens: u32::try_from(opens).unwrap_or(u32::MAX) };
    Ok((fleet, probe_left))
}

async fn open(pool: &PgPool, system: &str, open_for: Duration) -> Result<(), sqlx::Error> {
    let opened = sqlx::query(
        "UPDATE ballast_fleet_breakers
         SET open = true, changed_at = now(), half_open_at = now() + $2 * interval '1 millisecond',
             probe_holder = NULL, probe_until = NULL
         WHERE system = $1 AND NOT open",
    )
    .bind(system)
    .bind(open_for.as_millis() as f64)
    .execute(pool)
    .await?;
    if opened.rows_affected() == 1 {
        tracing::warn!(%system, ?open_for, "the fleet's breaker opened: a quorum of replicas sees the system failing");
    }
    Ok(())
}

/// Takes the probe lease if the fleet's probe time has come and no replica
/// holds it; whether this replica now does.
async fn take_probe(pool: &PgPool, me: Uuid, system: &str) -> Result<bool, sqlx::Error> {
    let taken = sqlx::query(
        "UPDATE ballast_fleet_breakers SET probe_holder = $2, probe_until = now() + $3 * interval '1 millisecond'
         WHERE system = $1 AND open AND half_open_at <= now()
           AND (probe_holder IS NULL OR probe_until <= now())",
    )
    .bind(system)
    .bind(me)
    .bind(PROBE_LEASE.as_millis() as f64)
    .execute(pool)
    .await?;
    Ok(taken.rows_affected() == 1)
}

/// Gives up this replica's probe lease, for another replica to take.
async fn pass_probe(pool: &PgPool, me: Uuid, system: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE ballast_fleet_breakers SET probe_holder = NULL, probe_until = NULL
         WHERE system = $1 AND probe_holder = $2",
    )
    .bind(system)
    .bind(me)
    .execute(pool)
    .await?;
    Ok(())
}

async fn close(pool: &PgPool, me: Uuid, system: &str) -> Result<(), sqlx::Error> {
    let closed = sqlx::query(
        "UPDATE ballast_fleet_breakers SET open = false, changed_at = now(), probe_holder = NULL, probe_until = NULL
         WHERE system = $1 AND probe_holder = $2",
    )
    .bind(system)
    .bind(me)
    .execute(pool)
    .await?;
    if closed.rows_affected() == 1 {
        tracing::info!(%system, "the fleet's breaker closed: this replica's probe got through");
    }
    Ok(())
}

async fn reopen(pool: &PgPool, me: Uuid, system: &str, open_for: Duration) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE ballast_fleet_breakers
         SET half_open_at = now() + $3 * interval '1 millisecond', probe_holder = NULL, probe_until = NULL
         WHERE system = $1 AND probe_holder = $2",
    )
    .bind(system)
    .bind(me)
    .bind(open_for.as_millis() as f64)
    .execute(pool)
    .await?;
    Ok(())
}
