//! Fallback: what to return when the policy could not get an answer.
//!
//! Unlike cockatiel's fallback, this one sees the failure, so it can tell
//! "system unavailable" from a contract error and decline the latter.

use std::future::Future;

use crate::Failure;

/// Adds `.fallback(..)` to any call through a [`Policy`](crate::Policy).
///
/// The fallback receives the failure and either supplies a value (`Some`)
/// or lets the failure through (`None`), so nothing is silently lost.
///
/// ```
/// use ballast::{Fallback, Policy};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let policy = Policy::builder("rates").build().unwrap();
/// let rate = policy
///     .read(|_| async { Err::<f64, _>(std::io::Error::from(std::io::ErrorKind::PermissionDenied)) })
///     .fallback(|failure| failure.is_unavailable().then_some(1.0))
///     .await;
/// assert!(rate.is_err(), "a permanent error is not papered over");
/// # }
/// ```
pub trait Fallback<T, E>: Future<Output = Result<T, Failure<E>>> + Sized {
    /// On failure, asks `f` for a value instead.
    fn fallback<G>(self, f: G) -> impl Future<Output = Result<T, Failure<E>>>
    where
        G: FnOnce(&Failure<E>) -> Option<T>,
    {
        async move {
            match self.await {
                Ok(v) => Ok(v),
                Err(failure) => f(&failure).ok_or(failure),
            }
        }
    }

    /// On failure, awaits `f` for a value instead (e.g. a cache read).
    fn fallback_async<G, Fut>(self, f: G) -> impl Future<Output = Result<T, Failure<E>>>
    where
        G: FnOnce(&Failure<E>) -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        async move {
            match self.await {
                Ok(v) => Ok(v),
                Err(failure) => f(&failure).await.ok_or(failure),
            }
        }
    }
}

impl<T, E, F: Future<Output = Result<T, Failure<E>>>> Fallback<T, E> for F {}
