//! The policy's behaviour as a caller relies on it, one rule at a time, on
//! tokio's paused clock.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ballast::{
    Backoff, Classification, Classify, Event, EventKind, Failure, Fallback, IdempotencyKey, OpKind, Policy,
    Retry, Rule, Severity, StopReason, Timeout, TimeoutKind,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, PartialEq)]
enum GatewayError {
    Unavailable,
    Invalid,
    Busy(Duration),
}

impl std::fmt::Display for GatewayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl Classify for GatewayError {
    fn classify(&self) -> Classification {
        match self {
            GatewayError::Unavailable => Classification::transient(),
            GatewayError::Invalid => Classification::permanent(),
            GatewayError::Busy(after) => Classification::transient().with_retry_after(*after),
        }
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A policy with a known seed and no budget, so tests see pure retry behaviour.
fn policy(attempts: u32) -> Policy {
    Policy::builder("gateway")
        .retry(Retry::attempts(attempts).without_budget())
        .timeout(Timeout::aggressive(secs(1)))
        .seed(7)
        .build()
        .unwrap()
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<EventKind>>>);

impl Recorder {
    fn listener(&self) -> impl Fn(&Event<'_>) + Send + Sync + 'static {
        let log = self.0.clone();
        move |e: &Event<'_>| log.lock().unwrap().push(e.kind)
    }

    fn kinds(&self) -> Vec<EventKind> {
        self.0.lock().unwrap().clone()
    }
}

#[tokio::test(start_paused = true)]
async fn transient_read_is_retried_up_to_the_limit() {
    let calls = AtomicU32::new(0);
    let result: Result<(), _> = policy(3)
        .read(|_| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(GatewayError::Unavailable)
        })
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let failure = result.unwrap_err();
    assert_eq!(failure.attempts(), 3);
    assert_eq!(failure.stop_reason(), StopReason::Exhausted);
    assert_eq!(failure.error(), Some(&GatewayError::Unavailable));
}

#[tokio::test(start_paused = true)]
async fn flaky_read_succeeds_on_a_later_attempt() {
    let calls = AtomicU32::new(0);
    let value = policy(3)
        .read(|ctx| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 2 {
                    Err(GatewayError::Unavailable)
                } else {
                    Ok(ctx.attempt())
                }
            }
        })
        .await
        .unwrap();
    assert_eq!(value, 3);
}

#[tokio::test(start_paused = true)]
async fn keyed_write_sees_the_same_key_on_every_attempt() {
    let key = IdempotencyKey::v5("order-1", "register-payment");
    let seen = Mutex::new(Vec::new());
    let result: Result<(), _> = policy(4)
        .write(&key, |ctx| {
            seen.lock().unwrap().push((ctx.kind(), ctx.key().cloned()));
            async { Err(GatewayError::Unavailable) }
        })
        .await;
    assert_eq!(result.unwrap_err().attempts(), 4);
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 4);
    assert!(seen.iter().all(|(kind, k)| *kind == OpKind::KeyedWrite && k.as_ref() == Some(&key)));
}

#[tokio::test(start_paused = true)]
async fn write_once_runs_exactly_once_on_a_transient_error() {
    let calls = AtomicU32::new(0);
    let result: Result<(), _> = policy(5)
        .write_once(|ctx| {
            assert!(ctx.key().is_none());
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(GatewayError::Unavailable) }
        })
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(result.unwrap_err().stop_reason(), StopReason::NotRetryable);
}

#[tokio::test(start_paused = true)]
async fn write_once_is_not_retried_after_its_timeout_either() {
    let calls = AtomicU32::new(0);
    let p = Policy::builder("gw").timeout(Timeout::aggressive(ms(100))).build().unwrap();
    let result: Result<(), Failure<GatewayError>> = p
        .write_once(|_| {
            calls.fetch_add(1, Ordering::SeqCst);
            std::future::pending()
        })
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(matches!(result, Err(Failure::Timeout { kind: TimeoutKind::Attempt, attempts: 1, .. })));
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_gives_exactly_one_attempt() {
    let calls = AtomicU32::new(0);
    let result: Result<(), _> = policy(5)
        .read(|_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(GatewayError::Invalid) }
        })
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let failure = result.unwrap_err();
    assert_eq!(failure.stop_reason(), StopReason::Permanent);
    assert!(!failure.is_deferrable());
}

