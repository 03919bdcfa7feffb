//! Replicas that know each other: every `ballast serve` of a fleet registers
//! itself (host, pid, version, a digest of its configuration, when it
//! started), heartbeats every [`HEARTBEAT_EVERY`], and is taken for gone
//! after [`GONE_AFTER`] without one (or at once when it stops). A listing
//! flags a replica whose configuration differs from most of the live ones
//! (drift) and one whose clock is more than [`CLOCK_TOLERANCE`] off the
//! database's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::error::FleetError;

/// How often a replica says it is alive.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);

/// How long without a heartbeat before a replica is taken for gone.
pub const GONE_AFTER: Duration = Duration::from_secs(6);

/// How far a replica's clock may be off the database's before it is flagged.
pub const CLOCK_TOLERANCE: Duration = Duration::from_secs(1);

/// What a replica says of itself when it joins.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Identity {
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its version.
    pub version: String,
    /// A digest of the configuration it loaded: replicas that differ are
    /// flagged.
    pub config_digest: String,
    /// Its admin listener's address, for an operator to find it.
    pub admin: String,
    /// The queue schema it speaks (the migrations its version knows).
    pub queue_schema: Option<i64>,
}

/// Whether a replica still heartbeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicaState {
    /// It heartbeated within [`GONE_AFTER`].
    Live,
    /// It stopped, or has not heartbeated for [`GONE_AFTER`].
    Gone,
}

impl ReplicaState {
    /// `"live"` or `"gone"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReplicaState::Live => "live",
            ReplicaState::Gone => "gone",
        }
    }
}

/// A replica as the fleet's table has it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Replica {
    /// Its id, made when it joined.
    pub id: Uuid,
    /// What it said of itself when it joined (its fields side by side with
    /// these in JSON). Its queue schema is `None` for a replica of a version
    /// that did not say.
    #[serde(flatten)]
    pub identity: Identity,
    /// When it joined.
    #[serde(with = "epoch_seconds")]
    pub started_at: SystemTime,
    /// How long ago it last heartbeated.
    pub heartbeat_age: Duration,
    /// Its clock less the database's, in milliseconds.
    pub clock_skew_ms: f64,
    /// Live or gone.
    pub state: ReplicaState,
    /// Its configuration differs from most live replicas'.
    pub drift: bool,
    /// Its clock is more than [`CLOCK_TOLERANCE`] off the database's.
    pub clock_off: bool,
}

mod epoch_seconds {
    pub fn serialize<S: serde::Serializer>(at: &std::time::SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(at.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()))
    }
}

/// Registers a new replica; its id.
pub(crate) async fn register(pool: &PgPool, me: &Identity) -> Result<Uuid, FleetError> {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO ballast_fleet_replicas (id, host, pid, version, config_digest, admin, clock_skew_ms, queue_schema)
         VALUES ($1, $2, $3, $4, $5, $6, $7 - extract(epoch FROM clock_timestamp()) * 1000, $8)",
    )
    .bind(id)
    .bind(&me.host)
    .bind(i32::try_from(me.pid).unwrap_or(i32::MAX))
    .bind(&me.version)
    .bind(&me.config_digest)
    .bind(&me.admin)
    .bind(epoch_ms(SystemTime::now()))
    .bind(me.queue_schema)
    .execute(pool)
    .await?;
    Ok(id)
}

/// One heartbeat of `id`; the number of live replicas, this one included.
pub(crate) async fn heartbeat(pool: &PgPool, id: Uuid) -> Result<u64, FleetError> {
    let sent = SystemTime::now();
    let live: i64 = sqlx::query_scalar(
        "WITH beat AS (
             UPDATE ballast_fleet_replicas
             SET heartbeat_at = now(), stopped_at = NULL,
                 clock_skew_ms = $2 - extract(epoch FROM clock_timestamp()) * 1000
             WHERE id = $1)
         SELECT count(*) FROM ballast_fleet_replicas
         WHERE stopped_at IS NULL AND (id = $1 OR heartbeat_at > now() - $3 * interval '1 millisecond')",
    )
    .bind(id)
    .bind(epoch_ms(sent))
    .bind(GONE_AFTER.as_millis() as f64)
    .fetch_one(pool)
    .await?;
    Ok(u64::try_from(live).unwrap_or(1).max(1))
}

/// Marks `id` as stopped: gone at once, not after missed heartbeats.
pub(crate) async fn leave(pool: &PgPool, id: Uuid) -> Result<(), FleetError> {
    sqlx::query("UPDATE ballast_fleet_replicas SET stopped_at = now() WHERE id = $1")
        .bind(id)
        .execute(pool)
        .await?;
    Ok(())
}

