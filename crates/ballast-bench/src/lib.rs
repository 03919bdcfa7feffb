//! Benchmarks of ballast beside its peers. Nothing here is a dependency of a
//! ballast crate: peers are dependencies of this crate only.
//!
//! - `amplification`: load on a sick upstream for a naive retry client and
//!   ballast, on tokio's paused clock (deterministic).
//! - `policies`: the guide's policies every comparison measures.
//! - `success_path` (feature `peers`): the stacks of the success-path comparison (the
//!   operation returns at once), shared by the `success_path` criterion bench
//!   (ns/call) and the `success_allocs` bin (heap allocations per call).
//! - `contention`: calls per second of the guide's policy on a multi-thread
//!   runtime, one shared policy beside a policy per thread, for the
//!   `contention` bin.
//! - `failure_path` (feature `peers`): an error on every attempt, retried with backoff on the
//!   paused clock, through ballast and its peers, for the `failure_path`
//!   criterion bench.
//! - `queue_bench`: throughput and latency of the durable queue on SQLite and
//!   PostgreSQL beside the bare SQL loop, for the `queue_bench` bin.
//! - `gateway_bench`: the overhead of one hop through ballast's gateway
//!   beside a direct call and nginx's `proxy_pass`, for the `gateway_bench` bin.
//! - `fleet_bench`: the cost of a rate limit a fleet holds on PostgreSQL
//!   beside one each replica holds alone, for the `fleet_bench` bin.
//! - `throttling`: a partner API that answers 429 beyond 50 requests a
//!   second, called at 200 a second without a rate limit, with a fixed one
//!   and an adaptive one, on the paused clock, for the `throttling` bin.

pub mod amplification;
pub mod contention;
#[cfg(feature = "peers")]
pub mod failure_path;
pub mod fleet_bench;
pub mod gateway_bench;
pub mod policies;
pub mod queue_bench;
#[cfg(feature = "peers")]
pub mod success_path;
pub mod throttling;
