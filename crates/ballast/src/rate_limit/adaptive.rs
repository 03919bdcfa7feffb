//! The adaptive rule: a system that throttles (429, or 503 with
//! `Retry-After`) lowers its own rate, multiplicatively; calls that go
//! through raise it back, gradually — additive increase, multiplicative
//! decrease (AIMD), as TCP and the AWS SDKs' adaptive retry mode do.
//!
//! The rule, with its constants:
//!
//! - **Decrease.** The first throttle opens a window of at least [`HOLD`]
//!   (1 s); the first throttle after it closes the window with a decision:
//!   the rate becomes [`BETA`] (0.9) × the smaller of the current rate and
//!   the rate the system accepted in the window (permits granted less
//!   throttles, per second). A system that accepts 50 of the 100 calls a
//!   second it is sent is at 45 after one decision, not after seven
//!   halvings. Never below the floor, [`FLOOR`] (1/100) of the ceiling.
//! - **Increase.** While no throttle comes, the rate climbs linearly by
//!   [`CLIMB`] (2 %) of the rate last decided per second, back to the
//!   ceiling: from a decrease to where it was takes about 5 s, so a system
//!   is probed gently and spends most of its time near what it accepts.
//! - **Ceiling.** The configured rate, or the one a system announces in its
//!   `RateLimit-Policy` header, which also sets the rate at once.
//!
//! The rate is a function of time between decisions, so the path of an
//! ordinary permit reads it without a lock; decisions take one.

use std::time::Duration;

/// Decisions (decreases) come at most this often.
pub const HOLD: Duration = Duration::from_secs(1);
/// The multiplicative decrease.
pub const BETA: f64 = 0.9;
/// The additive increase per second, as a share of the rate last decided.
pub const CLIMB: f64 = 0.02;
/// The lowest rate, as a share of the ceiling.
pub const FLOOR: f64 = 0.01;

/// The adaptive state between two decisions; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Aimd {
    /// The highest rate, permits per second.
    pub ceiling: f64,
    /// The rate last decided, and when (ns on the limiter's clock).
    pub decided: f64,
    pub decided_at: u64,
    /// The open window, if a throttle opened one: when, the permits
    /// granted then, and the throttles since (that one included).
    pub window: Option<Window>,
}

/// Throttles being counted towards a decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Window {
    pub opened_at: u64,
    pub granted_then: u64,
    pub throttles: u64,
}

impl Aimd {
    pub(crate) fn new(ceiling: f64) -> Self {
        Self { ceiling, decided: ceiling, decided_at: 0, window: None }
    }

    /// The rate at `now` (ns): the last decision climbed since, up to the ceiling.
    pub(crate) fn rate_at(&self, now: u64) -> f64 {
        let since = now.saturating_sub(self.decided_at) as f64 / 1e9;
        (self.decided * (1.0 + CLIMB * since)).min(self.ceiling)
    }

    /// A throttle at `now`, with `granted` permits handed out so far: the
    /// new rate if it closes a window, `None` if it opens or joins one.
    pub(crate) fn throttled(&mut self, now: u64, granted: u64) -> Option<f64> {
        let Some(mut window) = self.window else {
            self.window = Some(Window { opened_at: now, granted_then: granted, throttles: 1 });
            return None;
        };
        window.throttles += 1;
        let elapsed = now.saturating_sub(window.opened_at);
        if elapsed < super::clock::nanos(HOLD) {
            self.window = Some(window);
            return None;
        }
        let sent = granted.saturating_sub(window.granted_then);
        let accepted = sent.saturating_sub(window.throttles) as f64 / (elapsed as f64 / 1e9);
        let rate = (BETA * self.rate_at(now).min(accepted)).clamp(self.ceiling * FLOOR, self.ceiling);
        *self = Self { decided: rate, decided_at: now, window: None, ..*self };
        Some(rate)
    }

    /// The system announced its rate: the new ceiling, and the rate now.
    pub(crate) fn announced(&mut self, rate: f64, now: u64) {
        *self = Self { ceiling: rate, decided: rate, decided_at: now, window: None };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn climbs_two_percent_a_second_to_the_ceiling() {
        let mut aimd = Aimd::new(100.0);
        assert_eq!(aimd.rate_at(5 * S), 100.0);
        aimd.decided = 50.0;
        assert!((aimd.rate_at(S) - 51.0).abs() < 1e-9);
        assert!((aimd.rate_at(10 * S) - 60.0).abs() < 1e-9);
        assert_eq!(aimd.rate_at(1000 * S), 100.0);
    }

    #[test]
    fn a_throttle_sets_the_rate_below_what_was_accepted() {
        let mut aimd = Aimd::new(100.0);
        // 100 a second sent, every other one throttled: the first throttle
        // opens the window, the first one a second later decides 0.9 × 50.
        assert_eq!(aimd.throttled(S / 2, 50), None, "opens the window");
        for _ in 0..48 {
            assert_eq!(aimd.throttled(S, 90), None, "within the hold");
        }
        let rate = aimd.throttled(S + S / 2, 150).unwrap();
        assert!((rate - 45.0).abs() < 1e-9, "{rate}");
        assert_eq!(aimd.throttled(2 * S, 170), None, "a new window");
    }
}
