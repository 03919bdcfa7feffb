//! How much load retries put on a sick upstream: offered calls against the
//! attempts that reach it, for a naive retry client and for ballast, on
//! tokio's paused clock so every run of a seed gives the same figures.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use ballast::{Backoff, Breaker, Classification, Classify, Policy, Retry, Timeout};
use tokio::time::Instant;

/// What the upstream does to each attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scenario {
    /// Each attempt fails with this probability, independently.
    Errors(f64),
    /// Every attempt fails between these offsets from the start; none before or after.
    Outage {
        /// When the outage starts.
        from: Duration,
        /// How long it lasts.
        lasts: Duration,
    },
}

impl Scenario {
    /// The three scenarios of BENCHMARKS.md.
    pub fn standard() -> [(&'static str, Scenario); 3] {
        [
            ("5 % transient errors", Scenario::Errors(0.05)),
            ("50 % errors", Scenario::Errors(0.5)),
            (
                "60 s total outage",
                Scenario::Outage { from: Duration::from_secs(30), lasts: Duration::from_secs(60) },
            ),
        ]
    }
}

/// The client under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// Retries every error 3 times after a constant 100 ms: what the guide forbids.
    Naive,
    /// ballast, 3 attempts, no retry budget, no breaker.
    BallastNoBudget,
    /// ballast, 3 attempts, default retry budget, no breaker.
    BallastBudget,
    /// ballast, 3 attempts, default retry budget and the guide's count breaker.
    BallastBudgetBreaker,
}

impl Client {
    /// Every client, in report order.
    pub const ALL: [Client; 4] =
        [Client::Naive, Client::BallastNoBudget, Client::BallastBudget, Client::BallastBudgetBreaker];

    /// The label used in reports.
    pub fn label(self) -> &'static str {
        match self {
            Client::Naive => "naive: 3 retries, constant 100 ms",
            Client::BallastNoBudget => "ballast: 3 attempts, no budget",
            Client::BallastBudget => "ballast: 3 attempts, budget",
            Client::BallastBudgetBreaker => "ballast: 3 attempts, budget + breaker",
        }
    }
}

/// Figures of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// Calls offered by the callers.
    pub offered: u64,
    /// Attempts that reached the upstream.
    pub attempts: u64,
    /// Calls that got an answer.
    pub succeeded: u64,
}

impl Figures {
    /// Attempts per offered call.
    pub fn load_factor(&self) -> f64 {
        self.attempts as f64 / self.offered.max(1) as f64
    }

    /// Share of offered calls that succeeded.
    pub fn success_rate(&self) -> f64 {
        self.succeeded as f64 / self.offered.max(1) as f64
    }
}

#[derive(Debug)]
struct Down;

impl Classify for Down {
    fn classify(&self) -> Classification {
        Classification::transient()
    }
}

/// A reproducible coin per (seed, call, attempt).
fn coin(seed: u64, call: u64, attempt: u64) -> f64 {
    let mut z = seed ^ call.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ attempt.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

struct Upstream {
    scenario: Scenario,
    seed: u64,
    start: Instant,
    attempts: Cell<u64>,
}

impl Upstream {
    fn answer(&self, call: u64, attempt: u64) -> Result<(), Down> {
        self.attempts.set(self.attempts.get() + 1);
        let failed = match self.scenario {
            Scenario::Errors(p) => coin(self.seed, call, attempt) < p,
            Scenario::Outage { from, lasts } => {
                let t = self.start.elapsed();
                t >= from && t < from + lasts
            }
        };
        if failed {
            Err(Down)
        } else {
            Ok(())
        }
    }
}

/// Offers `rate` calls a second for `duration` and counts what reaches the
/// upstream. Runs on a paused clock: call it outside any runtime.
pub fn simulate(client: Client, scenario: Scenario, rate: u32, duration: Duration, seed: u64) -> Figures {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build();
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => panic!("cannot start a paused tokio runtime: {e}"),
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, run(client, scenario, rate, duration, seed))
}

async fn run(client: Client, scenario: Scenario, rate: u32, duration: Duration, seed: u64) -> Figures {
    let upstream = Rc::new(Upstream { scenario, seed, start: Instant::now(), attempts: Cell::new(0) });
    let succeeded = Rc::new(Cell::new(0u64));
    let policy = match client {
        Client::Naive => None,
        Client::BallastNoBudget => Some(build(Retry::attempts(3).without_budget(), None, seed)),
        Client::BallastBudget => Some(build(Retry::attempts(3), None, seed)),
        Client::BallastBudgetBreaker => Some(build(
            Retry::attempts(3),
            Some(Breaker::count(0.5, 50).half_open_after(Duration::from_secs(30))),
            seed,
        )),
    };
    let gap = Duration::from_secs(1) / rate.max(1);
    let offered = (duration.as_secs_f64() * f64::from(rate)) as u64;
    let mut tasks = Vec::with_capacity(offered as usize);
    for call in 0..offered {
        let (upstream, succeeded, policy) = (upstream.clone(), succeeded.clone(), policy.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let ok = match &policy {
                None => naive_call(&upstream, call).await,
                Some(p) => p
                    .read(|ctx| std::future::ready(upstream.answer(call, u64::from(ctx.attempt()))))
                    .await
                    .is_ok(),
            };
            if ok {
                succeeded.set(succeeded.get() + 1);
            }
        }));
        tokio::time::sleep(gap).await;
    }
    for t in tasks {
        if let Err(e) = t.await {
            panic!("a simulated call panicked: {e}");
        }
    }
    Figures { offered, attempts: upstream.attempts.get(), succeeded: succeeded.get() }
}

fn build(retry: Retry, breaker: Option<Breaker>, seed: u64) -> Policy {
    let mut b = Policy::builder("upstream")
        .retry(
            retry.backoff(Backoff::exponential(Duration::from_millis(500)).max_delay(Duration::from_secs(2))),
        )
        .timeout(Timeout::aggressive(Duration::from_secs(1)))
        .seed(seed);
    if let Some(breaker) = breaker {
        b = b.breaker(breaker);
    }
    match b.build() {
        Ok(p) => p,
        Err(e) => panic!("the simulation's policy is within the rules: {e}"),
    }
}

async fn naive_call(upstream: &Upstream, call: u64) -> bool {
    for attempt in 1..=4 {
        if upstream.answer(call, attempt).is_ok() {
            return true;
        }
        if attempt < 4 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_healthy_upstream_costs_one_attempt_per_call_for_everyone() {
        for client in Client::ALL {
            let o = simulate(client, Scenario::Errors(0.0), 50, Duration::from_secs(2), 1);
            assert_eq!((o.offered, o.attempts, o.succeeded), (100, 100, 100), "{client:?}");
        }
    }

    #[test]
    fn budget_and_breaker_keep_a_dead_upstream_under_1_1x() {
        let outage = Scenario::Outage { from: Duration::ZERO, lasts: Duration::from_secs(3600) };
        let naive = simulate(Client::Naive, outage, 100, Duration::from_secs(20), 3);
        let guarded = simulate(Client::BallastBudgetBreaker, outage, 100, Duration::from_secs(20), 3);
        assert_eq!(naive.load_factor(), 4.0);
        assert!(guarded.load_factor() <= 1.1, "{guarded:?}");
    }

    #[test]
    fn the_same_seed_gives_the_same_figures() {
        let a = simulate(Client::BallastBudgetBreaker, Scenario::Errors(0.5), 100, Duration::from_secs(5), 9);
        let b = simulate(Client::BallastBudgetBreaker, Scenario::Errors(0.5), 100, Duration::from_secs(5), 9);
        assert_eq!(a, b);
    }
}