#[test]
fn more_than_five_attempts_is_refused_naming_r_res_re_3() {
    let err = Policy::builder("gw").retry(Retry::attempts(6)).build().unwrap_err();
    assert!(err.breaks(Rule::Re3));
    assert!(err.to_string().contains("R-RES-RE-3"), "{err}");
    assert!(Policy::builder("gw").retry(Retry::attempts(0)).build().unwrap_err().breaks(Rule::Re3));
    let five = Policy::builder("gw").retry(Retry::attempts(5)).timeout(Timeout::aggressive(secs(2))).build();
    assert!(five.is_ok(), "{five:?}");
}

#[test]
fn build_reports_every_violation_at_once() {
    let err = Policy::builder("gw")
        .retry(Retry::attempts(9).backoff(Backoff::exponential(Duration::ZERO)))
        .timeout(Timeout::aggressive(secs(10)))
        .build()
        .unwrap_err();
    for rule in [Rule::Re3, Rule::ReX3, Rule::Re4] {
        assert!(err.breaks(rule), "{rule} missing from {err}");
    }
}

#[test]
fn worst_case_window_over_30s_is_an_error_over_5s_a_warning() {
    // 3 × 10 s attempts alone are 30 s; the waits push it over.
    let err = Policy::builder("gw").timeout(Timeout::aggressive(secs(10))).build().unwrap_err();
    assert!(err.breaks(Rule::Re4), "{err}");

    // The guide's own example: 3 × 5 s plus waits ≈ 17 s → allowed, with a warning.
    let p = Policy::builder("gw").build().unwrap();
    assert!(p.worst_case() > secs(15) && p.worst_case() < secs(20), "{:?}", p.worst_case());
    assert_eq!(p.warnings().len(), 1);
    assert_eq!(p.warnings()[0].rule, Some(Rule::Re4));
    assert_eq!(p.warnings()[0].severity, Severity::Warning);

    // A total deadline bounds the window.
    let p = Policy::builder("gw").timeout(Timeout::aggressive(secs(10)).total(secs(4))).build().unwrap();
    assert_eq!(p.worst_case(), secs(4));
    assert!(p.warnings().is_empty());
}

/// When each attempt of a read that always fails with `error` started.
async fn attempt_starts(p: &Policy, error: GatewayError) -> Vec<Instant> {
    let starts = Mutex::new(Vec::new());
    let _: Result<(), _> = p
        .read(|_| {
            starts.lock().unwrap().push(Instant::now());
            let error = error.clone();
            async move { Err(error) }
        })
        .await;
    starts.into_inner().unwrap()
}

