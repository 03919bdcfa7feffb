//! The composition retry → breaker → bulkhead → timeout, with the breaker,
//! the bulkhead and the retry budget in it, on tokio's paused clock.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ballast::{
    Backoff, Breaker, BreakerState, Bulkhead, Classification, Classify, Event, EventKind, Failure, Policy,
    Rejection, Retry, StopReason, Timeout,
};

#[derive(Debug, Clone, PartialEq)]
struct Down;

impl Classify for Down {
    fn classify(&self) -> Classification {
        Classification::transient()
    }
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Starts a call that holds its bulkhead slot until `release` is notified.
fn hold_a_slot(p: &Policy) -> (Arc<tokio::sync::Notify>, tokio::task::JoinHandle<Result<(), Failure<Down>>>) {
    hold_until_released(p, ())
}

/// Starts a read that answers `answer` once `release` is notified.
fn hold_until_released<T: Clone + Send + Sync + 'static>(
    p: &Policy,
    answer: T,
) -> (Arc<tokio::sync::Notify>, tokio::task::JoinHandle<Result<T, Failure<Down>>>) {
    let release = Arc::new(tokio::sync::Notify::new());
    let holder = {
        let (p, release) = (p.clone(), release.clone());
        tokio::spawn(async move {
            p.read(|_| {
                let (release, answer) = (release.clone(), answer.clone());
                async move {
                    release.notified().await;
                    Ok::<_, Down>(answer)
                }
            })
            .await
        })
    };
    (release, holder)
}

