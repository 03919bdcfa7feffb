//! What a worker holds of each system's backlog: the deliveries waiting here
//! for their turn at the system's rate limit, at most what this replica's
//! share of the rate sends within the pace. One more is handed back to the
//! queue, for whichever worker has room — so a backlog spreads over the
//! live replicas, and one that dies strands only what it could send soon.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::HttpSystem;

/// The deliveries waiting on this worker, per system.
#[derive(Debug, Clone, Default)]
pub(super) struct Lines(Arc<Mutex<HashMap<String, usize>>>);

/// A delivery's place in its system's line here, given back when dropped.
#[derive(Debug)]
pub(super) struct Place {
    lines: Lines,
    system: String,
}

/// A delivery this worker does not hold: its system's line here is full.
#[derive(Debug, Clone, Copy)]
pub(super) struct Full {
    /// Deliveries waiting here already.
    pub waiting: usize,
    /// When it is looked at again.
    pub retry_in: Duration,
}

impl Lines {
    /// A place in `system`'s line, when this replica can send one more
    /// within `pace`: its share of the rate limit over `pace`, at least
    /// one. A system without a rate limit has no line.
    pub fn join(&self, system: &HttpSystem, pace: Duration) -> Result<Place, Full> {
        let room = system.policy().rate_limiter().map(|limiter| {
            let room = (limiter.share() * pace.as_secs_f64()).floor();
            if room.is_finite() && room >= 1.0 {
                room as usize
            } else {
                1
            }
        });
        let mut lines = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let waiting = lines.entry(system.name().to_owned()).or_default();
        if room.is_some_and(|room| *waiting >= room) {
            // About when this line has been sent, spread so the handed-back
            // ones do not come back at once.
            let retry_in = pace.mul_f64(rand::Rng::random_range(&mut rand::rng(), 0.2..0.6));
            return Err(Full { waiting: *waiting, retry_in });
        }
        *waiting += 1;
        Ok(Place { lines: self.clone(), system: system.name().to_owned() })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut lines = self.lines.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(waiting) = lines.get_mut(&self.system) {
            *waiting = waiting.saturating_sub(1);
            if *waiting == 0 {
                lines.remove(&self.system);
            }
        }
    }
}
