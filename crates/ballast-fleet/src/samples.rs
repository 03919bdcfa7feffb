//! What each replica did per system, written every [`SAMPLE_EVERY`] to
//! `ballast_fleet_samples` and read back as the fleet's series over the last
//! [`WINDOW`]: calls and 429s a second and the breakers' state, summed or
//! taken worst over the replicas, in steps of [`STEP`] — what every
//! replica's dashboard draws alike.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::error::FleetError;
use crate::Member;

/// How often a replica writes its samples.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// How far back the fleet's series go.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);

/// The width of one point of a series.
pub const STEP: Duration = Duration::from_secs(10);

/// One point of a system's series.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Point {
    /// Seconds before now its step ends.
    pub ago: f64,
    /// Calls a second, the whole fleet's.
    pub calls: f64,
    /// 429s a second from the system, the whole fleet's.
    pub throttled: f64,
    /// The worst breaker state any replica had: 0 closed, 1 half-open, 2 open, 3 isolated.
    pub breaker: u8,
}

/// A system's series over the last [`WINDOW`], oldest first.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Series {
    /// The system.
    pub system: String,
    /// The points, one per [`STEP`] that has samples.
    pub points: Vec<Point>,
}

/// One replica's sample: seconds ago, calls and 429s so far, breaker state.
type Sample = (f64, i64, i64, u8);

/// Writes one sample per member, and drops samples past the window.
pub(crate) async fn write(pool: &PgPool, me: Uuid, members: &[Member]) -> Result<(), FleetError> {
    if members.is_empty() {
        return Ok(());
    }
    let systems: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    let calls: Vec<i64> = members.iter().map(|m| i64::try_from(m.calls).unwrap_or(i64::MAX)).collect();
    let throttled: Vec<i64> =
        members.iter().map(|m| i64::try_from(m.throttled).unwrap_or(i64::MAX)).collect();
    let breakers: Vec<&str> = members.iter().map(|m| m.breaker.map_or("closed", |b| b.as_str())).collect();
    sqlx::query(
        "WITH old AS (DELETE FROM ballast_fleet_samples WHERE at < now() - $6 * interval '1 millisecond')
         INSERT INTO ballast_fleet_samples (replica, system, calls, throttled, breaker)
         SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::text[])
         ON CONFLICT DO NOTHING",
    )
    .bind(me)
    .bind(&systems)
    .bind(&calls)
    .bind(&throttled)
    .bind(&breakers)
    .bind((WINDOW + STEP * 4).as_millis() as f64)
    .execute(pool)
    .await?;
    Ok(())
}

/// The fleet's series, per system.
pub(crate) async fn series(pool: &PgPool) -> Result<Vec<Series>, FleetError> {
    let rows = sqlx::query(
        "SELECT system, replica, extract(epoch FROM now() - at)::float8 AS ago, calls, throttled, breaker
         FROM ballast_fleet_samples WHERE at > now() - $1 * interval '1 millisecond'
         ORDER BY system, replica, at",
    )
    .bind((WINDOW + STEP).as_millis() as f64)
    .fetch_all(pool)
    .await?;
    let mut samples: BTreeMap<String, BTreeMap<Uuid, Vec<Sample>>> = BTreeMap::new();
    for row in rows {
        let breaker = match row.try_get::<String, _>("breaker")?.as_str() {
            "half_open" => 1,
            "open" => 2,
            "isolated" => 3,
            _ => 0,
        };
        samples
            .entry(row.try_get("system")?)
            .or_default()
            .entry(row.try_get("replica")?)
            .or_default()
            .push((row.try_get("ago")?, row.try_get("calls")?, row.try_get("throttled")?, breaker));
    }
    Ok(samples
        .into_iter()
        .map(|(system, replicas)| Series { system, points: points(replicas.values()) })
        .collect())
}

/// Each replica's rate per step of [`STEP`] (what it counted over the time
/// its samples cover in the step), summed over the replicas; oldest first.
fn points<'a>(replicas: impl Iterator<Item = &'a Vec<Sample>>) -> Vec<Point> {
    let steps = (WINDOW.as_secs_f64() / STEP.as_secs_f64()).ceil() as usize;
    let mut out: Vec<Option<Point>> = vec![None; steps];
    for samples in replicas {
        // Calls, throttles and seconds covered, per step, of this replica.
        let mut own = vec![(0.0, 0.0, 0.0, 0u8); steps];
        for pair in samples.windows(2) {
            let ((ago_a, calls_a, thr_a, _), (ago_b, calls_b, thr_b, breaker)) = (pair[0], pair[1]);
            let secs = ago_a - ago_b;
            // A restarted replica's counters start again from zero.
            if secs <= 0.0 || calls_b < calls_a {
                continue;
            }
            let Some(step) = own.get_mut((ago_b / STEP.as_secs_f64()) as usize) else { continue };
            step.0 += (calls_b - calls_a) as f64;
            step.1 += (thr_b - thr_a).max(0) as f64;
            step.2 += secs;
            step.3 = step.3.max(breaker);
        }
        for (index, (calls, throttled, secs, breaker)) in own.into_iter().enumerate() {
            if secs <= 0.0 {
                continue;
            }
            let point = out[index]
                .get_or_insert(Point { ago: index as f64 * STEP.as_secs_f64(), ..Point::default() });
            point.calls += calls / secs;
            point.throttled += throttled / secs;
            point.breaker = point.breaker.max(breaker);
        }
    }
    out.into_iter().rev().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_rates_add_up_step_by_step() {
        // Two replicas, each 10 calls a second and 1 throttle a second, one of
        // them open in the last step.
        let a: Vec<Sample> =
            (0..12).map(|i| (60.0 - f64::from(i) * 5.0, i64::from(i) * 50, i64::from(i) * 5, 0)).collect();
        let mut b = a.clone();
        b.last_mut().unwrap().3 = 2;
        let points = points([&a, &b].into_iter());
        // A minute of samples: one point per step of it.
        assert_eq!(points.len(), (60.0 / STEP.as_secs_f64()) as usize, "{points:?}");
        assert!(points.windows(2).all(|p| p[0].ago > p[1].ago), "oldest first: {points:?}");
        let last = points.last().unwrap();
        assert!((last.calls - 20.0).abs() < 0.01 && (last.throttled - 2.0).abs() < 0.01, "{last:?}");
        assert_eq!((points[0].breaker, last.breaker), (0, 2));
    }
}
