//! A rate limit the whole fleet holds (`[systems.NAME.rate_limit] scope =
//! "fleet"`): one token bucket per system in PostgreSQL
//! (`ballast_fleet_limits`), from which each replica leases permits in
//! batches sized to its own recent pace, so a database round trip is paid
//! once per many permits; what a replica hears from the system (a throttle,
//! an announced rate, a hold) goes with its next lease and reaches every
//! replica with theirs — within a [`LEASE_EVERY`] while they are busy.
//!
//! The keeper of one system's limit on one replica waits until its limiter
//! runs low (or the system said something), leases, and hands the grant to
//! the limiter ([`ballast::RateLimiter::grant`]). Permits are good for
//! [`GOOD_FOR`]: a replica never saves up a burst of its own. The bucket
//! holds the limit's burst and what accrues in one [`LEASE_EVERY`] at its
//! rate, so a lease that comes late (a busy database, a replica short of
//! CPU) loses none of the rate. While the
//! database cannot be reached the limiter runs on its local bucket at the
//! fleet's rate over the replicas last seen ([`ballast::RateLimiter::degrade`]),
//! says so in the log and in `ballast_fleet_degraded{system}`, and returns to
//! the fleet's bucket with the next lease that works.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ballast::rate_limit::shared::{Demand, Granted, Signals};
use ballast::Policy;
use sqlx::PgPool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::FleetError;

/// How often a busy replica leases while it has demand.
pub const LEASE_EVERY: Duration = Duration::from_millis(100);

/// How long leased permits may be taken.
pub const GOOD_FOR: Duration = Duration::from_millis(250);

/// How long a lease may take before the database counts as unreachable.
pub const LEASE_TIMEOUT: Duration = Duration::from_millis(500);

/// What a lease asks of the fleet's bucket of one system.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ask {
    pub want: f64,
    /// This replica's demand, permits a second: what its share of a
    /// saturated bucket is weighed by.
    pub pace: f64,
    pub configured: f64,
    pub burst: f64,
    pub adaptive: bool,
    pub signals: Signals,
    pub max_hold: Duration,
}

/// What the bucket granted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Lease {
    pub granted: f64,
    /// The fleet's rate now.
    pub rate: f64,
    /// How long the fleet is held by the system's word.
    pub held: Duration,
}

/// The fleet's buckets: PostgreSQL's, or one in memory for tests.
pub(crate) trait Bucket: Send + Sync + 'static {
    fn lease(&self, system: &str, ask: &Ask) -> impl Future<Output = Result<Lease, FleetError>> + Send;
}

/// The buckets in `ballast_fleet_limits`, leased by one replica through
/// `ballast_fleet_lease` in one round trip; each replica's share of a
/// saturated bucket is kept in `ballast_fleet_shares`
/// (`migrations/0005_fair_shares.sql`).
#[derive(Debug, Clone)]
pub(crate) struct PgBuckets {
    pub pool: PgPool,
    pub replica: Uuid,
}

impl Bucket for PgBuckets {
    async fn lease(&self, system: &str, ask: &Ask) -> Result<Lease, FleetError> {
        let (granted, rate, held_ms): (f64, f64, f64) = sqlx::query_as(
            "SELECT granted, rate, held_ms FROM ballast_fleet_lease(\
             $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
        )
        .bind(system)
        .bind(self.replica)
        .bind(ask.pace)
        .bind(ask.want)
        .bind(ask.configured)
        .bind(ask.burst)
        .bind(ask.adaptive)
        .bind(i64::try_from(ask.signals.throttles).unwrap_or(i64::MAX))
        .bind(ask.signals.announced.unwrap_or(0.0))
        .bind(ask.signals.hold.map_or(0.0, |h| h.as_secs_f64() * 1000.0))
        .bind(ask.max_hold.as_secs_f64() * 1000.0)
        .bind(ballast::rate_limit::adaptive::FLOOR)
        .bind(ask.signals.announced_for.map_or(0.0, |w| w.as_secs_f64() * 1000.0))
        .bind(ask.signals.reset)
        .bind((LEASE_EVERY + GOOD_FOR).as_secs_f64() * 1000.0)
        .fetch_one(&self.pool)
        .await?;
        Ok(Lease { granted, rate, held: Duration::from_secs_f64(held_ms.max(0.0) / 1000.0) })
    }
}

