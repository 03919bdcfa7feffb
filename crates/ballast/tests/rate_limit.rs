//! The rate limit in the composition, on tokio's paused clock: the limit
//! holds whatever the concurrency, a refused attempt is a rejection with the
//! time to the next permit, the waits count in the worst-case window, and the
//! adaptive rule against a model of it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ballast::rate_limit::adaptive::{BETA, CLIMB, FLOOR, HOLD};
use ballast::{Backoff, Classification, Failure, Policy, RateLimit, Rejection, Retry, Timeout};
use proptest::prelude::*;
use tokio::time::Instant;

#[derive(Debug)]
struct Busy;

impl ballast::Classify for Busy {
    fn classify(&self) -> Classification {
        Classification::transient()
    }
}

/// Eight callers as fast as they can for 10 s: between any two attempts,
/// never more than `rate × t + burst` were sent.
#[tokio::test(start_paused = true)]
async fn the_limit_holds_under_concurrency() {
    let (rate, burst) = (50.0, 10);
    let policy = Policy::builder("sms")
        .retry(Retry::attempts(3))
        .rate_limit(RateLimit::per_second(50).burst(burst).wait(Duration::from_millis(30)))
        .build()
        .unwrap();
    let sent: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let start = Instant::now();
    let mut callers = Vec::new();
    for caller in 0..8u64 {
        let (policy, sent) = (policy.clone(), Arc::clone(&sent));
        callers.push(tokio::spawn(async move {
            let mut refused = 0;
            while start.elapsed() < Duration::from_secs(10) {
                let result = policy
                    .read(|ctx| {
                        sent.lock().unwrap().push(Instant::now());
                        // Every third attempt fails, so retries take permits too.
                        let fails = ctx.attempt() == 1 && caller % 3 == 0;
                        async move {
                            if fails {
                                Err(Busy)
                            } else {
                                Ok(())
                            }
                        }
                    })
                    .await;
                if let Err(Failure::Rejected { rejection: Rejection::RateLimited { retry_in }, .. }) = result
                {
                    refused += 1;
                    assert!(retry_in > Duration::from_millis(30), "refused only past the wait: {retry_in:?}");
                    tokio::time::sleep(Duration::from_millis(1 + caller)).await;
                }
            }
            refused
        }));
    }
    let mut refused = 0;
    for caller in callers {
        refused += caller.await.unwrap();
    }
    let sent = sent.lock().unwrap();
    assert!(refused > 0, "the callers asked for more than the limit");
    for (i, first) in sent.iter().enumerate() {
        for (j, last) in sent.iter().enumerate().skip(i) {
            let allowed = rate * (*last - *first).as_secs_f64() + f64::from(burst);
            assert!(((j - i + 1) as f64) <= allowed + 1e-9, "{} attempts in {:?}", j - i + 1, *last - *first);
        }
    }
    let used = sent.len() as f64 / 10.0;
    assert!(used > rate * 0.95, "the limit is used, not starved: {used}/s");
    let snapshot = policy.rate_limiter().unwrap().snapshot();
    assert_eq!(snapshot.granted, sent.len() as u64);
}

/// A refused attempt is not sent, does not count for the breaker, and says
/// when the next permit frees; a retry that finds no permit ends the call
/// with the last attempt's error.
#[tokio::test(start_paused = true)]
async fn a_refusal_names_the_next_permit_and_keeps_the_last_error() {
    // Retries come well within the second the next permit takes.
    let policy =
        Policy::builder("crm")
            .retry(Retry::attempts(3).backoff(
                Backoff::exponential(Duration::from_millis(100)).max_delay(Duration::from_millis(200)),
            ))
            .rate_limit(RateLimit::per_second(1))
            .seed(7)
            .build()
            .unwrap();
    let first = policy.read(|_| async { Err::<(), _>(Busy) }).await;
    match first {
        Err(Failure::Rejected {
            rejection: Rejection::RateLimited { retry_in },
            attempts: 1,
            last_error: Some(Busy),
        }) => {
            assert!(retry_in > Duration::ZERO && retry_in <= Duration::from_secs(1), "{retry_in:?}");
        }
        other => panic!("{other:?}"),
    }
    let refused = policy.read(|_| async { Ok::<_, Busy>(()) }).await.unwrap_err();
    assert_eq!((refused.attempts(), refused.error_type()), (0, "rate_limited"));
    assert!(refused.is_deferrable(), "a keyed write refused unsent may go to the durable queue");
}

/// The wait for a permit is part of the worst case (R-RES-RE-4).
#[test]
fn the_worst_case_includes_the_waits() {
    let without =
        Policy::builder("pay").retry(Retry::attempts(3)).timeout(Timeout::aggressive(Duration::from_secs(1)));
    let with = without.clone().rate_limit(RateLimit::per_second(10).wait(Duration::from_millis(500)));
    assert_eq!(with.worst_case(), without.worst_case() + Duration::from_millis(1500));
    let timeline = with.timeline();
    assert_eq!(timeline.attempts[0].start, Duration::from_millis(500));
    assert!(timeline.attempts.iter().all(|a| a.permit_wait == Duration::from_millis(500)));
    let refused =
        without.rate_limit(RateLimit::per_second(10).wait(Duration::from_secs(10))).build().unwrap_err();
    assert!(refused.breaks(ballast::Rule::Re4), "{refused}");
}

/// What happens to the limiter, one step at a time.
#[derive(Debug, Clone)]
enum Step {
    /// Time passes.
    Wait(u64),
    /// Attempts are sent, as many as the limiter grants.
    Send(u32),
    /// The system throttles.
    Throttle,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![(1u64..3_000).prop_map(Step::Wait), (1u32..200).prop_map(Step::Send), Just(Step::Throttle)]
}

