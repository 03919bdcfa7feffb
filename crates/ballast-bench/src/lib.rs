//! Benchmarks of ballast beside its peers. Nothing here is a dependency of a
//! ballast crate: peers are dependencies of this crate only.
//!
//! - `amplification`: load on a sick upstream for a naive retry client and
//!   ballast, on tokio's paused clock (deterministic).
//! - `success_path`: the stacks of the success-path comparison (the
//!   operation returns at once), shared by the `success_path` criterion bench
//!   (ns/call) and the `success_allocs` bin (heap allocations per call).
//! - `queue_bench`: throughput and latency of the durable queue on SQLite and
//!   PostgreSQL beside the bare SQL loop, for the `queue_bench` bin.
//! - `gateway_bench`: the overhead of one hop through ballast's gateway
//!   beside a direct call and nginx's `proxy_pass`, for the `gateway_bench` bin.

pub mod amplification;
pub mod gateway_bench;
pub mod queue_bench;
pub mod success_path;
