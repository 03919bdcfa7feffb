//! What a keyed write asks for, as a digest: its method, path, query,
//! body and the headers that change what the body means. An
//! idempotency key names one request (R-RES-RE-1): the same key with
//! another fingerprint is another request under a reused key, refused
//! unsent ([`HttpError::KeyReused`](crate::HttpError::KeyReused)), as the
//! IETF's Idempotency-Key draft (§2.7) and Stripe answer it; the same key
//! with the same fingerprint while the first is in flight joins it
//! ([`crate::in_flight`]).

use sha2::{Digest, Sha256};

use crate::request::Request;

/// Headers whose value changes what the same bytes of a body mean.
const MEANINGFUL: [http::header::HeaderName; 2] =
    [http::header::CONTENT_TYPE, http::header::CONTENT_ENCODING];

/// A request's fingerprint: 32 hex digits of a SHA-256 over what it asks
/// for. The idempotency header itself, credentials and tracing headers
/// are not part of it: a caller's retry with a fresh token or trace is the
/// same request.
///
/// ```
/// use ballast_http::{Fingerprint, Request};
///
/// let payment = |amount: u64| Request::post("payments").json(&serde_json::json!({ "amount": amount }));
/// let first = Fingerprint::of(&payment(100));
/// assert_eq!(first, Fingerprint::of(&payment(100).header("idempotency-key", "order-7")));
/// assert_ne!(first, Fingerprint::of(&payment(999_999)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// The fingerprint of `request`.
    pub fn of(request: &Request) -> Self {
        Self(digest(request)[..16].iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The fingerprint of `request` to `system` as a deferred write stores
    /// it with a seal key: keyed with a key derived from it
    /// ([`SealKey`](crate::SealKey)), `k:{key id}:{32 hex digits}`, so that
    /// a reader of the queue's table cannot test a guess of the body (an
    /// amount, a card number) against it.
    #[cfg(feature = "queue")]
    pub(crate) fn sealed(seal: &crate::SealKey, system: &str, request: &Request) -> Self {
        Self::stored(system, &digest(request), Some(seal))
    }

    /// The fingerprint as stored of the request whose [`digest`] is
    /// `asked`, to `system`: [`sealed`](Self::sealed) with a seal key, else
    /// plain ([`of`](Self::of)).
    #[cfg(feature = "queue")]
    pub(crate) fn stored(system: &str, asked: &[u8; 32], seal: Option<&crate::SealKey>) -> Self {
        match seal {
            Some(seal) => Self(seal.digest(PURPOSE, &[system.as_bytes(), asked])),
            None => Self(asked[..16].iter().map(|b| format!("{b:02x}")).collect()),
        }
    }

    /// Whether this stored fingerprint is that of the request whose
    /// [`digest`] is `asked`, to `system`: keyed ([`sealed`](Self::sealed))
    /// under any key of `seal`'s ring, or plain ([`of`](Self::of)) as
    /// stored without a seal key or before fingerprints were keyed.
    #[cfg(feature = "queue")]
    pub(crate) fn is_of(&self, system: &str, asked: &[u8; 32], seal: Option<&crate::SealKey>) -> bool {
        if self.0.starts_with("k:") {
            return seal
                .is_some_and(|seal| seal.digest_matches(&self.0, PURPOSE, &[system.as_bytes(), asked]));
        }
        *self == Self::stored(system, asked, None)
    }

    /// The fingerprint as stored: 32 hex digits (keyed: `k:…`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A fingerprint as stored ([`as_str`](Self::as_str)).
    pub fn from_stored(text: impl Into<String>) -> Self {
        Self(text.into())
    }
}

/// What a keyed fingerprint is for, in its digest.
#[cfg(feature = "queue")]
const PURPOSE: &str = "ballast.fingerprint";

/// A SHA-256 over what `request` asks for.
pub(crate) fn digest(request: &Request) -> [u8; 32] {
    let head = &request.head;
    let mut digest = Sha256::new();
    // Each part framed by its length, so no two requests share a text.
    let mut part = |bytes: &[u8]| {
        digest.update((bytes.len() as u64).to_be_bytes());
        digest.update(bytes);
    };
    part(head.method.as_str().as_bytes());
    part(head.path.as_bytes());
    part(head.raw_query.as_deref().unwrap_or("").as_bytes());
    for (name, value) in &head.query {
        part(name.as_bytes());
        part(value.as_bytes());
    }
    for name in &MEANINGFUL {
        for value in head.headers.get_all(name) {
            part(name.as_str().as_bytes());
            part(value.as_bytes());
        }
    }
    part(&request.body);
    digest.finalize().into()
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_request_asks_for_changes_its_fingerprint_and_nothing_else_does() {
        let base =
            || Request::post("payments").header("content-type", "application/json").body("{\"amount\":1}");
        let fp = |r: Request| Fingerprint::of(&r);
        assert_eq!(
            fp(base()),
            fp(base().header("idempotency-key", "k1").header("authorization", "Bearer x"))
        );
        assert_eq!(fp(base()), fp(base().header("traceparent", "00-1-2-01")));
        assert_ne!(fp(base()), fp(base().body("{\"amount\":2}")));
        assert_ne!(
            fp(base()),
            fp(Request::put("payments").header("content-type", "application/json").body("{\"amount\":1}"))
        );
        assert_ne!(
            fp(base()),
            fp(Request::post("payments/x").header("content-type", "application/json").body("{\"amount\":1}"))
        );
        assert_ne!(fp(base()), fp(base().query(&[("currency", "EUR")])));
        assert_ne!(
            fp(base()),
            fp(Request::post("payments").header("content-type", "text/plain").body("{\"amount\":1}"))
        );
        assert_eq!(fp(base()).as_str().len(), 32);
    }
}