/// How many permits to ask for: this replica's pace — permits taken and
/// refused per second, smoothed — over the permits' life, less what it has
/// on hand; at least one while it wants any.
#[derive(Debug, Default)]
pub(crate) struct Sizing {
    last: Option<(Instant, Demand)>,
    pace: f64,
    /// The pace averaged over time (about [`DEMAND_OVER`]), for this
    /// replica's share: leases come as often as a round trip when permits
    /// run short, and `pace` follows each of them.
    rate: f64,
}

/// Over about how long a replica's demand is averaged for its share.
const DEMAND_OVER: Duration = Duration::from_millis(500);

impl Sizing {
    pub fn want(&mut self, now: Instant, demand: Demand) -> f64 {
        let wanted = match self.last {
            None => demand.taken + demand.refused,
            Some((at, before)) => {
                let asked = (demand.taken + demand.refused).saturating_sub(before.taken + before.refused);
                let secs = now.duration_since(at).as_secs_f64();
                if secs > 0.0 {
                    let pace = asked as f64 / secs;
                    // Half the old pace, half the new: a burst is followed, noise is not.
                    self.pace = if self.pace == 0.0 { pace } else { (self.pace + pace) / 2.0 };
                    let weight = 1.0 - (-secs / DEMAND_OVER.as_secs_f64()).exp();
                    self.rate += weight * (pace - self.rate);
                }
                asked
            }
        };
        self.last = Some((now, demand));
        let need = (self.pace * GOOD_FOR.as_secs_f64()).ceil() - demand.left as f64;
        if wanted > 0 || demand.left < 0 || demand.waiting > 0 {
            need.max(demand.waiting.max(1) as f64)
        } else {
            need.max(0.0)
        }
    }

    /// This replica's demand, permits a second, for its share of a
    /// saturated bucket: its pace, and the attempts waiting now as if
    /// each wanted its permit within a permit's life — paced work waits
    /// rather than being refused, so its pace alone counts only what it
    /// was granted. Before a pace is known, what `want` asked for.
    pub fn demand(&self, want: f64, waiting: u64) -> f64 {
        let life = GOOD_FOR.as_secs_f64();
        let asked = self.rate + waiting as f64 / life;
        if asked > 0.0 {
            asked
        } else {
            want / life
        }
    }

    /// Whether the replica has asked for permits lately: a busy one leases
    /// every [`LEASE_EVERY`] before it runs out.
    pub fn busy(&self) -> bool {
        self.pace >= 1.0
    }
}

/// What the fleet's bucket holds at most: the limit's burst, and what
/// accrues at its rate between two leases of a busy replica — so that a
/// lease which comes a little late loses none of the rate, while the fleet
/// still never sends more than a burst and a tenth of a second's worth at
/// once.
fn capacity(limit: &ballast::RateLimit) -> f64 {
    f64::from(limit.get_burst()) + limit.rate() * LEASE_EVERY.as_secs_f64()
}

