//! What each replica did per system, written every [`SAMPLE_EVERY`] to
//! `ballast_fleet_samples` and read back as the fleet's series over the last
//! [`WINDOW`]: attempts sent, calls refused unsent and 429s a second and the
//! breakers' state, summed or taken worst over the replicas, in steps of
//! [`STEP`] — what every replica's dashboard draws alike.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::error::FleetError;
use crate::Member;

/// How often a replica writes its samples.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// How far back the fleet's series go: an hour, so an incident and what
/// led to it are on one chart.
pub const WINDOW: Duration = Duration::from_secs(60 * 60);

/// The width of one point of a series.
pub const STEP: Duration = Duration::from_secs(10);

/// One point of a system's series.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Point {
    /// Seconds before now its step ends.
    pub ago: f64,
    /// Calls a second, the whole fleet's: sent or refused.
    pub calls: f64,
    /// Attempts sent to the system a second, the whole fleet's.
    pub sent: f64,
    /// Calls refused unsent a second (an open breaker, a full bulkhead, no
    /// rate-limit permit), the whole fleet's.
    pub refused: f64,
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

/// One replica's sample: its counters so far, and its breaker's state.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    /// Seconds before now it was taken.
    ago: f64,
    calls: i64,
    sent: i64,
    refused: i64,
    throttled: i64,
    breaker: u8,
}

/// Writes one sample per member, and drops samples past the window.
pub(crate) async fn write(pool: &PgPool, me: Uuid, members: &[Member]) -> Result<(), FleetError> {
    if members.is_empty() {
        return Ok(());
    }
    let systems: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    let count = |of: fn(&Member) -> u64| -> Vec<i64> {
        members.iter().map(|m| i64::try_from(of(m)).unwrap_or(i64::MAX)).collect()
    };
    let (calls, sent, refused, throttled) =
        (count(|m| m.calls), count(|m| m.sent), count(|m| m.refused), count(|m| m.throttled));
    let breakers: Vec<&str> = members.iter().map(|m| m.breaker.map_or("closed", |b| b.as_str())).collect();
    sqlx::query(
        "WITH old AS (DELETE FROM ballast_fleet_samples WHERE at < now() - $6 * interval '1 millisecond')
         INSERT INTO ballast_fleet_samples (replica, system, calls, throttled, breaker, sent, refused)
         SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::text[], $7::bigint[], $8::bigint[])
         ON CONFLICT DO NOTHING",
    )
    .bind(me)
    .bind(&systems)
    .bind(&calls)
    .bind(&throttled)
    .bind(&breakers)
    .bind((WINDOW + STEP * 4).as_millis() as f64)
    .bind(&sent)
    .bind(&refused)
    .execute(pool)
    .await?;
    Ok(())
}

/// The fleet's series, per system.
pub(crate) async fn series(pool: &PgPool) -> Result<Vec<Series>, FleetError> {
    let rows = sqlx::query(
        "SELECT system, replica, extract(epoch FROM now() - at)::float8 AS ago, calls, sent, refused, throttled, breaker
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
        samples.entry(row.try_get("system")?).or_default().entry(row.try_get("replica")?).or_default().push(
            Sample {
                ago: row.try_get("ago")?,
                calls: row.try_get("calls")?,
                sent: row.try_get("sent")?,
                refused: row.try_get("refused")?,
                throttled: row.try_get("throttled")?,
                breaker,
            },
        );
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
        // What this replica counted per step, and the seconds covered.
        let mut own = vec![(Sample::default(), 0.0); steps];
        for pair in samples.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let secs = a.ago - b.ago;
            // A restarted replica's counters start again from zero.
            if secs <= 0.0 || b.calls < a.calls {
                continue;
            }
            let Some((step, covered)) = own.get_mut((b.ago / STEP.as_secs_f64()) as usize) else { continue };
            step.calls += b.calls - a.calls;
            step.sent += (b.sent - a.sent).max(0);
            step.refused += (b.refused - a.refused).max(0);
            step.throttled += (b.throttled - a.throttled).max(0);
            step.breaker = step.breaker.max(b.breaker);
            *covered += secs;
        }
        for (index, (counted, secs)) in own.into_iter().enumerate() {
            if secs <= 0.0 {
                continue;
            }
            let point = out[index]
                .get_or_insert(Point { ago: index as f64 * STEP.as_secs_f64(), ..Point::default() });
            point.calls += counted.calls as f64 / secs;
            point.sent += counted.sent as f64 / secs;
            point.refused += counted.refused as f64 / secs;
            point.throttled += counted.throttled as f64 / secs;
            point.breaker = point.breaker.max(counted.breaker);
        }
    }
    out.into_iter().rev().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_rates_add_up_step_by_step() {
        // Two replicas, each 10 calls a second — 8 sent, 2 refused — and 1
        // throttle a second, one of them open in the last step.
        let a: Vec<Sample> = (0..12)
            .map(|i| {
                let n = i64::from(i);
                Sample {
                    ago: 60.0 - f64::from(i) * 5.0,
                    calls: n * 50,
                    sent: n * 40,
                    refused: n * 10,
                    throttled: n * 5,
                    breaker: 0,
                }
            })
            .collect();
        let mut b = a.clone();
        b.last_mut().unwrap().breaker = 2;
        let points = points([&a, &b].into_iter());
        // A minute of samples: one point per step of it.
        assert_eq!(points.len(), (60.0 / STEP.as_secs_f64()) as usize, "{points:?}");
        assert!(points.windows(2).all(|p| p[0].ago > p[1].ago), "oldest first: {points:?}");
        let last = points.last().unwrap();
        let near = |got: f64, want: f64| (got - want).abs() < 0.01;
        assert!(near(last.calls, 20.0) && near(last.throttled, 2.0), "{last:?}");
        assert!(near(last.sent, 16.0) && near(last.refused, 4.0), "sent and refused apart: {last:?}");
        assert_eq!((points[0].breaker, last.breaker), (0, 2));
    }
}
