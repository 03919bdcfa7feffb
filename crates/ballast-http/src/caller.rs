//! Who is asking. Two requests with one idempotency key are one request
//! only if they come from one caller: a second caller's request with the
//! same key and body — a guessed or leaked key — must not be handed the
//! first one's answer (which may echo its token) or its deferred task's
//! handle. A keyed write therefore joins another in flight or waiting in
//! the queue only when the headers that say who is asking match: the
//! credentials ([`CALLER_BY_DEFAULT`]), the sealed headers and those of
//! [`HttpSystemBuilder::caller_headers`](crate::HttpSystemBuilder::caller_headers)
//! (`[gateway] tenant_headers`). Otherwise it goes its own way: the
//! system sees it with its own credentials and answers it on its own.
//!
//! The comparison is of digests. In memory a plain SHA-256; stored with a
//! deferred write, keyed under the seal key
//! ([`SealKey`](crate::SealKey)), so a reader of the queue's table can
//! neither read a token from it nor test a guess against it.

use http::header::HeaderName;
use sha2::{Digest, Sha256};

use crate::Request;

/// The headers that say who is asking by default: the credentials.
pub const CALLER_BY_DEFAULT: [&str; 4] = ["authorization", "proxy-authorization", "cookie", "x-api-key"];

/// What a stored caller digest is for, in its keyed digest.
#[cfg(feature = "queue")]
const PURPOSE: &str = "ballast.caller";

/// A digest of the headers of a request that say who is asking.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Caller([u8; 32]);

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Caller(***)")
    }
}

impl Caller {
    /// The caller of `request`, told by `names` (each name's values in
    /// order; an absent header is part of it too).
    pub(crate) fn of(request: &Request, names: &[HeaderName]) -> Caller {
        let mut digest = Sha256::new();
        let mut part = |bytes: &[u8]| {
            digest.update((bytes.len() as u64).to_be_bytes());
            digest.update(bytes);
        };
        for name in names {
            part(name.as_str().as_bytes());
            let values = request.head.headers.get_all(name);
            part(&(values.iter().count() as u64).to_be_bytes());
            for value in values {
                part(value.as_bytes());
            }
        }
        Caller(digest.finalize().into())
    }

    /// This caller as a deferred write to `system` stores it: keyed under
    /// `seal` (`k:…`), or — without a seal key, when no credential can be
    /// stored — a SHA-256 of it (`s:…`).
    #[cfg(feature = "queue")]
    pub(crate) fn stored(&self, system: &str, seal: Option<&crate::SealKey>) -> String {
        match seal {
            Some(seal) => seal.digest(PURPOSE, &[system.as_bytes(), &self.0]),
            None => {
                let digest = Sha256::new()
                    .chain_update(PURPOSE)
                    .chain_update((system.len() as u64).to_be_bytes())
                    .chain_update(system)
                    .chain_update(self.0)
                    .finalize();
                format!("s:{}", digest[..16].iter().map(|b| format!("{b:02x}")).collect::<String>())
            }
        }
    }

    /// Whether `stored` ([`stored`](Self::stored)) is this caller's to `system`.
    #[cfg(feature = "queue")]
    pub(crate) fn is(&self, stored: &str, system: &str, seal: Option<&crate::SealKey>) -> bool {
        if stored.starts_with("k:") {
            return seal
                .is_some_and(|seal| seal.digest_matches(stored, PURPOSE, &[system.as_bytes(), &self.0]));
        }
        let mine = self.stored(system, None);
        bool::from(subtle::ConstantTimeEq::ct_eq(mine.as_bytes(), stored.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(extra: &[&'static str]) -> Vec<HeaderName> {
        CALLER_BY_DEFAULT.iter().chain(extra).map(|n| HeaderName::from_static(n)).collect()
    }

    #[test]
    fn credentials_and_tenant_headers_tell_callers_apart_nothing_else_does() {
        let pay = || Request::post("payments").body("{}");
        let of = |r: Request| Caller::of(&r, &names(&["x-tenant-id"]));
        let alice = || pay().header("authorization", "Bearer alice");
        assert_eq!(
            of(alice()),
            of(alice().header("traceparent", "00-1-2-01").header("idempotency-key", "k"))
        );
        assert_ne!(of(alice()), of(pay()), "no credentials is another caller");
        assert_ne!(of(alice()), of(pay().header("authorization", "Bearer bob")));
        assert_ne!(of(alice()), of(alice().header("x-tenant-id", "t2")));
        assert_ne!(
            of(pay().header("cookie", "a=1")),
            of(pay().header("x-api-key", "a=1")),
            "which header, too"
        );
    }
}
