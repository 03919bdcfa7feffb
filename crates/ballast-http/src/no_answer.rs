//! An attempt that got no answer, as the tower layer and the reqwest
//! middleware report it: what the error's source chain says went wrong
//! below HTTP, its class under the front end's [`RetryOn`], and the error.
//! [`HttpError::Transport`](crate::HttpError::Transport) says the same for
//! an [`HttpSystem`](crate::HttpSystem), with the URL it was sent to.

use std::error::Error;
use std::fmt;

use ballast::{Class, Classification, Classify};

use crate::classify::TransportKind;
use crate::error::transport_message;
use crate::RetryOn;

/// An attempt that got no answer; its class decides whether it is tried
/// again (R-RES-RE-X2).
#[derive(Debug)]
pub struct NoAnswer<S> {
    /// What its source chain says went wrong below HTTP.
    pub kind: TransportKind,
    /// Its class under the front end's [`RetryOn`].
    pub class: Class,
    /// The error.
    pub source: S,
}

impl<S> NoAnswer<S> {
    /// `source`, of `kind`, classed under `retry_on`.
    pub(crate) fn new(kind: TransportKind, retry_on: RetryOn, source: S) -> Self {
        NoAnswer { kind, class: retry_on.transport_class(kind), source }
    }
}

impl<S: fmt::Display> fmt::Display for NoAnswer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", transport_message(self.kind), self.source)
    }
}

impl Error for NoAnswer<crate::BoxError> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(self.source.as_ref())
    }
}

#[cfg(feature = "middleware")]
impl Error for NoAnswer<reqwest_middleware::Error> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.source)
    }
}

impl<S> Classify for NoAnswer<S> {
    fn classify(&self) -> Classification {
        Classification::of(self.class)
    }
}
