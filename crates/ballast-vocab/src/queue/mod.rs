//! The vocabulary of the durable queue: its schedule between attempts, the
//! backends a queue URL names, every default and bound — read by the queue
//! that enforces them and by `ballast lint` that checks against them.

mod backend;
mod backoff;
mod limits;
mod periodic;
mod schedule;

pub use backend::Backend;
pub use backoff::DurableBackoff;
pub use limits::{
    DEFAULT_BATCH, DEFAULT_CONCURRENCY, DEFAULT_LEASE, DEFAULT_MAX_AGE, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_POLL_INTERVAL, MAX_KIND_LEN, MIN_LEASE, RETAIN_COMPLETED, RETAIN_FAILED,
};
pub use periodic::{check_periodic_name, CatchUp, Schedule, ScheduleError, MAX_CATCH_UP, MIN_PERIOD};
pub use schedule::DurableSchedule;
