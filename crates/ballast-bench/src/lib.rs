//! Benchmarks of ballast beside its peers. Nothing here is a dependency of a
//! ballast crate: peers are dependencies of this crate only.
//!
//! - `amplification`: load on a sick upstream for a naive retry client and
//!   ballast, on tokio's paused clock (deterministic).

pub mod amplification;
