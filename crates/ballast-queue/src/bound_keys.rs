//! Keys bound to their requests: an idempotency key names one request for
//! as long as the external system remembers it (R-RES-RE-1), not only while
//! its write waits in the queue. [`Queue::bind_key`] binds a key to its
//! request's fingerprint, scoped by system and caller, until its `key_ttl`
//! is over, and answers with the fingerprint the key is bound to: the
//! request's own, or an earlier request's that the caller must not reuse
//! the key for. [`Retention`](crate::Retention) deletes expired bindings.
//!
//! A binding is one row keyed by a 16-byte digest of its system, caller
//! and key (the table holds no key in clear); its size with its index
//! entries at 1,000 keyed writes a second and a 24-hour `key_ttl` is
//! measured in BENCHMARKS.md.
//!
//! ```no_run
//! # async fn f(queue: ballast_queue::Queue) -> ballast_queue::Result<()> {
//! use std::time::Duration;
//! use ballast_queue::KeyBinding;
//!
//! let binding = KeyBinding {
//!     system: "payments",
//!     caller: "c:2f0a…",
//!     key: "order-17-attempt-1",
//!     fingerprint: "9c1d…",
//!     expires_in: Duration::from_secs(24 * 3600),
//! };
//! let bound_to = queue.bind_key(&binding).await?;
//! if bound_to != binding.fingerprint {
//!     // Another request under the same key: refuse this one unsent.
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::store::Store;
use crate::Queue;

/// The longest of each part of a [`KeyBinding`], in bytes.
pub const MAX_BINDING_PART: usize = 512;

/// One keyed request as it binds its key ([`Queue::bind_key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyBinding<'a> {
    /// The system the key is sent to: keys are each system's own.
    pub system: &'a str,
    /// Who asks, as stored (a digest): one caller's key never binds
    /// another's request.
    pub caller: &'a str,
    /// The idempotency key.
    pub key: &'a str,
    /// The request's fingerprint, as stored.
    pub fingerprint: &'a str,
    /// How long the binding lasts: the system's `key_ttl`.
    pub expires_in: Duration,
}

impl KeyBinding<'_> {
    /// The row's key: 16 bytes of a SHA-256 over the system, the caller
    /// and the key, each after its length, so no two scopes share a digest
    /// by where one part ends.
    pub(crate) fn scope(&self) -> [u8; 16] {
        let mut digest = Sha256::new();
        for part in [self.system, self.caller, self.key] {
            digest.update((part.len() as u64).to_be_bytes());
            digest.update(part);
        }
        let mut scope = [0; 16];
        scope.copy_from_slice(&digest.finalize()[..16]);
        scope
    }
}

impl Queue {
    /// Binds `binding.key` to `binding.fingerprint` for `binding.system`
    /// and `binding.caller`, for `binding.expires_in`, unless it is bound
    /// already and not expired; returns the fingerprint it is bound to. A
    /// binding is never extended: the key's life counts from its first
    /// request, as the system counts it.
    ///
    /// Answered within [`answering_within`](Queue::answering_within)'s bound.
    pub async fn bind_key(&self, binding: &KeyBinding<'_>) -> Result<String> {
        for (part, text) in [
            ("system", binding.system),
            ("caller", binding.caller),
            ("key", binding.key),
            ("fingerprint", binding.fingerprint),
        ] {
            if text.is_empty() || text.len() > MAX_BINDING_PART {
                return Err(Error::InvalidArgument(format!(
                    "bind_key: the {part} must be 1 to {MAX_BINDING_PART} bytes, not {}",
                    text.len()
                )));
            }
        }
        self.answered(self.store.bind_key(&binding.scope(), binding)).await
    }

    /// Deletes at most `limit` expired bindings, oldest first; returns how
    /// many went.
    pub async fn prune_bound_keys(&self, limit: u32) -> Result<u64> {
        self.store.prune_bound_keys(limit).await
    }
}
