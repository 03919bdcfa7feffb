//! The durable schedule: how many attempts a task gets, how long it waits
//! between them, how late a due task may be picked up, and how long a task
//! may keep being refused unsent. One value, read by the queue that enqueues,
//! the worker that runs, and `ballast lint` / `explain` that reason about it,
//! so the three cannot disagree (R-RES-RE-1, R-RES-RE-5).

use std::time::Duration;

use super::backoff::DurableBackoff;
use super::limits::{DEFAULT_MAX_AGE, DEFAULT_MAX_ATTEMPTS, DEFAULT_POLL_INTERVAL};

/// The durable retry schedule of a queue.
///
/// After durable attempt `n` fails, the worker waits
/// [`DurableBackoff::nominal`]`(n)` — `2^n s`, capped at 1 h — jittered into
/// the upper half, `[nominal / 2, nominal]`. A due task is picked up within
/// one `poll_interval`. An attempt refused unsent does not count against
/// `max_attempts` (`ballast_queue::TaskContext::not_attempted`);
/// such postponements are bounded by `max_age` (or, for a keyed write, by
/// its key's TTL).
///
/// A `ballast_queue::Queue` carries one (`Queue::with_schedule`): every task
/// it enqueues without its own `max_attempts` gets this schedule's, and a
/// `Worker` built on it polls and backs off by it.
///
/// ```
/// use std::time::Duration;
/// use ballast_vocab::queue::DurableSchedule;
///
/// let schedule = DurableSchedule::default();
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
    /// The backoff between durable attempts.
    pub backoff: DurableBackoff,
    /// How long a task refused unsent may keep being postponed.
    pub max_age: Duration,
}

impl Default for DurableSchedule {
    /// The guide's schedule: 10 attempts, `2^n s` capped at 1 h, polled every 5 s, 24 h at most unsent.
    fn default() -> Self {
        Self {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            poll_interval: DEFAULT_POLL_INTERVAL,
            backoff: DurableBackoff::default(),
            max_age: DEFAULT_MAX_AGE,
        }
    }
}

impl DurableSchedule {
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
    /// `window` to still be deduplicated on its last counted retry: the
    /// first call, then every durable attempt (each runs the policy again, up
    /// to `window`), then the waits between them:
    /// `window + max_attempts · window + waits_total()`.
    pub fn key_lifetime(&self, window: Duration) -> Duration {
        window.saturating_add(window.saturating_mul(self.max_attempts)).saturating_add(self.waits_total())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_past_the_cap_are_added_at_once() {
        let schedule = DurableSchedule { max_attempts: u32::MAX, ..DurableSchedule::default() };
        // Reaches the 1 h cap at n = 12 and stays there: computed without looping 4 billion times.
        assert!(schedule.waits_total() > Duration::from_secs(3600 * 1_000_000));
        let one = DurableSchedule { max_attempts: 1, ..DurableSchedule::default() };
        assert_eq!(one.waits_total(), Duration::ZERO);
        assert_eq!(one.key_lifetime(Duration::from_secs(3)), Duration::from_secs(6));
    }
}
