//! An error that is only a message and a class, for operations and task
//! handlers that have no error type of their own.

use std::borrow::Cow;
use std::fmt;

use crate::{Classification, Classify};

/// A message with the [`Classification`] it was given.
///
/// Where an adapter already has an error type, implement [`Classify`] on it;
/// where it has only a decision ("the card was declined: never retry"), this
/// says it without a type of its own.
///
/// ```
/// use ballast::{Classified, Classify};
///
/// let declined = Classified::permanent("402 Payment Required: card declined");
/// assert!(!declined.classify().is_transient());
/// assert_eq!(declined.to_string(), "402 Payment Required: card declined");
/// assert!(Classified::transient("gateway down").classify().is_transient());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    message: Cow<'static, str>,
    classification: Classification,
}

impl Classified {
    /// `message`, classified as `classification`.
    pub fn new(message: impl Into<Cow<'static, str>>, classification: Classification) -> Self {
        Self { message: message.into(), classification }
    }

    /// A failure that may pass: worth another attempt.
    pub fn transient(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(message, Classification::transient())
    }

    /// A contract error: never retried (R-RES-RE-X2).
    pub fn permanent(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(message, Classification::permanent())
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Classified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Classified {}

impl Classify for Classified {
    fn classify(&self) -> Classification {
        self.classification
    }
}