/// The adaptive rule as its documentation states it, in plain floats.
struct Model {
    ceiling: f64,
    decided: f64,
    decided_at: f64,
    /// (opened at, granted then, throttles) of the open window. Times are
    /// whole durations, as the limiter keeps them: in floats, 1.545 s -
    /// 0.545 s falls short of the one-second hold.
    window: Option<(Duration, u64, u64)>,
}

impl Model {
    fn rate(&self, now: f64) -> f64 {
        (self.decided * (1.0 + CLIMB * (now - self.decided_at))).min(self.ceiling)
    }

    fn throttled(&mut self, now: Duration, granted: u64) {
        let Some((opened, granted_then, throttles)) = self.window else {
            self.window = Some((now, granted, 1));
            return;
        };
        let throttles = throttles + 1;
        if now - opened < HOLD {
            self.window = Some((opened, granted_then, throttles));
            return;
        }
        let accepted =
            (granted - granted_then).saturating_sub(throttles) as f64 / (now - opened).as_secs_f64();
        let now = now.as_secs_f64();
        self.decided = (BETA * self.rate(now).min(accepted)).clamp(self.ceiling * FLOOR, self.ceiling);
        self.decided_at = now;
        self.window = None;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The limiter's rate follows the model through any run of sends,
    /// throttles and waits.
    #[test]
    fn the_adaptive_rate_follows_its_model(steps in prop::collection::vec(step(), 1..60)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        runtime.block_on(async {
            let policy = Policy::builder("api")
                .retry(Retry::attempts(1))
                .rate_limit(RateLimit::per_second(100).burst(20).adaptive())
                .build()
                .unwrap();
            let limiter = policy.rate_limiter().unwrap();
            let start = Instant::now();
            let mut model = Model { ceiling: 100.0, decided: 100.0, decided_at: 0.0, window: None };
            for step in steps {
                let now = || start.elapsed();
                match step {
                    Step::Wait(ms) => tokio::time::advance(Duration::from_millis(ms)).await,
                    Step::Send(n) => {
                        for _ in 0..n {
                            let _ = policy.read(|_| async { Ok::<_, Busy>(()) }).await;
                        }
                    }
                    Step::Throttle => {
                        limiter.throttled(None);
                        model.throttled(now(), limiter.snapshot().granted);
                    }
                }
                let (actual, expected) = (limiter.rate(), model.rate(now().as_secs_f64()));
                prop_assert!((actual - expected).abs() <= expected * 1e-6, "rate {actual} but the model says {expected}");
            }
            Ok(())
        })?;
    }
}

/// Paced background work ([`ballast::background_within`]) with `wait`, each
/// call timing its attempt: when it was sent, or how it was refused.
async fn paced_backlog(policy: &Policy, calls: usize, wait: Duration) -> Vec<Result<Instant, Failure<Busy>>> {
    let mut backlog = Vec::new();
    for _ in 0..calls {
        let policy = policy.clone();
        backlog.push(tokio::spawn(async move {
            let call = policy.read(|_| async { Ok::<_, Busy>(Instant::now()) });
            ballast::background_within(wait, call).await
        }));
        // Queued in the order they came.
        tokio::task::yield_now().await;
    }
    let mut out = Vec::new();
    for call in backlog {
        out.push(call.await.unwrap());
    }
    out
}

/// A backlog is not refused for want of a permit: each delivery waits its
/// turn and the whole is sent at the limit's rate, first come first served.
#[tokio::test(start_paused = true)]
async fn a_paced_backlog_is_sent_at_the_limits_rate_and_none_is_refused() {
    let policy = Policy::builder("sms")
        .rate_limit(RateLimit::per_second(10).burst(2))
        .timeout(Timeout::cooperative(Duration::from_secs(1)).total(Duration::from_secs(2)))
        .build()
        .unwrap();
    let start = Instant::now();
    let sent: Vec<Instant> =
        paced_backlog(&policy, 50, Duration::from_secs(30)).await.into_iter().map(Result::unwrap).collect();
    // A burst of 2, then one every 100 ms: the last at 4.8 s, though each
    // call's total timeout is 2 s — it counts from the call's turn.
    let last = sent.iter().max().unwrap().duration_since(start);
    assert!(last >= Duration::from_millis(4_800) && last < Duration::from_millis(4_900), "{last:?}");
    assert!(sent.windows(2).all(|w| w[0] <= w[1]), "sent in the order they came");
    // Never three within an interval: a burst of 2 at 10/s.
    for (i, at) in sent.iter().enumerate().skip(2) {
        assert!(at.duration_since(sent[i - 2]) >= Duration::from_millis(99), "{i}: over the rate");
    }
    assert_eq!(policy.rate_limiter().unwrap().snapshot().limited, 0);
}

/// A turn that does not come within the bound is refused with nothing sent,
/// and says when a permit may come.
#[tokio::test(start_paused = true)]
async fn a_paced_call_whose_turn_does_not_come_in_time_is_refused_unsent() {
    let policy = Policy::builder("sms").rate_limit(RateLimit::per_second(1).burst(1)).build().unwrap();
    let out = paced_backlog(&policy, 5, Duration::from_millis(2_500)).await;
    let sent = out.iter().filter(|o| o.is_ok()).count();
    assert_eq!(sent, 3, "at 0, 1 and 2 s");
    for refused in out.iter().filter_map(|o| o.as_ref().err()) {
        match refused {
            Failure::Rejected { rejection: Rejection::RateLimited { retry_in }, attempts: 0, .. } => {
                assert!(*retry_in <= Duration::from_secs(1), "{retry_in:?}")
            }
            other => panic!("expected a rate-limit refusal, got {other:?}"),
        }
    }
}