async fn dead_upstream(p: &Policy, attempts: &AtomicU32) -> Result<(), Failure<Down>> {
    p.read(|_| {
        attempts.fetch_add(1, Ordering::SeqCst);
        async { Err(Down) }
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn every_attempt_is_recorded_by_the_breaker_and_an_open_breaker_stops_retry_at_once() {
    let opened = Arc::new(AtomicU32::new(0));
    let p = {
        let opened = opened.clone();
        Policy::builder("gw")
            .retry(Retry::attempts(5).without_budget())
            .timeout(Timeout::aggressive(secs(1)))
            .breaker(Breaker::consecutive(3).half_open_after(secs(30)))
            .listener(move |e: &Event<'_>| {
                if matches!(e.kind, EventKind::BreakerOpened { .. }) {
                    opened.fetch_add(1, Ordering::SeqCst);
                }
            })
            .build()
            .unwrap()
    };
    let attempts = AtomicU32::new(0);
    let failure = dead_upstream(&p, &attempts).await.unwrap_err();
    // 3 failed attempts = 3 failures recorded = open; the 4th attempt is refused.
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    assert_eq!(opened.load(Ordering::SeqCst), 1);
    assert!(failure.is_unavailable(), "{failure:?}");
    assert!(failure.is_deferrable());
    assert_eq!(failure.attempts(), 3);
    assert_eq!(failure.error(), Some(&Down), "the last error is kept");
    assert_eq!(p.breaker().unwrap().state(), BreakerState::Open);

    // Later calls never reach the operation and are not waited out.
    let start = tokio::time::Instant::now();
    let failure = dead_upstream(&p, &attempts).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    match failure {
        Failure::Rejected { rejection: Rejection::BreakerOpen { retry_in }, attempts: 0, .. } => {
            assert_eq!(retry_in, secs(30))
        }
        other => panic!("expected a breaker rejection, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn half_open_admits_one_probe_and_closes_on_its_success() {
    let p = Policy::builder("gw")
        .retry(Retry::never())
        .timeout(Timeout::aggressive(secs(2)))
        .breaker(Breaker::consecutive(1).half_open_after(secs(10)))
        .build()
        .unwrap();
    let breaker = p.breaker().unwrap();
    let _ = p.read(|_| async { Err::<(), _>(Down) }).await;
    assert_eq!(breaker.state(), BreakerState::Open);
    assert_eq!(breaker.next_probe_in(), Some(secs(10)));

    tokio::time::advance(secs(10)).await;
    let (go, probe) = hold_until_released(&p, "probe");
    tokio::task::yield_now().await;
    assert_eq!(breaker.state(), BreakerState::HalfOpen);
    let other = p.read(|_| async { Ok::<_, Down>("other") }).await.unwrap_err();
    assert!(
        matches!(other, Failure::Rejected { rejection: Rejection::BreakerHalfOpen { retry_in }, .. } if retry_in == secs(10)),
        "{other:?}"
    );
    go.notify_one();
    assert_eq!(probe.await.unwrap().unwrap(), "probe");
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(p.read(|_| async { Ok::<_, Down>(1) }).await.unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens_and_a_backoff_makes_the_next_wait_longer() {
    let p = Policy::builder("gw")
        .retry(Retry::never())
        .timeout(Timeout::aggressive(secs(1)))
        .breaker(
            Breaker::consecutive(1)
                .half_open_after(Backoff::exponential(secs(4)).max_delay(secs(600)))
                .probes(1),
        )
        .seed(11)
        .build()
        .unwrap();
    let breaker = p.breaker().unwrap();
    let mut waits = Vec::new();
    let _ = p.read(|_| async { Err::<(), _>(Down) }).await;
    for _ in 0..4 {
        let wait = breaker.next_probe_in().unwrap();
        waits.push(wait);
        tokio::time::advance(wait).await;
        let _ = p.read(|_| async { Err::<(), _>(Down) }).await; // the probe fails
        assert_eq!(breaker.state(), BreakerState::Open);
    }
    assert!(waits[3] > waits[0], "re-opening waits longer: {waits:?}");
}

#[tokio::test(start_paused = true)]
async fn isolate_holds_the_breaker_open_until_released() {
    let p = Policy::builder("gw").breaker(Breaker::consecutive(5)).build().unwrap();
    let breaker = p.breaker().unwrap();
    breaker.isolate();
    tokio::time::advance(secs(3600)).await;
    let r = p.read(|_| async { Ok::<_, Down>(()) }).await.unwrap_err();
    assert!(matches!(r, Failure::Rejected { rejection: Rejection::BreakerIsolated, .. }));
    breaker.release();
    assert_eq!(breaker.state(), BreakerState::Closed);
    p.read(|_| async { Ok::<_, Down>(()) }).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn snapshot_round_trip_restarts_with_the_breaker_open() {
    let make = || {
        Policy::builder("gw")
            .retry(Retry::never())
            .breaker(Breaker::consecutive(1).half_open_after(secs(30)))
            .build()
            .unwrap()
    };
    let before = make();
    let _ = before.read(|_| async { Err::<(), _>(Down) }).await;
    let json = serde_json::to_string(&before.breaker().unwrap().snapshot()).unwrap();

    let after = make();
    after.breaker().unwrap().restore(&serde_json::from_str(&json).unwrap());
    assert_eq!(after.breaker().unwrap().state(), BreakerState::Open);
    let calls = AtomicU32::new(0);
    let r = after
        .read(|_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Down>(()) }
        })
        .await;
    assert!(r.unwrap_err().is_unavailable());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let left = after.breaker().unwrap().next_probe_in().unwrap();
    assert!(left > secs(28) && left <= secs(30), "{left:?}");
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_is_a_success_for_the_breaker_unless_configured() {
    #[derive(Debug)]
    struct Invalid;
    impl Classify for Invalid {
        fn classify(&self) -> Classification {
            Classification::permanent()
        }
    }
    for (counts, expected) in [(false, BreakerState::Closed), (true, BreakerState::Open)] {
        let p = Policy::builder("gw")
            .breaker(Breaker::consecutive(2).permanent_is_failure(counts))
            .build()
            .unwrap();
        for _ in 0..3 {
            let _ = p.read(|_| async { Err::<(), _>(Invalid) }).await;
        }
        assert_eq!(p.breaker().unwrap().state(), expected);
    }
}

#[tokio::test(start_paused = true)]
async fn a_full_bulkhead_rejects_at_once_and_is_never_retried() {
    let p = Policy::builder("gw")
        .bulkhead(Bulkhead::new(1))
        .timeout(Timeout::aggressive(secs(5)))
        .build()
        .unwrap();
    let (release, holder) = hold_a_slot(&p);
    tokio::task::yield_now().await;
    assert_eq!(p.bulkhead_in_flight(), Some(1));
    let calls = AtomicU32::new(0);
    let r = p
        .read(|_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Down>(()) }
        })
        .await
        .unwrap_err();
    assert!(matches!(r, Failure::Rejected { rejection: Rejection::BulkheadFull, attempts: 0, .. }));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    release.notify_one();
    holder.await.unwrap().unwrap();
    assert_eq!(p.bulkhead_in_flight(), Some(0));
}

#[tokio::test(start_paused = true)]
async fn waiting_in_the_bulkhead_queue_respects_the_total_deadline() {
    let p = Policy::builder("gw")
        .bulkhead(Bulkhead::new(1).queue(1))
        .timeout(Timeout::aggressive(secs(5)).total(secs(2)))
        .build()
        .unwrap();
    let holder = {
        let p = p.clone();
        tokio::spawn(async move { p.read(|_| async { Ok::<_, Down>(()) }).await })
    };
    let _hog = {
        let p = p.clone();
        tokio::spawn(async move { p.read(|_| std::future::pending::<Result<(), Down>>()).await })
    };
    holder.await.unwrap().unwrap();
    tokio::task::yield_now().await;
    let start = tokio::time::Instant::now();
    let r = p.read(|_| async { Ok::<_, Down>(()) }).await.unwrap_err();
    assert_eq!(start.elapsed(), secs(2));
    assert_eq!(r.stop_reason(), StopReason::TotalTimeout);
}

#[test]
fn bulkhead_never_lets_more_than_limit_run_on_many_threads() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    rt.block_on(async {
        let p = Policy::builder("gw").bulkhead(Bulkhead::new(3).queue(1000)).build().unwrap();
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..400)
            .map(|_| {
                let (p, running, peak) = (p.clone(), running.clone(), peak.clone());
                tokio::spawn(async move {
                    p.read(|_| {
                        let (running, peak) = (running.clone(), peak.clone());
                        async move {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(now, Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            running.fetch_sub(1, Ordering::SeqCst);
                            Ok::<_, Down>(())
                        }
                    })
                    .await
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        assert!(peak.load(Ordering::SeqCst) <= 3, "peak {}", peak.load(Ordering::SeqCst));
        assert_eq!(peak.load(Ordering::SeqCst), 3, "the limit was actually reached");
    });
}

/// 1,000 concurrent calls against a dead upstream, 3 attempts each.
async fn thousand_dead_calls(retry: Retry) -> (u32, Vec<Failure<Down>>) {
    let p = Policy::builder("gw").retry(retry).timeout(Timeout::aggressive(secs(1))).seed(5).build().unwrap();
    let attempts = AtomicU32::new(0);
    let results = futures_join_all((0..1000).map(|_| dead_upstream(&p, &attempts))).await;
    (attempts.load(Ordering::SeqCst), results.into_iter().map(Result::unwrap_err).collect())
}

/// A dependency-free join_all for the test.
async fn futures_join_all<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futs {
        set.push(Box::pin(f));
    }
    let outputs = Mutex::new(Vec::new());
    let mut pending: Vec<_> = set.into_iter().enumerate().collect();
    std::future::poll_fn(|cx| {
        pending.retain_mut(|(i, f)| match f.as_mut().poll(cx) {
            std::task::Poll::Ready(v) => {
                outputs.lock().unwrap().push((*i, v));
                false
            }
            std::task::Poll::Pending => true,
        });
        if pending.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    let mut out = outputs.into_inner().unwrap();
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, v)| v).collect()
}

#[tokio::test(start_paused = true)]
async fn the_retry_budget_caps_load_on_a_dead_upstream() {
    let (without, _) = thousand_dead_calls(Retry::attempts(3).without_budget()).await;
    assert_eq!(without, 3000);

    let (with, failures) = thousand_dead_calls(Retry::attempts(3)).await;
    let floor = ballast::Budget::default().floor() as u32;
    assert!(with <= 1000 * 11 / 10 + floor, "{with} attempts for 1000 calls");
    assert!(with > 1000, "the floor still lets some retries through");
    let exhausted = failures.iter().filter(|f| f.stop_reason() == StopReason::BudgetExhausted).count();
    assert!(exhausted > 0);
    assert!(failures.iter().all(|f| f.error() == Some(&Down)), "gives up with the last error");
    eprintln!("dead upstream, 1000 calls × 3 attempts: {without} attempts without budget, {with} with");
}

#[tokio::test(start_paused = true)]
async fn every_transition_is_an_event() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let p = {
        let log = log.clone();
        Policy::builder("gw")
            .retry(Retry::attempts(2).budget(ballast::Budget::ratio(0.0).min_per_sec(0)))
            .timeout(Timeout::aggressive(secs(1)))
            .breaker(Breaker::consecutive(2).half_open_after(secs(5)))
            .bulkhead(Bulkhead::new(1))
            .listener(move |e: &Event<'_>| log.lock().unwrap().push(e.kind.name()))
            .build()
            .unwrap()
    };
    let transitions = || -> Vec<&str> {
        log.lock()
            .unwrap()
            .iter()
            .copied()
            .filter(|n| n.starts_with("breaker") || n.starts_with("bu"))
            .collect()
    };
    // No budget at all: the first failure cannot be retried.
    let _ = p.read(|_| async { Err::<(), _>(Down) }).await;
    assert_eq!(transitions(), ["budget_exhausted"]);
    let _ = p.read(|_| async { Err::<(), _>(Down) }).await;
    tokio::time::advance(secs(5)).await;
    p.read(|_| async { Ok::<_, Down>(()) }).await.unwrap();
    p.breaker().unwrap().isolate();
    p.breaker().unwrap().release();
    let (release, holder) = hold_a_slot(&p);
    tokio::task::yield_now().await;
    let _ = p.read(|_| async { Ok::<_, Down>(()) }).await;
    release.notify_one();
    holder.await.unwrap().unwrap();
    assert_eq!(
        transitions(),
        [
            "budget_exhausted",
            "breaker_opened",
            "breaker_half_opened",
            "breaker_closed",
            "breaker_isolated",
            "breaker_closed",
            "bulkhead_rejected"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_call_waiting_in_the_bulkhead_queue_returns_at_once() {
    let p = Policy::builder("gw").bulkhead(Bulkhead::new(1).queue(1)).build().unwrap();
    let _hog = {
        let p = p.clone();
        tokio::spawn(async move { p.read(|_| std::future::pending::<Result<(), Down>>()).await })
    };
    tokio::task::yield_now().await;
    let token = tokio_util::sync::CancellationToken::new();
    let canceller = {
        let token = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            token.cancel();
        })
    };
    let start = tokio::time::Instant::now();
    let r = p
        .call(ballast::Operation::Read)
        .cancel_on(&token)
        .run(|_| async { Ok::<_, Down>(()) })
        .await
        .unwrap_err();
    canceller.await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(50));
    assert!(matches!(r, Failure::Cancelled { attempts: 0 }), "{r:?}");
}

#[tokio::test(start_paused = true)]
async fn a_listener_may_snapshot_the_breaker_when_it_opens() {
    let policy_cell: Arc<std::sync::OnceLock<Policy>> = Arc::default();
    let snapshots = Arc::new(Mutex::new(Vec::new()));
    let p = {
        let (cell, snapshots) = (policy_cell.clone(), snapshots.clone());
        Policy::builder("gw")
            .retry(Retry::never())
            .breaker(Breaker::consecutive(1))
            .listener(move |e: &Event<'_>| {
                if let (EventKind::BreakerOpened { .. }, Some(p)) = (e.kind, cell.get()) {
                    snapshots.lock().unwrap().push(p.breaker().unwrap().snapshot());
                }
            })
            .build()
            .unwrap()
    };
    assert!(policy_cell.set(p.clone()).is_ok());
    let _ = p.read(|_| async { Err::<(), _>(Down) }).await;
    let taken = snapshots.lock().unwrap().clone();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].state, BreakerState::Open);
}

/// Starts a background read that holds its slot until `release` is notified.
fn hold_in_background(
    p: &Policy,
    release: &Arc<tokio::sync::Notify>,
) -> tokio::task::JoinHandle<Result<(), Failure<Down>>> {
    let (p, release) = (p.clone(), release.clone());
    tokio::spawn(async move {
        ballast::background(p.read(|_| {
            let release = release.clone();
            async move {
                release.notified().await;
                Ok::<_, Down>(())
            }
        }))
        .await
    })
}

#[tokio::test(start_paused = true)]
async fn background_calls_wait_for_slots_and_leave_the_live_share_free() {
    // 4 slots, one kept for live calls: at most 3 background calls run.
    let p = Policy::builder("gw")
        .bulkhead(Bulkhead::new(4).reserve_live(0.25))
        .timeout(Timeout::aggressive(secs(20)).total(secs(20)))
        .build()
        .unwrap();
    let releases: Vec<_> = (0..5).map(|_| Arc::new(tokio::sync::Notify::new())).collect();
    let background: Vec<_> = releases.iter().map(|r| hold_in_background(&p, r)).collect();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(p.bulkhead_in_flight(), Some(3), "two background calls wait, none is refused");
    assert!(background.iter().all(|b| !b.is_finished()));

    // The live share is there for a caller, at once.
    let (live_release, live) = hold_a_slot(&p);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(p.bulkhead_in_flight(), Some(4));
    // With every slot taken, a live call is refused as before (no queue).
    let refused = p.read(|_| async { Ok::<_, Down>(()) }).await.unwrap_err();
    assert!(matches!(refused, Failure::Rejected { rejection: Rejection::BulkheadFull, .. }));

    // A slot freed by the live call is not taken by a waiting background
    // call (it is the live share); one freed by a background call is.
    live_release.notify_one();
    live.await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(p.bulkhead_in_flight(), Some(3));
    for release in &releases {
        release.notify_one();
        tokio::time::sleep(Duration::from_millis(10)).await;
        release.notify_one();
    }
    for b in background {
        b.await.unwrap().unwrap();
    }
    assert_eq!(p.bulkhead_in_flight(), Some(0));
}

/// An open breaker with a long `half_open_after` lets background work (a
/// durable delivery) probe after `BACKGROUND_PROBE_AFTER`: refused before
/// it with the time to that probe, let through after it — and its success
/// closes the breaker for live calls too, which alone would wait 30 s.
#[tokio::test(start_paused = true)]
async fn background_work_probes_an_open_breaker_within_seconds() {
    use ballast::breaker::BACKGROUND_PROBE_AFTER;
    let p = Policy::builder("gw")
        .retry(Retry::never())
        .breaker(Breaker::consecutive(1).half_open_after(secs(30)))
        .build()
        .unwrap();
    let breaker = p.breaker().unwrap();
    let _ = p.read(|_| async { Err::<(), _>(Down) }).await;
    assert_eq!(breaker.state(), BreakerState::Open);

    let early = ballast::background(p.read(|_| async { Ok::<_, Down>(()) })).await.unwrap_err();
    assert!(
        matches!(early, Failure::Rejected { rejection: Rejection::BreakerOpen { retry_in }, .. } if retry_in == BACKGROUND_PROBE_AFTER),
        "{early:?}"
    );
    tokio::time::advance(BACKGROUND_PROBE_AFTER).await;
    let live = p.read(|_| async { Ok::<_, Down>(()) }).await.unwrap_err();
    assert!(
        matches!(live, Failure::Rejected { rejection: Rejection::BreakerOpen { retry_in }, .. } if retry_in == secs(30) - BACKGROUND_PROBE_AFTER),
        "a live call waits out half_open_after: {live:?}"
    );
    // A failed background probe opens it again, for another few seconds of background.
    let _ = ballast::background(p.read(|_| async { Err::<(), _>(Down) })).await;
    assert_eq!(breaker.state(), BreakerState::Open);
    tokio::time::advance(BACKGROUND_PROBE_AFTER).await;
    ballast::background(p.read(|_| async { Ok::<_, Down>(()) })).await.unwrap();
    assert_eq!(breaker.state(), BreakerState::Closed, "the probe's success closed it");
    p.read(|_| async { Ok::<_, Down>(()) }).await.unwrap();
}
