//! The generic cell rate algorithm (GCRA): one atomic "theoretical arrival
//! time" per system, advanced by one emission interval per permit, so a
//! permit costs one compare-and-swap and nothing is allocated or queued.
//!
//! A permit that is not due yet can be reserved: the arrival time moves on
//! at once and the caller sleeps until its permit's time, so callers that
//! wait are served in the order they reserved (as governor's and the
//! IETF's GCRA descriptions have it), and a caller that gives up wastes its
//! permit rather than anyone's turn.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::clock::{nanos, Clock};

/// One system's arrival time, on the limiter's [`Clock`].
#[derive(Debug)]
pub(crate) struct Gcra {
    clock: Clock,
    /// When the next permit is due, in ns since `start`, with a burst's
    /// tolerance still to be subtracted.
    tat: AtomicU64,
    /// Permits that may come at once.
    burst: u64,
    /// Permits handed out, ever.
    granted: AtomicU64,
}

/// What a caller gets: a permit now or after a wait, or how long until one
/// would be due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// Permit taken; send after this wait (zero: now).
    After(Duration),
    /// No permit within the wait allowed; the next is due in this long.
    Refused(Duration),
    /// A fleet's permits: none on hand, one is being asked for; wait at
    /// most this long for the grant, then take again.
    Pending(Duration),
}

impl Gcra {
    pub(crate) fn new(burst: u32) -> Self {
        Self {
            clock: Clock::new(),
            tat: AtomicU64::new(0),
            burst: u64::from(burst.max(1)),
            granted: AtomicU64::new(0),
        }
    }

    /// Nanoseconds since the limiter was made, as of the clock's last tick
    /// ([`Clock::coarse`]).
    pub(crate) fn now(&self) -> u64 {
        self.clock.coarse()
    }

    /// Takes a permit at `now` (a [coarse](Clock::coarse) reading) for a
    /// rate of one permit per `interval` ns, reserving it if it is due
    /// within `max_wait`.
    pub(crate) fn take(&self, now: u64, interval: u64, max_wait: Duration) -> Grant {
        self.take_at(now, || self.clock.precise(), interval, max_wait)
    }

