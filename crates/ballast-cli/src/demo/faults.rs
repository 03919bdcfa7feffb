//! The gateway's bad day, decided by the seed: which request fails and how.
//!
//! Every decision is a pure function of (seed, order, endpoint, the request's
//! number at the gateway for that order and endpoint), so the naive client
//! and ballast meet exactly the same faults in the same places, and the same
//! seed replays the same day.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The gateway's three endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /payments`: charges the order (a keyed write for ballast).
    Payment,
    /// `GET /orders/{id}`: a read.
    Order,
    /// `PATCH /customers/{id}`: updates the profile and sends a notification
    /// (an unkeyed write).
    Profile,
}

impl Endpoint {
    fn salt(self) -> u64 {
        match self {
            Endpoint::Payment => 0x5041_594d,
            Endpoint::Order => 0x4f52_4452,
            Endpoint::Profile => 0x5052_4f46,
        }
    }
}

/// What the gateway does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Applies it and answers normally.
    None,
    /// Applies it, then answers 500: the side effect happened, the answer is lost.
    AppliedThen500,
    /// Closes the connection before applying: nothing happened.
    ResetBefore,
    /// Applies it, then closes the connection without answering.
    ResetAfter,
    /// Waits longer than any client's attempt timeout, then applies and answers.
    Slow,
}

/// Fault rates per endpoint, in percent of requests.
struct Rates {
    applied_then_500: u32,
    reset_before: u32,
    reset_after: u32,
    slow: u32,
}

impl Rates {
    fn of(endpoint: Endpoint) -> Rates {
        match endpoint {
            // High enough that a client retrying without a key visibly
            // double-charges within a hundred orders.
            Endpoint::Payment => Rates { applied_then_500: 8, reset_before: 3, reset_after: 4, slow: 3 },
            // A read has no side effect: "applied" faults are plain 500s and resets.
            Endpoint::Order => Rates { applied_then_500: 5, reset_before: 3, reset_after: 0, slow: 3 },
            Endpoint::Profile => Rates { applied_then_500: 8, reset_before: 2, reset_after: 4, slow: 3 },
        }
    }
}

/// Percent of orders whose payment the gateway refuses with 422.
const DECLINED_PERCENT: u32 = 5;

/// The seeded fault plan, plus the outage window every request meets.
#[derive(Debug, Clone, Copy)]
pub struct FaultPlan {
    seed: u64,
    /// When the outage starts, from the gateway's start.
    pub outage_start: Duration,
    /// How long every request gets 503.
    pub outage_len: Duration,
    /// How long a slow answer takes.
    pub slow: Duration,
}

impl FaultPlan {
    /// A plan for `seed` with the given outage window and slow-answer delay.
    pub fn new(seed: u64, outage_start: Duration, outage_len: Duration, slow: Duration) -> Self {
        Self { seed, outage_start, outage_len, slow }
    }

    /// Whether `at` (since the gateway started) falls in the outage.
    pub fn in_outage(&self, at: Duration) -> bool {
        at >= self.outage_start && at < self.outage_start + self.outage_len
    }

    /// Whether the gateway refuses every payment of `order` with 422.
    pub fn declined(&self, order: u32) -> bool {
        self.rng(order, 0x4445_434c, 0).random_range(0..100) < DECLINED_PERCENT
    }

    /// The fault for the `nth` request (from 1) the gateway receives for
    /// `order` at `endpoint`.
    pub fn fault(&self, order: u32, endpoint: Endpoint, nth: u32) -> Fault {
        let r = Rates::of(endpoint);
        let roll = self.rng(order, endpoint.salt(), nth).random_range(0..100);
        let mut edge = 0;
        for (rate, fault) in [
            (r.applied_then_500, Fault::AppliedThen500),
            (r.reset_before, Fault::ResetBefore),
            (r.reset_after, Fault::ResetAfter),
            (r.slow, Fault::Slow),
        ] {
            edge += rate;
            if roll < edge {
                return fault;
            }
        }
        Fault::None
    }

    fn rng(&self, order: u32, salt: u64, nth: u32) -> SmallRng {
        // splitmix-style mixing so neighbouring orders get unrelated streams.
        let mut x = self.seed ^ salt.rotate_left(32) ^ (u64::from(order) << 20) ^ u64::from(nth);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        SmallRng::seed_from_u64(x ^ (x >> 31))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(seed: u64) -> FaultPlan {
        FaultPlan::new(seed, Duration::from_secs(1), Duration::from_secs(2), Duration::from_millis(600))
    }

    #[test]
    fn the_same_seed_replays_the_same_day() {
        let (a, b) = (plan(7), plan(7));
        for order in 1..200 {
            assert_eq!(a.declined(order), b.declined(order));
            for nth in 1..4 {
                assert_eq!(a.fault(order, Endpoint::Payment, nth), b.fault(order, Endpoint::Payment, nth));
            }
        }
    }

    #[test]
    fn rates_are_roughly_as_configured() {
        let p = plan(42);
        let n = 20_000;
        let lost = (1..=n).filter(|&o| p.fault(o, Endpoint::Payment, 1) == Fault::AppliedThen500).count();
        let declined = (1..=n).filter(|&o| p.declined(o)).count();
        assert!((1200..2000).contains(&lost), "{lost}");
        assert!((700..1300).contains(&declined), "{declined}");
    }

    #[test]
    fn outage_is_a_half_open_window() {
        let p = plan(1);
        assert!(!p.in_outage(Duration::from_millis(999)));
        assert!(p.in_outage(Duration::from_secs(1)));
        assert!(!p.in_outage(Duration::from_secs(3)));
    }
}
