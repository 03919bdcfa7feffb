//! Error classification: only transient errors are retried (R-RES-RE-X2).
//!
//! There is deliberately no "retry everything" switch: an error type says, one
//! error at a time, whether the external system might answer differently if
//! asked again. Contract errors (a 4xx, a validation failure) are permanent.

use std::io;
use std::time::Duration;

use ballast_vocab::Class;

/// The class of an error plus an optional server-given wait (`Retry-After`),
/// and whether the system was throttling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classification {
    /// Transient or permanent.
    pub class: Class,
    /// How long the server asked us to wait before the next attempt.
    pub retry_after: Option<Duration>,
    /// The system said it was sent too much (an HTTP 429, a 503 with
    /// `Retry-After`): an adaptive [`RateLimit`](crate::RateLimit) lowers
    /// its rate. Independent of the class: a 429 that is not retried still
    /// tells the limiter.
    pub throttled: bool,
    /// The failure lies outside the system: nothing reached it because
    /// something in front of it stood in the way (its token endpoint, an
    /// egress proxy). The system's breaker counts it neither as a failure
    /// nor as a success — the system may be well — while retries and the
    /// durable hand-over treat it by its class.
    pub elsewhere: bool,
}

impl Classification {
    /// A transient failure: worth another attempt.
    pub const fn transient() -> Self {
        Self { class: Class::Transient, retry_after: None, throttled: false, elsewhere: false }
    }

    /// A permanent failure: never retried.
    pub const fn permanent() -> Self {
        Self { class: Class::Permanent, retry_after: None, throttled: false, elsewhere: false }
    }

    /// A failure of `class`, with nothing else said.
    ///
    /// ```
    /// use ballast::{Class, Classification};
    ///
    /// assert_eq!(Classification::of(Class::Transient), Classification::transient());
    /// ```
    pub const fn of(class: Class) -> Self {
        Self { class, retry_after: None, throttled: false, elsewhere: false }
    }

    /// Adds the wait the server asked for. The retry waits the larger of its
    /// backoff and this, or gives up if that would overrun the deadline.
    pub const fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// Marks the system as throttling (see [`throttled`](Self::throttled)).
    pub const fn throttling(mut self) -> Self {
        self.throttled = true;
        self
    }

    /// Marks the failure as lying outside the system (see
    /// [`elsewhere`](Self::elsewhere)).
    pub const fn outside_the_system(mut self) -> Self {
        self.elsewhere = true;
        self
    }

    /// Whether this is [`Class::Transient`].
    pub fn is_transient(&self) -> bool {
        self.class == Class::Transient
    }
}

/// Tells the policy whether an error is worth another attempt.
///
/// Implement it on the error type of your adapter, deciding at the adapter
/// boundary what is transient (R-RES-RE-X2):
///
/// ```
/// use ballast::{Classify, Classification};
///
/// #[derive(Debug)]
/// enum GatewayError { Unavailable(u16), Rejected(u16) }
///
/// impl Classify for GatewayError {
///     fn classify(&self) -> Classification {
///         match self {
///             GatewayError::Unavailable(_) => Classification::transient(),
///             GatewayError::Rejected(_) => Classification::permanent(),
///         }
///     }
/// }
/// assert!(GatewayError::Unavailable(503).classify().is_transient());
/// ```
pub trait Classify {
    /// The class of this error and any server-given wait.
    fn classify(&self) -> Classification;
}

/// Which answers are failures all the same: `None` for a success,
/// `Some(classification)` for an answer that is a failure (a 503, a 429) —
/// counted by the breaker, retried when transient, and kept: a call that
/// ends on such an answer returns it as `Ok`, for the caller to pass on.
pub trait Judge<T> {
    /// The verdict on one attempt's answer.
    fn judge(&self, answer: &T) -> Option<Classification>;
}

impl<T, F: Fn(&T) -> Option<Classification>> Judge<T> for F {
    fn judge(&self, answer: &T) -> Option<Classification> {
        self(answer)
    }
}

/// The judge of a call that was given none: every `Ok` is a success.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoJudge;

impl<T> Judge<T> for NoJudge {
    fn judge(&self, _: &T) -> Option<Classification> {
        None
    }
}

/// Refused, reset and aborted connections, timeouts, broken pipes and
/// unexpected EOF are transient; every other I/O error is permanent.
impl Classify for io::Error {
    fn classify(&self) -> Classification {
        use io::ErrorKind::*;
        match self.kind() {
            ConnectionRefused | ConnectionReset | ConnectionAborted | TimedOut | BrokenPipe
            | UnexpectedEof => Classification::transient(),
            _ => Classification::permanent(),
        }
    }
}

/// An operation or handler that cannot fail.
impl Classify for std::convert::Infallible {
    fn classify(&self) -> Classification {
        match *self {}
    }
}

impl<T: Classify + ?Sized> Classify for Box<T> {
    fn classify(&self) -> Classification {
        (**self).classify()
    }
}

impl<T: Classify + ?Sized> Classify for &T {
    fn classify(&self) -> Classification {
        (**self).classify()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_split_into_transient_and_permanent() {
        use io::ErrorKind::*;
        for kind in
            [ConnectionRefused, ConnectionReset, ConnectionAborted, TimedOut, BrokenPipe, UnexpectedEof]
        {
            assert_eq!(io::Error::from(kind).classify().class, Class::Transient, "{kind:?}");
        }
        for kind in [NotFound, PermissionDenied, InvalidInput, InvalidData, AlreadyExists, Other] {
            assert_eq!(io::Error::from(kind).classify().class, Class::Permanent, "{kind:?}");
        }
    }

    #[test]
    fn retry_after_is_carried() {
        let c = Classification::transient().with_retry_after(Duration::from_secs(2));
        assert_eq!(c.retry_after, Some(Duration::from_secs(2)));
        assert!(c.is_transient());
    }
}