    /// [`take`](Self::take), with `precise` read for the time when a permit
    /// is not due on `now`: a reading a tick late would refuse or delay
    /// what is due.
    fn take_at(&self, now: u64, precise: impl FnOnce() -> u64, interval: u64, max_wait: Duration) -> Grant {
        let tolerance = interval.saturating_mul(self.burst - 1);
        let max_wait = nanos(max_wait);
        let mut tat = self.tat.load(Ordering::Relaxed);
        let (mut now, mut precise) = (now, Some(precise));
        loop {
            let from = tat.max(now);
            let due = from.saturating_sub(tolerance);
            let wait = due.saturating_sub(now);
            if wait > 0 {
                if let Some(precise) = precise.take() {
                    now = now.max(precise());
                    continue;
                }
            }
            if wait > max_wait {
                return Grant::Refused(Duration::from_nanos(wait));
            }
            match self.tat.compare_exchange_weak(
                tat,
                from.saturating_add(interval),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.granted.fetch_add(1, Ordering::Relaxed);
                    return Grant::After(Duration::from_nanos(wait));
                }
                Err(current) => tat = current,
            }
        }
    }

    /// No permit before `until` ns (a server's `Retry-After`, a quota spent).
    pub(crate) fn hold_until(&self, until: u64, interval: u64) {
        let tolerance = interval.saturating_mul(self.burst - 1);
        self.tat.fetch_max(until.saturating_add(tolerance), Ordering::AcqRel);
    }

    /// Every permit free again, as after a quiet spell.
    pub(crate) fn reset(&self) {
        self.tat.store(0, Ordering::Release);
    }

    /// Permits handed out so far.
    pub(crate) fn granted(&self) -> u64 {
        self.granted.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A permit at `now`, a reading as precise as the clock's.
    fn take(gcra: &Gcra, now: u64, interval: u64, max_wait: Duration) -> Grant {
        gcra.take_at(now, || now, interval, max_wait)
    }

    /// A coarse reading a tick late decides a permit only where it is due:
    /// one it would refuse or delay is decided on the precise reading, and
    /// one it finds due takes no precise reading at all.
    #[test]
    fn a_coarse_reading_a_tick_late_neither_refuses_nor_delays_a_due_permit() {
        let gcra = Gcra::new(1);
        let never = || panic!("a permit due on the coarse reading needs no precise one");
        assert_eq!(gcra.take_at(0, never, 10 * MS, Duration::ZERO), Grant::After(Duration::ZERO));
        // Due at 10 ms; the coarse clock says 7 ms, the precise one 10.
        assert_eq!(gcra.take_at(7 * MS, || 10 * MS, 10 * MS, Duration::ZERO), Grant::After(Duration::ZERO));
        // Due at 20 ms; a waiting caller at 17 ms (precise 18) waits 2 ms, not 3.
        let wait = Duration::from_millis(5);
        assert_eq!(gcra.take_at(17 * MS, || 18 * MS, 10 * MS, wait), Grant::After(Duration::from_millis(2)));
        // Not due on either reading: refused for the time left by the precise one.
        assert_eq!(
            gcra.take_at(21 * MS, || 22 * MS, 10 * MS, Duration::ZERO),
            Grant::Refused(Duration::from_millis(8))
        );
        assert_eq!(gcra.granted(), 3);
    }

    #[test]
    fn a_burst_then_one_permit_per_interval() {
        let gcra = Gcra::new(3);
        for _ in 0..3 {
            assert_eq!(take(&gcra, 0, 10 * MS, Duration::ZERO), Grant::After(Duration::ZERO));
        }
        assert_eq!(take(&gcra, 0, 10 * MS, Duration::ZERO), Grant::Refused(Duration::from_millis(10)));
        assert_eq!(take(&gcra, 10 * MS, 10 * MS, Duration::ZERO), Grant::After(Duration::ZERO));
        assert_eq!(take(&gcra, 10 * MS, 10 * MS, Duration::ZERO), Grant::Refused(Duration::from_millis(10)));
        assert_eq!(gcra.granted(), 4);
    }

    #[test]
    fn a_wait_reserves_permits_in_turn() {
        let gcra = Gcra::new(1);
        let wait = Duration::from_millis(25);
        assert_eq!(take(&gcra, 0, 10 * MS, wait), Grant::After(Duration::ZERO));
        assert_eq!(take(&gcra, 0, 10 * MS, wait), Grant::After(Duration::from_millis(10)));
        assert_eq!(take(&gcra, 0, 10 * MS, wait), Grant::After(Duration::from_millis(20)));
        assert_eq!(take(&gcra, 0, 10 * MS, wait), Grant::Refused(Duration::from_millis(30)), "past the wait");
    }

    /// Two threads racing for permits at the same instant: exactly the
    /// burst is handed out, then one per interval, whoever asks.
    #[test]
    fn racing_threads_never_get_more_than_the_limit() {
        let gcra = std::sync::Arc::new(Gcra::new(100));
        let race = |now: u64| {
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let gcra = std::sync::Arc::clone(&gcra);
                    std::thread::spawn(move || {
                        (0..50_000)
                            .filter(|_| matches!(take(&gcra, now, 10 * MS, Duration::ZERO), Grant::After(_)))
                            .count()
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).sum::<usize>()
        };
        assert_eq!(race(0), 100, "the burst");
        assert_eq!(race(1_000 * MS), 100, "a second later: 100 more at 10 ms each");
        assert_eq!(gcra.granted(), 200);
    }

    #[test]
    fn a_hold_puts_off_every_permit() {
        let gcra = Gcra::new(2);
        gcra.hold_until(100 * MS, 10 * MS);
        assert_eq!(take(&gcra, 0, 10 * MS, Duration::ZERO), Grant::Refused(Duration::from_millis(100)));
        assert_eq!(take(&gcra, 100 * MS, 10 * MS, Duration::ZERO), Grant::After(Duration::ZERO));
        // After a hold the rate resumes one permit at a time, not with a burst.
        assert_eq!(take(&gcra, 100 * MS, 10 * MS, Duration::ZERO), Grant::Refused(Duration::from_millis(10)));
        // A hold that ends earlier than the permits already due changes nothing.
        gcra.hold_until(0, 10 * MS);
        assert_eq!(take(&gcra, 110 * MS, 10 * MS, Duration::ZERO), Grant::After(Duration::ZERO));
    }
}