#[tokio::test(start_paused = true)]
async fn gaps_between_attempts_lie_within_the_backoff_bounds() {
    let backoff = Backoff::exponential(ms(200)).max_delay(secs(1));
    for seed in 0..50 {
        let p = Policy::builder("gw")
            .retry(Retry::attempts(5).backoff(backoff).without_budget())
            .seed(seed)
            .build()
            .unwrap();
        let starts = attempt_starts(&p, GatewayError::Unavailable).await;
        assert_eq!(starts.len(), 5);
        for (n, pair) in starts.windows(2).enumerate() {
            let gap = pair[1] - pair[0];
            let bounds = backoff.bounds(n as u32);
            assert!(
                gap >= bounds.min && gap <= bounds.max + ms(1),
                "seed {seed} gap {n}: {gap:?} not in {bounds:?}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_when_it_fits_and_refused_when_it_does_not() {
    let p = Policy::builder("gw")
        .retry(Retry::attempts(2).without_budget())
        .timeout(Timeout::aggressive(secs(1)).total(secs(10)))
        .build()
        .unwrap();
    let starts = attempt_starts(&p, GatewayError::Busy(secs(3))).await;
    assert_eq!(starts.len(), 2);
    assert!(starts[1] - starts[0] >= secs(3), "waited the server's Retry-After");

    let calls = AtomicU32::new(0);
    let result: Result<(), _> = p
        .read(|_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(GatewayError::Busy(secs(60))) }
        })
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(result.unwrap_err().stop_reason(), StopReason::DeadlineWouldOverrun);
}

#[tokio::test(start_paused = true)]
async fn total_deadline_is_respected() {
    let p = Policy::builder("gw")
        .retry(Retry::attempts(5).backoff(Backoff::exponential(ms(500))).without_budget())
        .timeout(Timeout::aggressive(secs(2)).total(secs(3)))
        .seed(1)
        .build()
        .unwrap();
    let start = Instant::now();
    let result: Result<(), Failure<GatewayError>> = p.read(|_| std::future::pending()).await;
    let elapsed = start.elapsed();
    assert!(elapsed <= secs(3), "took {elapsed:?}");
    let failure = result.unwrap_err();
    assert!(matches!(failure, Failure::Timeout { .. }), "{failure:?}");
    assert!(matches!(failure.stop_reason(), StopReason::TotalTimeout | StopReason::DeadlineWouldOverrun));
}

#[tokio::test(start_paused = true)]
async fn aggressive_timeout_drops_the_attempt() {
    let p =
        Policy::builder("gw").retry(Retry::never()).timeout(Timeout::aggressive(secs(1))).build().unwrap();
    let finished = Arc::new(AtomicU32::new(0));
    let start = Instant::now();
    let result: Result<(), Failure<GatewayError>> = p
        .read(|_| {
            let finished = finished.clone();
            async move {
                tokio::time::sleep(secs(5)).await;
                finished.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .await;
    assert_eq!(start.elapsed(), secs(1));
    assert!(matches!(result, Err(Failure::Timeout { kind: TimeoutKind::Attempt, .. })));
    tokio::time::sleep(secs(10)).await;
    assert_eq!(finished.load(Ordering::SeqCst), 0, "the attempt was dropped, not left running");
}

#[tokio::test(start_paused = true)]
async fn cooperative_timeout_signals_the_attempt_and_awaits_it() {
    let p =
        Policy::builder("gw").retry(Retry::never()).timeout(Timeout::cooperative(secs(1))).build().unwrap();
    let start = Instant::now();
    let result: Result<(), Failure<GatewayError>> = p
        .read(|ctx| async move {
            ctx.cancelled().await;
            tokio::time::sleep(ms(300)).await; // cleaning up after the signal
            Err(GatewayError::Unavailable)
        })
        .await;
    assert_eq!(start.elapsed(), ms(1300), "waited for the attempt's own result");
    assert!(matches!(result, Err(Failure::Timeout { kind: TimeoutKind::Attempt, .. })));

    // A success that lands after the signal is kept: its side effect happened.
    let value = p
        .read(|ctx| async move {
            ctx.cancelled().await;
            Ok::<_, GatewayError>("done anyway")
        })
        .await
        .unwrap();
    assert_eq!(value, "done anyway");
}

#[tokio::test(start_paused = true)]
async fn cancellation_during_a_backoff_sleep_returns_at_once() {
    let p = Policy::builder("gw")
        .retry(Retry::attempts(3).backoff(Backoff::exponential(secs(2)).max_delay(secs(4))).without_budget())
        .build()
        .unwrap();
    let token = CancellationToken::new();
    let calls = AtomicU32::new(0);
    let canceller = {
        let token = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ms(10)).await;
            token.cancel();
        })
    };
    let start = Instant::now();
    let result: Result<(), _> = p
        .call(ballast::Operation::Read)
        .cancel_on(&token)
        .run(|_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(GatewayError::Unavailable) }
        })
        .await;
    canceller.await.unwrap();
    assert_eq!(start.elapsed(), ms(10), "returned the moment it was cancelled");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(matches!(result, Err(Failure::Cancelled { attempts: 1 })));
}

#[tokio::test(start_paused = true)]
async fn events_tell_the_story_of_a_call() {
    let rec = Recorder::default();
    let p = Policy::builder("gw")
        .retry(Retry::attempts(2).without_budget())
        .listener(rec.listener())
        .seed(3)
        .build()
        .unwrap();
    let calls = AtomicU32::new(0);
    p.read(|_| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                Err(GatewayError::Unavailable)
            } else {
                Ok(())
            }
        }
    })
    .await
    .unwrap();
    let names: Vec<_> = rec.kinds().iter().map(EventKind::name).collect();
    assert_eq!(
        names,
        ["attempt_started", "attempt_failed", "retry_scheduled", "attempt_started", "succeeded"]
    );
    assert!(matches!(rec.kinds()[4], EventKind::Succeeded { attempts: 2, op: OpKind::Read }));
}

