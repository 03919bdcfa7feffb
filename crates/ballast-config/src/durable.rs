//! The durable queue's schedule, as the queue itself computes it: what takes
//! over a keyed write once its in-memory attempts are spent, and how long the
//! idempotency key must therefore live (R-RES-RE-1, R-RES-RE-5).

use std::time::Duration;

use crate::model::QueueSection;

/// The durable retry schedule of a `[queue]` section.
///
/// After durable attempt `n` fails, `ballast-queue` waits its
/// [`Backoff::nominal`](ballast_queue::DurableBackoff::nominal)`(n)` — `2^n s`, capped
/// at 1 h — jittered into the upper half, `[nominal / 2, nominal]`. A due
/// task is picked up within one `poll_interval`.
///
/// ```
/// use std::time::Duration;
/// use ballast_config::{model::QueueSection, DurableSchedule};
///
/// let schedule = DurableSchedule::from_section(&QueueSection::default());
/// assert_eq!(schedule.max_attempts, 10);
/// assert_eq!(schedule.wait_after(1), (Duration::from_secs(1), Duration::from_secs(2)));
/// // 2 + 4 + … + 512 s of waits, plus one poll interval per wait:
/// assert_eq!(schedule.waits_total(), Duration::from_secs(1022 + 9 * 5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableSchedule {
    /// Durable attempts before the task fails and the alert fires.
    pub max_attempts: u32,
    /// How late a due task may be picked up.
    pub poll_interval: Duration,
    /// The queue's backoff.
    pub backoff: ballast_queue::DurableBackoff,
}

impl DurableSchedule {
    /// The schedule a `[queue]` section configures (the queue's defaults for what it leaves out).
    pub fn from_section(queue: &QueueSection) -> Self {
        Self {
            max_attempts: queue
                .max_attempts
                .map_or(ballast_queue::DEFAULT_MAX_ATTEMPTS, |n| u32::try_from(n).unwrap_or(u32::MAX)),
            poll_interval: queue.poll_interval.map_or(ballast_queue::DEFAULT_POLL_INTERVAL, |d| d.get()),
            backoff: ballast_queue::DurableBackoff::default(),
        }
    }

    /// The shortest and longest wait after durable attempt `n` (from 1) fails.
    pub fn wait_after(&self, n: u32) -> (Duration, Duration) {
        let nominal = self.backoff.nominal(n);
        (nominal / 2, nominal)
    }

    /// The worst case of every wait between durable attempts, each plus one
    /// poll interval: `Σ_{n=1}^{max_attempts−1} (nominal(n) + poll_interval)`.
    pub fn waits_total(&self) -> Duration {
        let mut total = Duration::ZERO;
        let mut n = 1;
        while n < self.max_attempts {
            let step = self.wait_after(n).1.saturating_add(self.poll_interval);
            // Once the cap is reached every later wait is the same: add them at once
            // instead of looping up to u32::MAX times.
            if self.wait_after(n) == self.wait_after(n.saturating_add(1)) {
                return total.saturating_add(step.saturating_mul(self.max_attempts - n));
            }
            total = total.saturating_add(step);
            n += 1;
        }
        total
    }

    /// How long a key must live for a keyed write whose in-memory window is
    /// `window` to still be deduplicated on its last possible retry: the
    /// first call, then every durable attempt (each runs the policy again, up
    /// to `window`), then the waits between them:
    /// `window + max_attempts · window + waits_total()`.
    pub fn key_lifetime(&self, window: Duration) -> Duration {
        window.saturating_add(window.saturating_mul(self.max_attempts)).saturating_add(self.waits_total())
    }
}
