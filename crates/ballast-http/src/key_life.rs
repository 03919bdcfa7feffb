//! A key bound to its request for its whole life: the fingerprint of every
//! keyed write sent, live or deferred, is kept in the queue's database for
//! the system's `key_ttl` ([`ballast_queue::bound_keys`]), scoped by system
//! and caller. Another request under a key the caller used within that
//! life is refused before anything is sent ([`HttpError::KeyReused`],
//! R-RES-RE-1): the system would take it for the first and may answer
//! with the first one's outcome — a payment of another amount "succeeding"
//! without being charged. The table of writes in flight and a deferred task catch
//! the same while the first request is on its way; this catches it after.
//!
//! A database that does not answer within the queue's bound does not stop
//! the write: it is sent, as it would be without a queue, and the lapse is
//! logged (once per interval).

use std::sync::Mutex;
use std::time::Duration;

use ballast::IdempotencyKey;
use ballast_queue::{KeyBinding, Queue};
use tokio::time::Instant;

use crate::{Fingerprint, HttpError, HttpSystem, Request};

/// How long a key is bound when its system declares no `key_ttl`: a day,
/// as long as the payment providers that publish theirs keep keys.
pub const DEFAULT_KEY_LIFE: Duration = Duration::from_secs(24 * 3600);

/// How often an unchecked binding is logged, at most.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// When a binding last went unchecked and was logged, process-wide.
static LOGGED: Mutex<Option<Instant>> = Mutex::new(None);

impl HttpSystem {
    /// Binds `key` to `request` for the system's `key_ttl`
    /// ([`DEFAULT_KEY_LIFE`] without one), unless the same caller bound it
    /// to another request within that life: then
    /// [`HttpError::KeyReused`], and nothing is to be sent. The same
    /// request again passes, as a caller's retry must. A request that
    /// cannot be sent at all (a path that leaves the base URL) binds
    /// nothing and is refused with its own error.
    ///
    /// [`write_or_defer`](Self::write_or_defer) binds every deduplicated
    /// write it sends or defers; a service that sends keyed writes itself
    /// calls this first.
    ///
    /// ```no_run
    /// # async fn f(system: ballast_http::HttpSystem, queue: ballast_queue::Queue) -> Result<(), ballast_http::HttpError> {
    /// use ballast::IdempotencyKey;
    /// use ballast_http::Request;
    ///
    /// // One key per payment attempt, not per order: the amount may change.
    /// let key = IdempotencyKey::v5("order-17/attempt-1", "register-payment");
    /// let payment = Request::post("payments").json(&serde_json::json!({ "amount": 100 }));
    /// system.bind_key(&queue, &key, &payment).await?;
    /// let charged = system.write(&key, payment).await;
    /// # Ok(()) }
    /// ```
    pub async fn bind_key(
        &self,
        queue: &Queue,
        key: &IdempotencyKey,
        request: &Request,
    ) -> Result<(), HttpError> {
        self.bind_digested(queue, key, request, &crate::fingerprint::digest(request)).await
    }

    /// [`bind_key`](Self::bind_key) of `request`, whose
    /// [`digest`](crate::fingerprint::digest) is `asks`: taken once by a
    /// caller that needs it too.
    pub(crate) async fn bind_digested(
        &self,
        queue: &Queue,
        key: &IdempotencyKey,
        request: &Request,
        asks: &[u8; 32],
    ) -> Result<(), HttpError> {
        self.check_sendable(&request.head)?;
        let fingerprint = Fingerprint::stored(self.name(), asks, self.seal_key());
        let caller = self.caller(request).stored(self.name(), self.seal_key());
        let binding = KeyBinding {
            system: self.name(),
            caller: &caller,
            key: key.as_str(),
            fingerprint: fingerprint.as_str(),
            expires_in: self.key_ttl().unwrap_or(DEFAULT_KEY_LIFE),
        };
        match queue.bind_key(&binding).await {
            Ok(bound) if bound == fingerprint.as_str() => Ok(()),
            // Bound under a seal key since rotated, or before one was set.
            Ok(bound)
                if Fingerprint::from_stored(bound.as_str()).is_of(self.name(), asks, self.seal_key()) =>
            {
                Ok(())
            }
            Ok(_) => Err(HttpError::KeyReused {
                key: key.as_str().to_owned(),
                first_in: "sent within the key's life",
            }),
            Err(error) => {
                if due_to_log() {
                    tracing::warn!(
                        system = self.name(),
                        %error,
                        "cannot bind idempotency keys to their requests in the queue's database; keyed writes are \
                         sent unchecked against earlier requests under their keys until it answers (R-RES-RE-1)"
                    );
                }
                Ok(())
            }
        }
    }
}

/// Whether an unchecked binding is to be logged now.
fn due_to_log() -> bool {
    let now = Instant::now();
    let mut last = LOGGED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if last.is_some_and(|at| now.duration_since(at) < LOG_EVERY) {
        return false;
    }
    *last = Some(now);
    true
}
