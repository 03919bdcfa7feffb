//! A policy's call made inside another policy's attempt does not retry:
//! retry inside an outer retry multiplies attempts (R-RES-RE-X4), retry inside
//! an outer breaker hides failures from it (R-RES-CB-1).

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ballast::{Backoff, Breaker, Event, EventKind, Failure, Policy, PolicyBuilder, Retry, Rule, StopReason};

fn refused() -> io::Error {
    io::Error::from(io::ErrorKind::ConnectionRefused)
}

fn retrying_builder(name: &str, attempts: u32) -> PolicyBuilder {
    Policy::builder(name).retry(
        Retry::attempts(attempts).backoff(Backoff::exponential(Duration::from_millis(100))).without_budget(),
    )
}

fn retrying(name: &str, attempts: u32) -> Policy {
    retrying_builder(name, attempts).build().expect("valid policy")
}

/// A retrying policy, and the rules its refused nested retries named.
fn recorded(name: &str, attempts: u32) -> (Policy, Arc<Mutex<Vec<Rule>>>) {
    let (seen, listener) = recorder();
    (retrying_builder(name, attempts).listener(listener).build().expect("valid policy"), seen)
}

/// Records the nested-retry events of a policy.
fn recorder() -> (Arc<Mutex<Vec<Rule>>>, impl Fn(&Event<'_>) + Send + Sync + 'static) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let listener = move |e: &Event<'_>| {
        if let EventKind::NestedRetryRefused { rule, .. } = e.kind {
            sink.lock().unwrap().push(rule);
        }
    };
    (seen, listener)
}

#[tokio::test(start_paused = true)]
async fn retry_inside_retry_makes_one_inner_attempt_per_outer_attempt() {
    let outer = retrying("crm", 3);
    let (inner, seen) = recorded("sms", 5);
    let inner_attempts = AtomicU32::new(0);
    let stops = Mutex::new(Vec::new());

    let result: Result<(), Failure<io::Error>> = outer
        .read(|_| async {
            let inner_result = inner
                .read(|_| async {
                    inner_attempts.fetch_add(1, Ordering::SeqCst);
                    Err::<(), _>(refused())
                })
                .await;
            let failure = inner_result.expect_err("the inner system is down");
            stops.lock().unwrap().push(failure.stop_reason());
            Err(refused())
        })
        .await;

    let failure = result.unwrap_err();
    assert_eq!(failure.attempts(), 3);
    assert_eq!(failure.stop_reason(), StopReason::Exhausted);
    assert_eq!(inner_attempts.load(Ordering::SeqCst), 3, "3 outer attempts × 1 inner attempt, not 3 × 5");
    assert_eq!(*stops.lock().unwrap(), vec![StopReason::Nested; 3]);
    assert_eq!(*seen.lock().unwrap(), vec![Rule::ReX4; 3]);
}

#[tokio::test(start_paused = true)]
async fn retry_inside_an_outer_breaker_is_refused_under_cb_1() {
    let outer =
        Policy::builder("gateway").retry(Retry::never()).breaker(Breaker::consecutive(5)).build().unwrap();
    let (inner, seen) = recorded("fx-rates", 3);
    let inner_attempts = AtomicU32::new(0);

    let result: Result<(), Failure<io::Error>> = outer
        .write_once(|_| async {
            inner
                .read(|_| async {
                    inner_attempts.fetch_add(1, Ordering::SeqCst);
                    Err::<(), _>(refused())
                })
                .await
                .map_err(|_| refused())
        })
        .await;

    assert!(result.is_err());
    assert_eq!(inner_attempts.load(Ordering::SeqCst), 1);
    assert_eq!(*seen.lock().unwrap(), vec![Rule::Cb1]);
}

#[tokio::test(start_paused = true)]
async fn calls_made_one_after_the_other_still_retry() {
    let first = retrying("crm", 3);
    let second = retrying("sms", 3);
    let attempts = AtomicU32::new(0);

    first.read(|_| async { Ok::<_, io::Error>(()) }).await.unwrap();
    let result = second
        .read(|_| async {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(refused())
        })
        .await;

    assert_eq!(result.unwrap_err().stop_reason(), StopReason::Exhausted);
    assert_eq!(attempts.load(Ordering::SeqCst), 3, "no mark is left behind by a finished attempt");
}

#[tokio::test(start_paused = true)]
async fn a_nested_call_that_succeeds_is_untouched() {
    let outer = retrying("crm", 3);
    let (seen, listener) = recorder();
    let inner = Policy::builder("sms").listener(listener).build().unwrap();

    let value = outer
        .read(|_| async { inner.read(|_| async { Ok::<_, io::Error>(7) }).await.map_err(|_| refused()) })
        .await
        .unwrap();

    assert_eq!(value, 7);
    // The refusal is announced when the inner call starts, success or not.
    assert_eq!(*seen.lock().unwrap(), vec![Rule::ReX4]);
}
