//! The worst case of one call, step by step: every attempt waits the longest
//! for its rate-limit permit and times out, and every wait is the longest
//! the backoff can draw, bounded by the total deadline. Its end is the
//! in-memory window that R-RES-RE-4 limits.

use std::time::Duration;

use crate::backoff::DelayBounds;
use crate::retry::Retry;
use crate::timeout::Timeout;

/// The most attempts a timeline follows: far past [`MAX_ATTEMPTS`](crate::MAX_ATTEMPTS),
/// so a refused policy is still explained, without looping `u32::MAX` times.
const MAX_FOLLOWED: u32 = 64;

/// The worst-case timeline of a call; see [`PolicyBuilder::timeline`](crate::PolicyBuilder::timeline).
///
/// ```
/// use std::time::Duration;
/// use ballast::{Backoff, Policy, Retry, Timeout};
///
/// let builder = Policy::builder("sber")
///     .retry(Retry::attempts(3).backoff(Backoff::exponential(Duration::from_millis(500)).max_delay(Duration::from_secs(2))))
///     .timeout(Timeout::aggressive(Duration::from_secs(1)).total(Duration::from_secs(4)));
/// let timeline = builder.timeline();
/// // Attempt 2 times out after 3.4 s; waiting up to 2 s more would pass the
/// // 4 s deadline, so in the worst case there is no attempt 3.
/// assert_eq!(timeline.attempts.len(), 2);
/// assert_eq!(timeline.cut_by_total, Some(3));
/// assert_eq!(timeline.window, Duration::from_secs(4));
/// assert_eq!(timeline.window, builder.worst_case());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    /// The attempts made in the worst case, in order.
    pub attempts: Vec<TimelineAttempt>,
    /// The first attempt the total deadline rules out in the worst case, if any.
    pub cut_by_total: Option<u32>,
    /// The worst-case in-memory window: every attempt's timeout plus the
    /// longest wait before each retry, bounded by the total deadline (R-RES-RE-4).
    pub window: Duration,
    /// The total deadline, if set.
    pub total: Option<Duration>,
}

/// One attempt of a [`Timeline`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineAttempt {
    /// The attempt, from 1.
    pub attempt: u32,
    /// When it starts, from the start of the call: after the longest wait
    /// for a rate-limit permit.
    pub start: Duration,
    /// The longest wait for its rate-limit permit, before `start`.
    pub permit_wait: Duration,
    /// When it times out (at the latest the total deadline).
    pub timeout_at: Duration,
    /// The wait before the next attempt, if there is one.
    pub wait: Option<DelayBounds>,
}

impl Timeline {
    /// The worst case of a call with these settings.
    pub(crate) fn new(retry: &Retry, timeout: &Timeout, permit_wait: Duration) -> Self {
        let total = timeout.total_deadline();
        let n = retry.max_attempts().clamp(1, MAX_FOLLOWED);
        let mut attempts = Vec::new();
        let mut start = Duration::ZERO;
        for attempt in 1..=n {
            start = start.saturating_add(permit_wait);
            if let Some(total) = total.filter(|t| attempt > 1 && start >= *t) {
                // Every later attempt would start past the deadline too, so the
                // whole window, whatever it adds up to, is the deadline.
                return Self { attempts, cut_by_total: Some(attempt), window: total, total: Some(total) };
            }
            let end = start.saturating_add(timeout.attempt());
            let timeout_at = total.map_or(end, |t| end.min(t));
            let wait = (attempt < n).then(|| retry.get_backoff().bounds(attempt - 1));
            attempts.push(TimelineAttempt { attempt, start, permit_wait, timeout_at, wait });
            start = end.saturating_add(wait.map_or(Duration::ZERO, |w| w.max));
        }
        let window = attempts.last().map_or(Duration::ZERO, |last| last.timeout_at);
        Self { attempts, cut_by_total: None, window, total }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Backoff;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The window is the sum R-RES-RE-4 speaks of, and the steps add up to it.
        #[test]
        fn the_window_is_every_timeout_plus_every_longest_wait_bounded_by_the_deadline(
            attempts in 0u32..8,
            attempt_ms in 1u64..10_000,
            first_ms in 1u64..2_000,
            cap_ms in 1u64..20_000,
            total_ms in proptest::option::of(1u64..60_000),
        ) {
            let backoff = Backoff::exponential(Duration::from_millis(first_ms)).max_delay(Duration::from_millis(cap_ms));
            let retry = Retry::attempts(attempts).backoff(backoff);
            let mut timeout = Timeout::aggressive(Duration::from_millis(attempt_ms));
            if let Some(total) = total_ms {
                timeout = timeout.total(Duration::from_millis(total));
            }
            let timeline = Timeline::new(&retry, &timeout, Duration::ZERO);

            let n = attempts.max(1);
            let sum = Duration::from_millis(attempt_ms) * n
                + (0..n - 1).map(|i| backoff.bounds(i).max).sum::<Duration>();
            let total = total_ms.map(Duration::from_millis);
            prop_assert_eq!(timeline.window, total.map_or(sum, |t| sum.min(t)));

            let made = timeline.attempts.len() as u32;
            prop_assert_eq!(timeline.cut_by_total, (made < n).then_some(made + 1));
            for (i, a) in timeline.attempts.iter().enumerate() {
                prop_assert_eq!(a.attempt, i as u32 + 1);
                prop_assert!(a.timeout_at <= timeline.window);
                prop_assert!(a.attempt == 1 || total.is_none_or(|t| a.start < t), "{a:?} starts past the deadline");
                if let Some(next) = timeline.attempts.get(i + 1) {
                    let wait = a.wait.expect("a wait before every later attempt");
                    prop_assert_eq!(next.start, a.start + Duration::from_millis(attempt_ms) + wait.max);
                }
            }
        }
    }
}
