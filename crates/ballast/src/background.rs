//! Calls no caller waits for — a durable queue's deliveries — marked so the
//! bulkhead lets them wait for a slot instead of refusing them, while the
//! slots it [reserves for live calls](crate::Bulkhead::reserve_live) stay
//! free for callers who do wait; and, [paced](background_within), so they
//! wait their turn for a rate-limit permit too.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

tokio::task_local! {
    /// Until when the first attempt of a paced call may wait for its turn.
    static BACKGROUND: Option<Instant>;
}

/// Runs `call` as background work: each of its policy calls waits, within
/// its total deadline, for a bulkhead slot outside the share reserved for
/// live calls, instead of being refused `BulkheadFull` when the bulkhead is
/// busy. A worker delivering a backlog wraps each delivery in
/// [`background_within`], which waits for a rate-limit permit too, so the
/// backlog drains as fast as the system's limits allow.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use ballast::{background, Bulkhead, Policy};
///
/// let policy = Policy::builder("crm").bulkhead(Bulkhead::new(4)).build().unwrap();
/// let synced = background(policy.read(|_| async { Ok::<_, std::io::Error>("synced") })).await;
/// assert_eq!(synced.unwrap(), "synced");
/// # }
/// ```
pub async fn background<F: Future>(call: F) -> F::Output {
    BACKGROUND.scope(None, call).await
}

/// [`background`] work that waits its turn: the first attempt of each of
/// its policy calls waits up to `wait` (from now) for a bulkhead slot and a
/// rate-limit permit — in line, first come first served, so a backlog is
/// sent at the system's rate rather than refused — and the call's total
/// timeout counts from when it has both: waiting for its turn does not eat
/// the time its attempts have. Only if the turn does not come within `wait`
/// is the call refused ([`Rejection::RateLimited`](crate::Rejection::RateLimited),
/// or a total timeout for a slot) with nothing sent.
///
/// A durable worker paces each delivery with a `wait` well inside its
/// lease, so a delivery it holds is sent before another worker could claim it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// use std::time::Duration;
/// use ballast::{background_within, Policy, RateLimit};
///
/// let policy = Policy::builder("sms").rate_limit(RateLimit::per_second(10).burst(1)).build().unwrap();
/// let started = tokio::time::Instant::now();
/// for _ in 0..5 {
///     let sent = background_within(Duration::from_secs(10), policy.read(|_| async { Ok::<_, std::io::Error>(()) }));
///     sent.await.unwrap(); // never refused: each waits for its permit
/// }
/// assert!(started.elapsed() >= Duration::from_millis(400));
/// # }
/// ```
pub async fn background_within<F: Future>(wait: Duration, call: F) -> F::Output {
    let until = crate::timeout::deadline_after(Instant::now(), wait);
    BACKGROUND.scope(Some(until), call).await
}

/// How the running call is background work, if it is: `Some(None)` for
/// [`background`], `Some(Some(until))` for [`background_within`].
pub(crate) fn current() -> Option<Option<Instant>> {
    BACKGROUND.try_with(|until| *until).ok()
}