#[tokio::test(start_paused = true)]
async fn fallback_sees_the_failure() {
    let p = policy(2);
    let v = p
        .read(|_| async { Err::<u32, _>(GatewayError::Unavailable) })
        .fallback(|f| (f.stop_reason() == StopReason::Exhausted).then_some(0))
        .await
        .unwrap();
    assert_eq!(v, 0);
    let kept = p
        .read(|_| async { Err::<u32, _>(GatewayError::Invalid) })
        .fallback(|f| f.is_unavailable().then_some(0))
        .await;
    assert_eq!(kept.unwrap_err().into_error(), Some(GatewayError::Invalid));
}

#[tokio::test(start_paused = true)]
async fn an_absurd_retry_after_or_deadline_is_refused_not_a_panic() {
    let p = Policy::builder("gw")
        .retry(Retry::attempts(2).without_budget())
        .timeout(Timeout::aggressive(secs(1)).total(Duration::MAX))
        .build()
        .unwrap();
    let result: Result<(), _> = p.read(|_| async { Err(GatewayError::Busy(Duration::MAX)) }).await;
    assert_eq!(result.unwrap_err().stop_reason(), StopReason::DeadlineWouldOverrun);
}

/// A judged call: an answer the judge finds a transient failure is retried
/// and counted by the breaker, a permanent one is not retried, and the call
/// ends on the last answer, as an answer.
#[tokio::test(start_paused = true)]
async fn judged_answers_are_retried_counted_and_handed_back() {
    use ballast::{Classification, Operation};
    use std::sync::atomic::{AtomicU32, Ordering};

    let policy = Policy::builder("crm")
        .retry(Retry::attempts(3))
        .breaker(ballast::Breaker::consecutive(3).half_open_after(Duration::from_secs(30)))
        .build()
        .unwrap();
    let judge = |status: &u16| match *status {
        503 => Some(Classification::transient()),
        404 => Some(Classification::permanent()),
        _ => None,
    };
    let calls = AtomicU32::new(0);
    let answers = [503u16, 503, 200];
    let answer = policy
        .call(Operation::Read)
        .judged(judge)
        .run(|ctx| {
            calls.fetch_add(1, Ordering::Relaxed);
            let status = answers[ctx.attempt() as usize - 1];
            async move { Ok::<u16, std::io::Error>(status) }
        })
        .await;
    assert_eq!((answer.unwrap(), calls.load(Ordering::Relaxed)), (200, 3), "two 503s retried");

    let calls = AtomicU32::new(0);
    let answer = policy
        .call(Operation::Read)
        .judged(judge)
        .run(|_| {
            calls.fetch_add(1, Ordering::Relaxed);
            async { Ok::<u16, std::io::Error>(404) }
        })
        .await;
    assert_eq!(
        (answer.unwrap(), calls.load(Ordering::Relaxed)),
        (404, 1),
        "a contract answer is not retried"
    );

    // Three more 503s: the last is the answer, and the breaker counted every one.
    let answer =
        policy.call(Operation::Read).judged(judge).run(|_| async { Ok::<u16, std::io::Error>(503) }).await;
    assert_eq!(answer.unwrap(), 503);
    assert_eq!(policy.breaker().unwrap().state(), ballast::BreakerState::Open);
    let refused =
        policy.call(Operation::Read).judged(judge).run(|_| async { Ok::<u16, std::io::Error>(200) }).await;
    assert!(matches!(refused, Err(ballast::Failure::Rejected { .. })), "no answer to give: {refused:?}");
}

/// A failure in front of the system (no token, the proxy down): retried by
/// its class, never counted by the system's breaker.
#[derive(Debug)]
struct NoToken;

impl Classify for NoToken {
    fn classify(&self) -> Classification {
        Classification::transient().outside_the_system()
    }
}

#[tokio::test(start_paused = true)]
async fn failures_outside_the_system_are_retried_but_leave_its_breaker_closed() {
    let policy = Policy::builder("bank")
        .retry(Retry::attempts(3).without_budget())
        .breaker(ballast::Breaker::consecutive(2))
        .seed(7)
        .build()
        .unwrap();
    for _ in 0..3 {
        let failure = policy.read(|_| async { Err::<(), _>(NoToken) }).await.unwrap_err();
        assert_eq!(failure.attempts(), 3, "retried as transient");
    }
    assert_eq!(policy.breaker().unwrap().state(), ballast::BreakerState::Closed);
    let failed = policy.read(|_| async { Err::<(), _>(GatewayError::Unavailable) }).await.unwrap_err();
    assert!(failed.is_unavailable() || failed.attempts() >= 2, "the system's own failures still count");
    assert_eq!(policy.breaker().unwrap().state(), ballast::BreakerState::Open);
}
