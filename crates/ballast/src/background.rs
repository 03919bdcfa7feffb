//! Calls no caller waits for — a durable queue's deliveries — marked so the
//! bulkhead lets them wait for a slot instead of refusing them, while the
//! slots it [reserves for live calls](crate::Bulkhead::reserve_live) stay
//! free for callers who do wait.

use std::future::Future;

tokio::task_local! {
    static BACKGROUND: ();
}

/// Runs `call` as background work: each of its policy calls waits, within
/// its total deadline, for a bulkhead slot outside the share reserved for
/// live calls, instead of being refused `BulkheadFull` when the bulkhead is
/// busy. A worker delivering a backlog wraps each delivery in it, so the
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
    BACKGROUND.scope((), call).await
}

/// Whether the running call is background work.
pub(crate) fn is_background() -> bool {
    BACKGROUND.try_with(|()| ()).is_ok()
}
