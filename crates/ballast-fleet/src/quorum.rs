//! The fleet breaker's rule, as a function of what one replica sees on one
//! tick (`ballast_fleet_breakers`, the live replicas' verdicts, its own
//! breaker) — so it is tested without a database or a clock:
//!
//! - **Opening.** The system opens for the fleet when `quorum` live
//!   replicas' own breakers are open. One replica whose own network path is
//!   broken opens only its own breaker: the others keep calling.
//! - **Open.** Every replica holds its breaker open, so no replica probes on
//!   its own. When the fleet's half-open time comes, one replica at a time
//!   takes the probe lease (a row in the database, [`PROBE_LEASE`] long) and
//!   lets its breaker probe.
//! - **The probe's end.** Its breaker closing closes the fleet (every
//!   replica's breaker closes); its breaker opening again reopens the fleet
//!   for another `half_open_after`. A lease on a replica no call reaches is
//!   given up after `PROBE_IDLE` and passes to another replica.

use std::time::Duration;

use ballast::BreakerState;

/// How long a replica holds the fleet's probe before another may.
pub const PROBE_LEASE: Duration = Duration::from_secs(5);

/// The fleet's breaker of one system, as the database has it, times
/// relative to the database's now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Fleet {
    pub open: bool,
    /// Time left until the fleet's probe (negative: past).
    pub half_open_in: f64,
    /// Whether this replica holds the probe lease, and whether any does.
    pub mine: bool,
    pub held: bool,
    /// Live replicas whose own breakers are open.
    pub opens: u32,
}

/// This replica's breaker of the system.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Local {
    pub state: BreakerState,
    /// Whether it moved to another state since the last tick.
    pub moved: bool,
    /// Whether the fleet holds it open (not its own verdict).
    pub held_by_fleet: bool,
}

/// What to do on this tick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Step {
    /// Nothing changes.
    Stay,
    /// Open the fleet: a quorum sees the system failing.
    OpenFleet,
    /// Try to take the probe lease (the fleet's half-open time has come).
    TakeProbe,
    /// This replica's probe succeeded: close the fleet.
    CloseFleet,
    /// This replica's probe failed: reopen the fleet.
    ReopenFleet,
    /// This replica holds the probe lease and no call came to probe with:
    /// pass the lease on (see `breakers::PROBE_IDLE`).
    PassProbe,
    /// Hold this replica's breaker open until the fleet's probe time (or
    /// the holder's lease) has passed.
    HoldOpen,
    /// Let this replica's breaker go: the fleet is closed.
    Release,
}

/// The step for this tick.
pub(crate) fn step(fleet: Fleet, local: Local, quorum: u32) -> Step {
    if !fleet.open {
        if fleet.opens >= quorum.max(1) {
            return Step::OpenFleet;
        }
        return if local.held_by_fleet { Step::Release } else { Step::Stay };
    }
    if fleet.mine {
        return match local.state {
            BreakerState::Closed => Step::CloseFleet,
            BreakerState::Open if local.moved => Step::ReopenFleet,
            _ => Step::Stay,
        };
    }
    if fleet.half_open_in <= 0.0 && !fleet.held {
        return Step::TakeProbe;
    }
    Step::HoldOpen
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOSED: Local = Local { state: BreakerState::Closed, moved: false, held_by_fleet: false };

    fn fleet(open: bool, half_open_in: f64, mine: bool, held: bool, opens: u32) -> Fleet {
        Fleet { open, half_open_in, mine, held, opens }
    }

    #[test]
    fn a_quorum_opens_the_fleet_and_one_replica_alone_does_not() {
        let own_open = Local { state: BreakerState::Open, moved: true, held_by_fleet: false };
        assert_eq!(step(fleet(false, 0.0, false, false, 1), own_open, 2), Step::Stay, "its own path only");
        assert_eq!(step(fleet(false, 0.0, false, false, 2), CLOSED, 2), Step::OpenFleet);
        assert_eq!(step(fleet(false, 0.0, false, false, 0), CLOSED, 0), Step::Stay, "a quorum is at least 1");
    }

    #[test]
    fn while_open_one_replica_probes_and_its_result_is_the_fleet_s() {
        assert_eq!(
            step(fleet(true, 12.0, false, false, 2), CLOSED, 2),
            Step::HoldOpen,
            "before the probe time"
        );
        assert_eq!(step(fleet(true, -0.1, false, false, 2), CLOSED, 2), Step::TakeProbe);
        assert_eq!(
            step(fleet(true, -0.1, false, true, 2), CLOSED, 2),
            Step::HoldOpen,
            "another holds the probe"
        );
        let probing = Local { state: BreakerState::HalfOpen, moved: true, held_by_fleet: false };
        assert_eq!(step(fleet(true, -0.1, true, true, 2), probing, 2), Step::Stay);
        let reopened = Local { state: BreakerState::Open, moved: true, held_by_fleet: false };
        assert_eq!(step(fleet(true, -0.1, true, true, 2), reopened, 2), Step::ReopenFleet);
        assert_eq!(step(fleet(true, -0.1, true, true, 2), CLOSED, 2), Step::CloseFleet);
        let held = Local { state: BreakerState::Open, moved: false, held_by_fleet: true };
        assert_eq!(step(fleet(false, 0.0, false, false, 0), held, 2), Step::Release, "the fleet closed");
    }
}