/// The most replicas alive at one time in the last `since`. Replicas
/// overlap most at some replica's start (or at the window's start): each
/// such moment counts the replicas started by then and not yet gone
/// (stopped, or past their last heartbeat).
pub(crate) async fn most_at_once(pool: &PgPool, since: Duration) -> Result<u32, FleetError> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('ballast_fleet_replicas') IS NOT NULL")
        .fetch_one(pool)
        .await?;
    if !exists {
        return Ok(0);
    }
    let most: i64 = sqlx::query_scalar(
        "WITH lately AS (
             SELECT started_at, COALESCE(stopped_at, heartbeat_at) AS gone_at
             FROM ballast_fleet_replicas
             WHERE COALESCE(stopped_at, heartbeat_at) > now() - $1 * interval '1 millisecond'),
         moments AS (
             SELECT GREATEST(started_at, now() - $1 * interval '1 millisecond') AS at FROM lately)
         SELECT COALESCE(max((SELECT count(*) FROM lately l WHERE l.started_at <= m.at AND l.gone_at >= m.at)), 0)
         FROM moments m",
    )
    .bind(since.as_millis() as f64)
    .fetch_one(pool)
    .await?;
    Ok(u32::try_from(most).unwrap_or(u32::MAX))
}

/// Every replica registered in the last `since`, newest first, with its
/// state and flags.
pub(crate) async fn list(pool: &PgPool, since: Duration) -> Result<Vec<Replica>, FleetError> {
    let rows = sqlx::query(
        "SELECT id, host, pid, version, config_digest, admin, queue_schema,
                extract(epoch FROM started_at)::float8 AS started,
                extract(epoch FROM now() - heartbeat_at)::float8 AS age,
                clock_skew_ms, stopped_at IS NOT NULL AS stopped
         FROM ballast_fleet_replicas
         WHERE heartbeat_at > now() - $1 * interval '1 millisecond'
         ORDER BY started_at DESC",
    )
    .bind(since.as_millis() as f64)
    .fetch_all(pool)
    .await?;
    let mut replicas = Vec::with_capacity(rows.len());
    for row in rows {
        let age = Duration::from_secs_f64(row.try_get::<f64, _>("age")?.max(0.0));
        let stopped: bool = row.try_get("stopped")?;
        let skew: f64 = row.try_get("clock_skew_ms")?;
        replicas.push(Replica {
            id: row.try_get("id")?,
            identity: Identity {
                host: row.try_get("host")?,
                pid: u32::try_from(row.try_get::<i32, _>("pid")?).unwrap_or(0),
                version: row.try_get("version")?,
                config_digest: row.try_get("config_digest")?,
                admin: row.try_get("admin")?,
                queue_schema: row.try_get("queue_schema")?,
            },
            started_at: UNIX_EPOCH + Duration::from_secs_f64(row.try_get::<f64, _>("started")?.max(0.0)),
            heartbeat_age: age,
            clock_skew_ms: skew,
            state: if stopped || age > GONE_AFTER { ReplicaState::Gone } else { ReplicaState::Live },
            drift: false,
            clock_off: skew.abs() > CLOCK_TOLERANCE.as_millis() as f64,
        });
    }
    flag_drift(&mut replicas);
    Ok(replicas)
}

/// Flags the live replicas whose configuration digest is not the one most
/// live replicas run (the first seen of equals).
fn flag_drift(replicas: &mut [Replica]) {
    let live = || replicas.iter().filter(|r| r.state == ReplicaState::Live);
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for replica in live() {
        match counts.iter_mut().find(|(d, _)| *d == replica.identity.config_digest) {
            Some((_, n)) => *n += 1,
            None => counts.push((&replica.identity.config_digest, 1)),
        }
    }
    let Some(most) = counts.iter().max_by_key(|(_, n)| *n).map(|(d, _)| (*d).to_owned()) else { return };
    for replica in replicas.iter_mut().filter(|r| r.state == ReplicaState::Live) {
        replica.drift = replica.identity.config_digest != most;
    }
}

fn epoch_ms(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(digest: &str, state: ReplicaState) -> Replica {
        Replica {
            id: Uuid::now_v7(),
            identity: Identity {
                host: "h".into(),
                pid: 1,
                version: "0.1.0".into(),
                config_digest: digest.into(),
                admin: String::new(),
                queue_schema: Some(6),
            },
            started_at: UNIX_EPOCH,
            heartbeat_age: Duration::ZERO,
            clock_skew_ms: 0.0,
            state,
            drift: false,
            clock_off: false,
        }
    }

    #[test]
    fn a_live_replica_whose_configuration_differs_from_most_is_flagged() {
        let mut replicas = [
            replica("a", ReplicaState::Live),
            replica("b", ReplicaState::Live),
            replica("a", ReplicaState::Live),
            replica("c", ReplicaState::Gone),
        ];
        flag_drift(&mut replicas);
        let drift: Vec<bool> = replicas.iter().map(|r| r.drift).collect();
        assert_eq!(drift, [false, true, false, false], "a gone replica is not held against the fleet");
    }

    #[test]
    fn a_replica_prints_as_one_flat_object() {
        // `ballast fleet --format json` readers see the identity's keys
        // beside the rest, as they did before the identity was one field.
        let json = serde_json::to_value(replica("d1", ReplicaState::Live)).unwrap();
        let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        for key in
            ["id", "host", "pid", "version", "config_digest", "admin", "queue_schema", "state", "drift"]
        {
            assert!(keys.contains(&key), "{key} missing from {json}");
        }
        assert!(!keys.contains(&"identity"), "{json}");
        assert_eq!((json["config_digest"].as_str(), json["pid"].as_u64()), (Some("d1"), Some(1)));
    }
}
