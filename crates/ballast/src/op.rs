//! What an operation declares about itself, and what each attempt sees.

use tokio_util::sync::CancellationToken;

use crate::{IdempotencyKey, OpKind};

/// An operation as its caller declares it — the one description of what a
/// call is, from the policy's entry points to HTTP and the gateway: a read,
/// a write with the key the system deduplicates by, or a write without one.
///
/// ```
/// use ballast::{IdempotencyKey, OpKind, Operation};
///
/// let key = IdempotencyKey::v5("order-7", "pay");
/// assert_eq!(Operation::KeyedWrite(&key).kind(), OpKind::KeyedWrite);
/// assert_eq!(Operation::KeyedWrite(&key).key(), Some(&key));
/// assert_eq!(Operation::Read.key(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation<'a> {
    /// No side effect: retried on transient failures (R-RES-RE-1a).
    Read,
    /// A write carrying `key`: retried with it (R-RES-RE-1b).
    KeyedWrite(&'a IdempotencyKey),
    /// A write without a key: exactly one attempt (R-RES-RE-X1).
    WriteOnce,
}

impl<'a> Operation<'a> {
    /// Its kind.
    pub const fn kind(&self) -> OpKind {
        match self {
            Operation::Read => OpKind::Read,
            Operation::KeyedWrite(_) => OpKind::KeyedWrite,
            Operation::WriteOnce => OpKind::WriteOnce,
        }
    }

    /// A write's key.
    pub const fn key(&self) -> Option<&'a IdempotencyKey> {
        match self {
            Operation::KeyedWrite(key) => Some(key),
            Operation::Read | Operation::WriteOnce => None,
        }
    }
}

/// What one attempt knows about its call: which attempt it is, the call's
/// idempotency key, and a cancellation signal.
///
/// The signal fires when a cooperative timeout expires or when the caller
/// cancels (see [`PolicyCall::cancel_on`](crate::PolicyCall::cancel_on)); an attempt
/// that can stop early should watch [`AttemptContext::cancelled`].
#[derive(Debug, Clone)]
pub struct AttemptContext {
    pub(crate) attempt: u32,
    pub(crate) kind: OpKind,
    pub(crate) key: Option<IdempotencyKey>,
    pub(crate) cancel: Option<CancellationToken>,
}

impl AttemptContext {
    /// 1 for the first attempt, 2 for the first retry, …
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The kind of operation this attempt belongs to.
    pub fn kind(&self) -> OpKind {
        self.kind
    }

    /// The call's idempotency key: the same on every attempt of a
    /// [`Policy::write`](crate::Policy::write), `None` for reads and
    /// [`Policy::write_once`](crate::Policy::write_once).
    pub fn key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }

    /// Whether this attempt has been asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancellationToken::is_cancelled)
    }

    /// Completes when this attempt is asked to stop; never, if nothing can ask.
    pub async fn cancelled(&self) {
        match &self.cancel {
            Some(token) => token.cancelled().await,
            None => std::future::pending().await,
        }
    }
}
