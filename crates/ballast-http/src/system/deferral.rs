//! What a system's deferred writes carry and keep: the seal key and the
//! headers it seals, how much of an answer is kept and whether it is
//! sealed, and the callback of writes that name none. The builder gathers
//! it; the system holds it as one value, so the queue's settings travel
//! together and behind one `cfg`.

use http::HeaderName;

/// A system's settings for its deferred writes.
#[derive(Debug, Clone)]
pub(crate) struct Deferral {
    /// The key sealing and opening deferred writes, if configured.
    pub(crate) seal: Option<crate::SealKey>,
    /// The headers sealed before a deferred write is stored.
    pub(crate) sealed: Vec<HeaderName>,
    /// How much of a deferred write's answer body is kept.
    pub(crate) keep_answer: usize,
    /// Whether every kept answer is sealed, not only those of sealed requests.
    pub(crate) seal_answers: bool,
    /// The callback of deferred writes that name none.
    pub(crate) callback: Option<String>,
}

impl Default for Deferral {
    /// No seal key, the credential headers sealed
    /// ([`SEALED_BY_DEFAULT`](crate::seal::SEALED_BY_DEFAULT)),
    /// [`DEFAULT_KEEP_ANSWER`](crate::delivery::DEFAULT_KEEP_ANSWER) bytes
    /// of an answer kept, sealed only when its request was, no callback.
    fn default() -> Self {
        Self {
            seal: None,
            sealed: crate::seal::SEALED_BY_DEFAULT.iter().map(|n| HeaderName::from_static(n)).collect(),
            keep_answer: crate::delivery::DEFAULT_KEEP_ANSWER,
            seal_answers: false,
            callback: None,
        }
    }
}
