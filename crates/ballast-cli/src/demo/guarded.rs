//! The same workload through ballast: one [`HttpSystem`] for the gateway with
//! a policy per the guide (timings shortened for a demo), payments as keyed
//! writes handed over to the durable queue when in-memory retry gives up,
//! and a worker that delivers them later with the same key.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast::{Backoff, Breaker, Bulkhead, IdempotencyKey, Policy, PolicyBuilder, Retry, Timeout};
use ballast_http::delivery::DeliveryHandler;
use ballast_http::{HttpSystem, Request, DELIVERY_KIND};
use ballast_queue::{Alert, FailReason, FailedTask, Handover, HandoverError, Queue, RunSummary, Worker};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::workload::{Client, Workload};

/// The system's name, in the policy, spans and task payloads.
pub const SYSTEM: &str = "gateway";

/// Timings of the ballast side, shortened from the guide's example
/// (3 attempts, 500 ms backoff, breaker 50 % over 50 calls half-opening after
/// 30 s, bulkhead 8, 5 s timeout) so the whole story fits in seconds.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// The policy's attempt timeout (aggressive).
    pub attempt: Duration,
    /// The policy's total deadline over all in-memory attempts.
    pub total: Duration,
    /// Median first backoff delay between in-memory attempts.
    pub backoff: Duration,
    /// Cap of that backoff.
    pub backoff_cap: Duration,
    /// Breaker: wait before a probe.
    pub half_open_after: Duration,
    /// Worker: how often it looks for due tasks.
    pub poll: Duration,
    /// Worker: first delay between task attempts.
    pub task_backoff: Duration,
    /// Worker: cap of that delay.
    pub task_backoff_cap: Duration,
}

impl Timings {
    /// The demo's timings.
    pub const DEMO: Timings = Timings {
        attempt: Duration::from_millis(300),
        total: Duration::from_millis(1200),
        backoff: Duration::from_millis(100),
        backoff_cap: Duration::from_millis(400),
        half_open_after: Duration::from_secs(1),
        poll: Duration::from_millis(200),
        task_backoff: Duration::from_millis(250),
        task_backoff_cap: Duration::from_secs(2),
    };

    /// The gateway's policy: retry → breaker → bulkhead → timeout (R-RES-RE-2).
    pub fn policy(&self, seed: u64) -> Result<Policy, ballast::BuildError> {
        self.configure(Policy::builder(SYSTEM), seed).build()
    }

    /// Sets the demo's retry, breaker, bulkhead and timeouts on `policy`.
    fn configure(&self, policy: PolicyBuilder, seed: u64) -> PolicyBuilder {
        policy
            .retry(Retry::attempts(3).backoff(Backoff::exponential(self.backoff).max_delay(self.backoff_cap)))
            .breaker(Breaker::count(0.5, 20).half_open_after(self.half_open_after))
            .bulkhead(Bulkhead::new(8).queue(8))
            .timeout(Timeout::aggressive(self.attempt).total(self.total))
            .seed(seed)
    }
}

/// Counts tasks that failed for good — in a real service this would page
/// someone (R-RES-RE-5).
#[derive(Debug, Clone, Default)]
struct CountingAlert(Arc<AlertCounts>);

#[derive(Debug, Default)]
struct AlertCounts {
    failed: AtomicU64,
    /// Of those, the ones the gateway refused (a 4xx): never retried (R-RES-RE-X2).
    refused: AtomicU64,
}

