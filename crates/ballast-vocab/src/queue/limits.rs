//! Every default and bound of the queue, owned here and read from here by
//! whoever checks a configuration (`ballast lint`), so the checker and the
//! worker cannot disagree.

use std::time::Duration;

/// Attempts a task gets unless told otherwise (R-RES-RE-5: "after 10 failures").
pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;

/// The longest task kind, in bytes.
pub const MAX_KIND_LEN: usize = 128;

/// Polling interval when nothing wakes the worker earlier (R-RES-RE-5).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// How long a claim holds a task without a heartbeat unless
/// `ballast_queue::WorkerBuilder::lease` says otherwise: a
/// task whose worker died is claimable again this long after its last
/// heartbeat.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The shortest lease a worker takes: heartbeats go every third of the lease,
/// and below a second a busy machine or a slow commit loses leases of
/// handlers that are still running.
pub const MIN_LEASE: Duration = Duration::from_secs(1);

/// Handlers running at once when not configured.
pub const DEFAULT_CONCURRENCY: usize = 200;

/// Tasks claimed per round trip at most when not configured: half the
/// default concurrency, so a worker keeps two round trips in flight. A round
/// trip's fixed costs (its commit, its statement's start, the worker's wake)
/// spread over 100 tasks drain a backlog about a tenth faster than over 50,
/// on SQLite and PostgreSQL alike (BENCHMARKS.md, "Durable queue").
pub const DEFAULT_BATCH: usize = 100;

/// How long a task whose attempts keep being refused before anything is sent
/// (a breaker open, a bulkhead full, a system not configured) may be
/// postponed, when nothing tighter bounds it (24 h).
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// How long completed and cancelled tasks are kept by default: a week.
pub const RETAIN_COMPLETED: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long failed tasks are kept by default: thirty days.
pub const RETAIN_FAILED: Duration = Duration::from_secs(30 * 24 * 3600);