/// Keeps `policy`'s fleet-wide limit of `system` fed from `bucket` until
/// `stop`; `live` holds the number of live replicas, for the fallback.
pub(crate) async fn keep<B: Bucket>(
    bucket: Arc<B>,
    system: String,
    policy: Policy,
    live: Arc<AtomicU64>,
    stop: CancellationToken,
) {
    let Some(limiter) = policy.rate_limiter() else { return };
    let Some(shared) = limiter.shared() else { return };
    let limit = *limiter.limit();
    let degraded = metrics::gauge!("ballast_fleet_degraded", "system" => system.clone());
    let leases = metrics::counter!("ballast_fleet_leases_total", "system" => system.clone());
    let mut sizing = Sizing::default();
    let mut reachable = None;
    // The first lease is taken at once, so that the first calls find permits
    // on hand; until it is granted the limiter runs on its local bucket.
    let mut first = true;
    // A busy replica leases every LEASE_EVERY from the start of its last
    // lease, however long that lease took (up to LEASE_EVERY).
    let mut leased_at = Instant::now();
    loop {
        let next = async {
            if std::mem::take(&mut first) {
                return;
            }
            if sizing.busy() {
                tokio::time::sleep_until(leased_at + LEASE_EVERY).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = shared.wanted() => {}
            () = next => {}
        }
        let now = Instant::now();
        let demand = limiter.demand().unwrap_or_default();
        let want = sizing.want(now, demand);
        let want = if reachable.is_none() { want.max(1.0) } else { want };
        let mut signals = shared.signals();
        // A replica's first lease resets what the fleet learned of the
        // system, as its start resets its own limiter: a restart is how an
        // operator clears a ceiling or a hold it should not have taken.
        if reachable.is_none() {
            signals.reset = true;
        }
        if want == 0.0 && signals.is_empty() {
            // Nothing asked this round: a busy replica looks again a
            // LEASE_EVERY later, not at once.
            leased_at = now;
            continue;
        }
        let ask = Ask {
            want,
            pace: sizing.demand(want, demand.waiting),
            configured: limit.rate(),
            burst: capacity(&limit),
            adaptive: limit.is_adaptive(),
            signals,
            max_hold: limit.get_max_hold(),
        };
        leased_at = Instant::now();
        let leased = tokio::time::timeout(LEASE_TIMEOUT, bucket.lease(&system, &ask)).await;
        match leased {
            Ok(Ok(lease)) => {
                leases.increment(1);
                let live = live.load(Ordering::Relaxed).max(1) as f64;
                limiter.grant(Granted {
                    permits: lease.granted as u64,
                    good_for: GOOD_FOR,
                    fleet_rate: lease.rate,
                    share: lease.rate / live,
                    held_for: lease.held,
                });
                if reachable != Some(true) {
                    if reachable == Some(false) {
                        tracing::info!(%system, "the fleet's rate limit is reachable again: permits come from the fleet's bucket");
                    }
                    degraded.set(0.0);
                    reachable = Some(true);
                }
            }
            failed => {
                let live = live.load(Ordering::Relaxed).max(1);
                let local = limit.rate() / live as f64;
                limiter.degrade(local);
                if reachable != Some(false) {
                    let why = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no answer within {LEASE_TIMEOUT:?}"),
                    };
                    tracing::warn!(
                        %system,
                        error = %why,
                        live_replicas = live,
                        "the fleet's rate limit cannot be reached: this replica holds {local:.2}/s of it on its own until it can"
                    );
                    degraded.set(1.0);
                    reachable = Some(false);
                }
                // A database that does not answer is asked again, not hammered.
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(LEASE_EVERY * 5) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use ballast::RateLimit;

    /// The fleet's bucket in memory, on tokio's clock: a token bucket of
    /// `rate` a second holding what a lease asks it to (`Ask::burst`), like
    /// `ballast_fleet_lease`; the leases take `latencies` in turn.
    struct Memory {
        rate: f64,
        latencies: Vec<Duration>,
        leases: AtomicU64,
        state: Mutex<(f64, Instant, f64)>,
        down: std::sync::atomic::AtomicBool,
    }

    impl Memory {
        fn new(rate: f64, latencies: &[Duration]) -> Self {
            Self {
                rate,
                latencies: latencies.to_vec(),
                leases: AtomicU64::new(0),
                state: Mutex::new((0.0, Instant::now(), 0.0)),
                down: Default::default(),
            }
        }

        fn granted(&self) -> f64 {
            self.state.lock().unwrap().2
        }
    }

    impl Bucket for Memory {
        async fn lease(&self, _: &str, ask: &Ask) -> Result<Lease, FleetError> {
            if self.down.load(Ordering::Relaxed) {
                return Err(FleetError::Database(sqlx::Error::PoolTimedOut));
            }
            let n = self.leases.fetch_add(1, Ordering::Relaxed) as usize;
            tokio::time::sleep(self.latencies[n % self.latencies.len()]).await;
            let mut state = self.state.lock().unwrap();
            let now = Instant::now();
            let avail = (state.0 + self.rate * now.duration_since(state.1).as_secs_f64()).min(ask.burst);
            let granted = ask.want.min(avail.floor()).max(0.0);
            *state = (avail - granted, now, state.2 + granted);
            Ok(Lease { granted, rate: self.rate, held: Duration::ZERO })
        }
    }

    fn replica(bucket: &Arc<Memory>, live: &Arc<AtomicU64>, stop: &CancellationToken) -> Policy {
        let policy =
            Policy::builder("crm").rate_limit(RateLimit::per_second(100).burst(10).fleet()).build().unwrap();
        tokio::spawn(keep(Arc::clone(bucket), "crm".into(), policy.clone(), Arc::clone(live), stop.clone()));
        policy
    }

    /// Offers `per_second` calls a second to `policy` for `secs`; the calls
    /// it let through.
    async fn offer(policy: &Policy, per_second: u32, secs: u32) -> u32 {
        let mut sent = 0;
        for _ in 0..per_second * secs {
            tokio::time::sleep(Duration::from_secs(1) / per_second).await;
            if policy.read(|_| async { Ok::<_, std::convert::Infallible>(()) }).await.is_ok() {
                sent += 1;
            }
        }
        sent
    }

    /// Three replicas offered 300 calls a second together send the fleet's
    /// 100 (and its burst), using nearly all of it.
    #[tokio::test(start_paused = true)]
    async fn three_replicas_together_send_the_fleet_s_rate() {
        let bucket = Arc::new(Memory::new(100.0, &[Duration::from_millis(2)]));
        let live = Arc::new(AtomicU64::new(3));
        let stop = CancellationToken::new();
        let mut runs = tokio::task::JoinSet::new();
        for _ in 0..3 {
            let policy = replica(&bucket, &live, &stop);
            runs.spawn(async move { offer(&policy, 100, 10).await });
        }
        let sent: u32 = runs.join_all().await.into_iter().sum();
        stop.cancel();
        // The burst of 10 and a tenth of a second's worth at 100/s.
        assert!(f64::from(sent) <= 100.0 * 10.0 + 20.0, "within rate × t + the bucket: {sent}");
        assert!(f64::from(sent) >= 0.9 * 100.0 * 10.0, "uses the rate: {sent}");
        assert!(bucket.granted() >= f64::from(sent), "nothing sent without a permit");
    }

    /// Leases that take up to most of a lease interval, each its own time
    /// (a busy database, a replica short of CPU), lose none of the rate: the
    /// bucket holds what accrues between two leases, and the next lease
    /// starts on time.
    #[tokio::test(start_paused = true)]
    async fn slow_leases_lose_none_of_the_rate() {
        let latencies = [5, 90, 10, 80, 2, 95].map(Duration::from_millis);
        let bucket = Arc::new(Memory::new(100.0, &latencies));
        let live = Arc::new(AtomicU64::new(1));
        let stop = CancellationToken::new();
        let policy = replica(&bucket, &live, &stop);
        // Calls that do not wait for one another: 200 a second, each on its own.
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..200 * 10 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let policy = policy.clone();
            calls.spawn(async move {
                policy.read(|_| async { Ok::<_, std::convert::Infallible>(()) }).await.is_ok()
            });
        }
        let sent = calls.join_all().await.into_iter().filter(|ok| *ok).count();
        stop.cancel();
        assert!(sent >= 970, "100/s for 10 s with leases of up to 95 ms: {sent}");
        assert!(sent <= 1000 + 20, "and no more: {sent}");
    }

    /// Without the database each replica holds the fleet's rate over the
    /// replicas last seen, and the fleet's bucket again once it answers.
    #[tokio::test(start_paused = true)]
    async fn without_the_database_each_replica_holds_its_share() {
        let bucket = Arc::new(Memory::new(100.0, &[Duration::from_millis(2)]));
        let live = Arc::new(AtomicU64::new(3));
        let stop = CancellationToken::new();
        let policy = replica(&bucket, &live, &stop);
        let shared = || policy.rate_limiter().unwrap().shared().unwrap();
        assert!(offer(&policy, 100, 2).await >= 190, "one replica alone may use the fleet's rate");
        bucket.down.store(true, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let alone = offer(&policy, 100, 10).await;
        assert!(shared().is_degraded());
        assert!((320..=345).contains(&alone), "100/s over 3 replicas for 10 s, and a burst: {alone}");
        bucket.down.store(false, Ordering::Relaxed);
        let back = offer(&policy, 100, 3).await;
        assert!(back >= 250, "the fleet's bucket again: {back}");
        assert!(!shared().is_degraded());
        stop.cancel();
    }

    /// After a busy spell, a replica's permits lapse unused; calls that come
    /// later, two at a time and spaced wider than a permit's life (a
    /// worker's deliveries), are each let through: the keeper leases for
    /// them instead of counting lapsed permits as on hand.
    #[tokio::test(start_paused = true)]
    async fn calls_after_a_busy_spell_get_permits_though_the_last_ones_lapsed() {
        let bucket = Arc::new(Memory::new(100.0, &[Duration::from_millis(2)]));
        let live = Arc::new(AtomicU64::new(1));
        let stop = CancellationToken::new();
        let policy = replica(&bucket, &live, &stop);
        offer(&policy, 300, 3).await;
        let mut through = 0;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(400)).await;
            let (a, b) = tokio::join!(
                policy.read(|_| async { Ok::<_, std::convert::Infallible>(()) }),
                policy.read(|_| async { Ok::<_, std::convert::Infallible>(()) })
            );
            through += u32::from(a.is_ok()) + u32::from(b.is_ok());
        }
        stop.cancel();
        assert_eq!(through, 40, "an idle fleet lets every call through");
    }

    /// A replica short of permits leases as often as a round trip; its
    /// demand for its share is its pace over time, not over the last
    /// millisecond, and its attempts waiting in line count too.
    #[test]
    fn a_replica_s_demand_is_its_pace_over_time_and_what_waits() {
        let start = Instant::now();
        let mut sizing = Sizing::default();
        let demand = |asked| Demand { taken: asked, refused: 0, left: 0, waiting: 0 };
        sizing.want(start, demand(0));
        // 100 a second for 3 s, leased in bursts: 1 call 1 ms after the
        // last lease, then 9 more over the next 99 ms.
        let mut asked = 0;
        for step in 0..30 {
            let at = start + Duration::from_millis(100) * step;
            asked += 1;
            sizing.want(at + Duration::from_millis(1), demand(asked));
            asked += 9;
            sizing.want(at + Duration::from_millis(100), demand(asked));
        }
        let rate = sizing.demand(0.0, 0);
        assert!((80.0..=120.0).contains(&rate), "about 100 a second: {rate}");
        assert!(sizing.pace > 150.0, "while the lease sizing follows the burst: {}", sizing.pace);
        let waiting = sizing.demand(0.0, 5);
        assert!((rate + 19.0..=rate + 21.0).contains(&waiting), "5 waiting over a permit's life: {waiting}");
        assert_eq!(Sizing::default().demand(3.0, 0), 12.0, "before any pace, what the first lease wants");
    }

    #[test]
    fn a_lease_asks_for_the_pace_over_the_permits_life_less_what_is_on_hand() {
        let start = Instant::now();
        let mut sizing = Sizing::default();
        let demand = |taken, refused, left| Demand { taken, refused, left, waiting: 0 };
        assert_eq!(sizing.want(start, demand(0, 1, 0)), 1.0, "the first call asks for one");
        let at = start + Duration::from_secs(1);
        assert_eq!(sizing.want(at, demand(200, 1, 0)), 50.0, "200 a second for 250 ms");
        assert_eq!(sizing.want(at + Duration::from_secs(1), demand(400, 1, 30)), 20.0, "less the 30 on hand");
        assert_eq!(
            sizing.want(at + Duration::from_secs(2), demand(400, 1, 30)),
            0.0,
            "nothing taken: nothing asked"
        );
        let waiting = Demand { waiting: 3, ..demand(400, 1, 30) };
        assert_eq!(sizing.want(at + Duration::from_secs(3), waiting), 3.0, "attempts waiting are asked for");
    }
}