impl Alert for CountingAlert {
    fn task_failed(&self, task: &FailedTask) {
        let counts = &self.0;
        counts.failed.fetch_add(1, Ordering::Relaxed);
        if task.reason == FailReason::Permanent {
            counts.refused.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What the ballast side reports beyond the gateway's ledger.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueTotals {
    /// Payments handed over to the durable queue.
    pub deferred: u64,
    /// Delivery tasks the worker completed.
    pub delivered: u64,
    /// Delivery tasks that failed for good and fired the alert.
    pub alerted: u64,
    /// Of those, the ones the gateway refused with a 4xx once it was back.
    pub refused: u64,
    /// Delivery tasks still waiting when the demo stopped waiting.
    pub pending: u64,
}

/// The ballast client of one run, with its worker running in the background.
pub struct Guarded {
    system: HttpSystem,
    queue: Queue,
    workload: Workload,
    deferred: AtomicU64,
    alerts: CountingAlert,
    stop: CancellationToken,
    worker: JoinHandle<RunSummary>,
}

impl Guarded {
    /// Builds the system for the gateway at `base` and starts a worker on `queue`.
    pub fn start(
        base: &str,
        queue: Queue,
        workload: Workload,
        timings: &Timings,
        seed: u64,
    ) -> anyhow::Result<Self> {
        let system = HttpSystem::builder(SYSTEM, base)
            .policy(|p| timings.configure(p, seed))
            // The gateway's contract: it deduplicates payments by Idempotency-Key
            // for longer than our whole window, queue included (R-RES-RE-1).
            .dedupes_by_key(true)
            .build()?;
        let alerts = CountingAlert::default();
        let worker = Worker::builder(queue.clone())
            .handler(DELIVERY_KIND, DeliveryHandler::new([system.clone()]))
            .poll_interval(timings.poll)
            .backoff(
                ballast_queue::DurableBackoff::exponential(timings.task_backoff)
                    .max_delay(timings.task_backoff_cap),
            )
            .alert(alerts.clone())
            .seed(seed)
            .build()?;
        let stop = CancellationToken::new();
        let worker = tokio::spawn(worker.run(stop.clone()));
        Ok(Self { system, queue, workload, deferred: AtomicU64::new(0), alerts, stop, worker })
    }

    /// Payments handed to the queue so far.
    pub fn deferred(&self) -> u64 {
        self.deferred.load(Ordering::Relaxed)
    }

    /// Delivery tasks waiting or running.
    pub async fn outstanding(&self) -> anyhow::Result<u64> {
        let stats = self.queue.stats().await?;
        Ok(stats
            .iter()
            .filter(|s| ballast_http::is_delivery_kind(&s.kind))
            .map(|s| s.pending + s.running)
            .sum())
    }

    /// Waits until the worker has nothing left to deliver, at most `limit`,
    /// calling `tick` with the tasks outstanding; then stops the worker.
    pub async fn finish(self, limit: Duration, tick: impl Fn(u64)) -> anyhow::Result<QueueTotals> {
        let deadline = Instant::now() + limit;
        let mut pending = self.outstanding().await?;
        while pending > 0 && Instant::now() < deadline {
            tick(pending);
            tokio::time::sleep(Duration::from_millis(100)).await;
            pending = self.outstanding().await?;
        }
        self.stop.cancel();
        let deferred = self.deferred();
        let summary = self.worker.await?;
        Ok(QueueTotals {
            deferred,
            delivered: summary.completed,
            alerted: self.alerts.0.failed.load(Ordering::Relaxed),
            refused: self.alerts.0.refused.load(Ordering::Relaxed),
            pending,
        })
    }
}

impl Client for Guarded {
    /// One order, the way the guide says.
    async fn order(&self, order: u32) {
        let w = &self.workload;
        // Made once per user action from the order, never per attempt: the
        // in-memory attempts and the durable task all carry this key.
        let key = IdempotencyKey::v5(format!("{}/order-{order}", w.run), "register-payment");
        let pay = Request::post("payments").json(&w.payment(order));
        match self.system.write_or_defer(&key, &self.queue, pay).await {
            Ok(Handover::Deferred { .. }) => {
                self.deferred.fetch_add(1, Ordering::Relaxed);
            }
            // Paid, or declined (a 4xx is the domain's to handle, never retried),
            // or the queue itself failed: all three are told to the caller.
            Ok(Handover::Done(_)) | Err(HandoverError::Failed(_) | HandoverError::Enqueue { .. }) => {}
        }
        // A read: retried on transient errors (R-RES-RE-1 a).
        let _order = self.system.read(Request::get(&Workload::order_path(order))).await;
        // An unkeyed write: one attempt whatever happens (R-RES-RE-X1). A lost
        // answer is reported to the caller as "unknown", not sent again.
        let patch = Request::patch(&Workload::customer_path(order)).json(&w.profile(order));
        let _profile = self.system.write_once(patch).await;
    }
}
