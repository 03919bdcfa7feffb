//! [`RateLimit`]: a rate limit's settings — permits per period, burst,
//! wait, adaptive, how long the system's word may hold it, and whose limit
//! it is ([`Scope`]). The limiter that runs on them is
//! [`RateLimiter`](super::RateLimiter).

use std::time::Duration;

use crate::rules::{Rule, Violation};

/// The most permits a second a limit may allow (one per microsecond).
pub const MAX_RATE: f64 = 1_000_000.0;

/// How long a system's word can hold every attempt at most, unless
/// [`RateLimit::max_hold`] says otherwise.
pub const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(600);

/// Rate limit settings: permits per period, burst, wait, adaptive.
///
/// ```
/// use std::time::Duration;
/// use ballast::RateLimit;
///
/// // 100 attempts a second, 20 at once, an attempt may wait 50 ms for its
/// // turn, and the rate follows 429s and RateLimit headers.
/// let limit = RateLimit::per_second(100).burst(20).wait(Duration::from_millis(50)).adaptive();
/// assert_eq!(limit.rate(), 100.0);
/// assert_eq!(RateLimit::new(30, Duration::from_secs(60)).rate(), 0.5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    pub(super) permits: u32,
    pub(super) per: Duration,
    pub(super) burst: Option<u32>,
    pub(super) wait: Duration,
    pub(super) adaptive: bool,
    pub(super) max_hold: Duration,
    pub(super) scope: Scope,
}

/// Whose limit a [`RateLimit`] is: this process's, or a fleet's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scope {
    /// Each replica (process) holds the limit on its own: N replicas send N
    /// times the rate.
    #[default]
    Replica,
    /// The replicas of a fleet hold it together: permits come from a bucket
    /// they share ([`shared`](super::shared)), kept by `ballast-fleet` in PostgreSQL.
    Fleet,
}

impl Scope {
    /// `"replica"` or `"fleet"`, as a file writes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::Replica => "replica",
            Scope::Fleet => "fleet",
        }
    }
}

impl RateLimit {
    /// `permits` attempts per `per`; a burst of `permits` at once, no wait,
    /// not adaptive.
    pub const fn new(permits: u32, per: Duration) -> Self {
        Self {
            permits,
            per,
            burst: None,
            wait: Duration::ZERO,
            adaptive: false,
            max_hold: DEFAULT_MAX_HOLD,
            scope: Scope::Replica,
        }
    }

    /// `permits` attempts a second.
    pub const fn per_second(permits: u32) -> Self {
        Self::new(permits, Duration::from_secs(1))
    }

    /// How many attempts may go at once after a quiet spell (default: the
    /// permits of one period).
    pub const fn burst(mut self, burst: u32) -> Self {
        self.burst = Some(burst);
        self
    }

    /// How long an attempt may wait for a permit before it is refused
    /// (default: not at all). Counted in the worst-case window (R-RES-RE-4).
    pub const fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Follows the system: a throttle lowers the rate, calls that go
    /// through raise it back to the configured one (see [`adaptive`](super::adaptive)).
    pub const fn adaptive(mut self) -> Self {
        self.adaptive = true;
        self
    }

    /// The longest an adaptive limit holds every attempt on the system's
    /// word — a `Retry-After`, a quota spent until its reset — however long
    /// the system asks for (default [`DEFAULT_MAX_HOLD`], 10 minutes): a
    /// `Retry-After: 999999999` must not stall a system for good.
    pub const fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = max_hold;
        self
    }

    /// The longest hold.
    pub fn get_max_hold(&self) -> Duration {
        self.max_hold
    }

    /// Holds the limit for a whole fleet of replicas rather than for this
    /// process: the permits come from a bucket the replicas share (see
    /// [`shared`](super::shared)). Until something keeps that bucket — `ballast serve` on a
    /// PostgreSQL queue does — the limiter runs on a local one at the rate.
    pub const fn fleet(mut self) -> Self {
        self.scope = Scope::Fleet;
        self
    }

    /// Whose limit it is.
    pub fn get_scope(&self) -> Scope {
        self.scope
    }

    /// Permits per second.
    pub fn rate(&self) -> f64 {
        if self.per.is_zero() {
            return f64::INFINITY;
        }
        f64::from(self.permits) / self.per.as_secs_f64()
    }

    /// The burst.
    pub fn get_burst(&self) -> u32 {
        self.burst.unwrap_or(self.permits).max(1)
    }

    /// The wait for a permit.
    pub fn get_wait(&self) -> Duration {
        self.wait
    }

    /// Whether the rate adapts.
    pub fn is_adaptive(&self) -> bool {
        self.adaptive
    }

    pub(crate) fn check(&self, out: &mut Vec<Violation>) {
        let rate = self.rate();
        if self.permits == 0 || self.per.is_zero() {
            out.push(Violation::error(
                None,
                "rate_limit.rate",
                format!("the rate is {} per {:?}: no attempt or no period", self.permits, self.per),
                "give permits per period, e.g. rate = \"100/s\" or \"30/m\"",
            ));
        } else if rate > MAX_RATE {
            out.push(Violation::error(
                None,
                "rate_limit.rate",
                format!("the rate is {rate:.0}/s, over the limiter's {MAX_RATE:.0}/s"),
                "a limit that high limits nothing: leave rate_limit out",
            ));
        }
        if self.burst == Some(0) {
            out.push(Violation::error(
                None,
                "rate_limit.burst",
                "the burst is 0: no attempt would ever go".into(),
                "allow at least 1; the default is the permits of one period",
            ));
        }
        if self.wait > crate::WINDOW_WARNING {
            out.push(Violation::warning(
                Rule::Re4,
                "rate_limit.wait",
                format!("an attempt may wait {:?} for a permit, over 5 s", self.wait),
                "a call that waits that long holds its caller: let the limiter refuse sooner and hand keyed writes to the durable queue",
            ));
        }
    }
}
