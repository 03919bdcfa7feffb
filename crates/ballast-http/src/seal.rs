//! Sealing what a deferred write must not store in clear, and binding what
//! it stores in clear to it: encrypted with XChaCha20-Poly1305 (RustCrypto's
//! `chacha20poly1305`) before the delivery is written to the queue, opened
//! only by the worker that sends it.
//!
//! With a seal key, a delivery's credential headers, its body and its query
//! are sealed together in one envelope whose associated data is everything
//! else it stores — system, idempotency key, method, path, the headers kept
//! in clear and the time of its first attempt. Someone who can write to the
//! queue's table can neither read the sealed parts nor change any other
//! part (turn a `POST /payments` into a `DELETE /accounts/42` that still
//! carries the caller's card): a changed delivery no longer opens, and is
//! held, not sent. A random 24-byte nonce per envelope; the stored text is
//! `base64(nonce ‖ ciphertext ‖ tag)`.
//!
//! **Keys rotate.** A [`SealKey`] is a keyring: the first key seals, every
//! key opens, and each envelope names the key that sealed it by an id (a
//! digest of the key, never the key). Put the new key first and keep the old
//! ones after it (`BALLAST_SEAL_KEY="new,old"`) until no task sealed with an
//! old one waits; `ballast serve` says at start when some task waits whose
//! key no configured key is.
//!
//! ```
//! use ballast_http::SealKey;
//!
//! let key = SealKey::from_text(&"2f".repeat(32)).unwrap();           // 32 bytes, as 64 hex digits (or base64)
//! let rotated = SealKey::from_text(&format!("{},{}", "3e".repeat(32), "2f".repeat(32))).unwrap();
//! assert!(rotated.opens_id(key.id()) && rotated.id() != key.id());    // the old one still opens
//! assert!(SealKey::from_text("too short").unwrap_err().to_string().contains("32 bytes"));
//! assert_eq!(format!("{key:?}"), "SealKey(***)");
//! ```

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Headers sealed by default: they carry the caller's credentials.
pub const SEALED_BY_DEFAULT: [&str; 4] = ["authorization", "proxy-authorization", "cookie", "x-api-key"];

const NONCE: usize = 24;

/// The keys that seal and open deferred writes: the first seals, every one
/// opens. Cheap to clone, never printed.
#[derive(Clone)]
pub struct SealKey(Arc<[Key]>);

struct Key {
    id: String,
    cipher: XChaCha20Poly1305,
    /// The key of the digests made under this one ([`SealKey::digest`]):
    /// derived from it, never the key itself.
    mac: [u8; 32],
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(***)")
    }
}

/// A key text that is not 32 bytes, or a sealed value that does not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// A key is not 32 bytes written as 64 hex digits or as base64.
    #[error(
        "a seal key is 32 bytes, written as 64 hex digits or as base64 (e.g. `openssl rand -hex 32`), and \
         several keys are separated by commas (the first seals, every one opens); this one is not"
    )]
    BadKey,
    /// No seal key is configured, and the delivery is sealed.
    #[error("the delivery is sealed and no seal key is configured: configure the key it was sealed with")]
    NoKey,
    /// The delivery was sealed with a key that none of the configured ones is.
    #[error(
        "the delivery was sealed with key {id}, which none of the configured seal keys is (the key was \
         rotated without keeping the old one): add the old key after the current one, comma-separated"
    )]
    UnknownKey {
        /// The id of the key that sealed it.
        id: String,
    },
    /// The sealed value, or what it is bound to, was changed after it was stored.
    #[error(
        "the delivery does not open with the key that sealed it: it was changed after it was stored \
         (its method, path, query, headers or body), or moved from another task"
    )]
    DoesNotOpen,
}

impl SealKey {
    /// A keyring from its text: keys of 64 hex digits or the base64 of 32
    /// bytes each, separated by commas or white space; the first seals.
    pub fn from_text(text: &str) -> Result<SealKey, SealError> {
        let keys: Vec<Key> = text
            .split([',', ' ', '\n', '\t'])
            .filter(|t| !t.is_empty())
            .map(key)
            .collect::<Result<_, _>>()?;
        if keys.is_empty() {
            return Err(SealError::BadKey);
        }
        Ok(SealKey(keys.into()))
    }

    /// The id of the key that seals: a digest of it, safe to store and show.
    pub fn id(&self) -> &str {
        &self.0[0].id
    }

    /// Whether the key with id `id` is on the ring.
    pub fn opens_id(&self, id: &str) -> bool {
        self.0.iter().any(|k| k.id == id)
    }

    /// `plain`, sealed for `place` (the associated data) with the current
    /// key.
    pub(crate) fn seal(&self, place: &[u8], plain: &[u8]) -> String {
        let mut nonce = [0u8; NONCE];
        rand::rng().fill_bytes(&mut nonce);
        // Encryption with a valid key and nonce cannot fail; an empty value is sealed as empty.
        let sealed = self.0[0]
            .cipher
            .encrypt(XNonce::from_slice(&nonce), Payload { msg: plain, aad: place })
            .unwrap_or_default();
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        BASE64.encode(out)
    }

    /// What `sealed` holds, if it was sealed for `place` with the key `id`
    /// names, or — when `id` is `None` (a delivery sealed before keys had
    /// ids) — with any key of the ring.
    pub(crate) fn open(&self, id: Option<&str>, place: &[u8], sealed: &str) -> Result<Vec<u8>, SealError> {
        let bytes = BASE64.decode(sealed).map_err(|_| SealError::DoesNotOpen)?;
        if bytes.len() < NONCE {
            return Err(SealError::DoesNotOpen);
        }
        let (nonce, body) = bytes.split_at(NONCE);
        let open =
            |key: &Key| key.cipher.decrypt(XNonce::from_slice(nonce), Payload { msg: body, aad: place });
        match id {
            Some(id) => {
                let key = self
                    .0
                    .iter()
                    .find(|k| k.id == id)
                    .ok_or_else(|| SealError::UnknownKey { id: id.into() })?;
                open(key).map_err(|_| SealError::DoesNotOpen)
            }
            None => self.0.iter().find_map(|key| open(key).ok()).ok_or(SealError::DoesNotOpen),
        }
    }
}

impl SealKey {
    /// A keyed digest of `parts` for `purpose` — HMAC-SHA-256 under a key
    /// derived from the sealing key — as stored: `k:{key id}:{32 hex
    /// digits}`. Someone who reads the table without the key can neither
    /// compute it nor test a guess against it (an amount, a card number).
    pub(crate) fn digest(&self, purpose: &str, parts: &[&[u8]]) -> String {
        let key = &self.0[0];
        format!("k:{}:{}", key.id, mac(key, purpose, parts))
    }

    /// Whether `stored` ([`digest`](Self::digest)) is that of `parts` for
    /// `purpose`, under whichever key of the ring made it; compared in
    /// constant time.
    pub(crate) fn digest_matches(&self, stored: &str, purpose: &str, parts: &[&[u8]]) -> bool {
        let Some((id, hex)) = stored.strip_prefix("k:").and_then(|rest| rest.split_once(':')) else {
            return false;
        };
        self.0.iter().find(|k| k.id == id).is_some_and(|key| {
            bool::from(subtle::ConstantTimeEq::ct_eq(mac(key, purpose, parts).as_bytes(), hex.as_bytes()))
        })
    }

    /// A secret of `parts` for `purpose` under the key `id` names (the
    /// sealing key without one): 32 hex digits, never stored — made again
    /// from the same parts by whoever holds the key. `None` when `id`
    /// names no key on the ring.
    pub(crate) fn secret(&self, id: Option<&str>, purpose: &str, parts: &[&[u8]]) -> Option<String> {
        let key = match id {
            Some(id) => self.0.iter().find(|k| k.id == id)?,
            None => &self.0[0],
        };
        Some(mac(key, purpose, parts))
    }
}

/// HMAC-SHA-256 of `parts`, each framed by its length, under `key`'s
/// digest key for `purpose`: 16 bytes in hex.
fn mac(key: &Key, purpose: &str, parts: &[&[u8]]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key.mac)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key"));
    for part in std::iter::once(purpose.as_bytes()).chain(parts.iter().copied()) {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    mac.finalize().into_bytes()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

fn key(text: &str) -> Result<Key, SealError> {
    let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        (0..32).map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16)).collect::<Result<Vec<u8>, _>>().ok()
    } else {
        BASE64.decode(text).ok()
    };
    match bytes {
        Some(bytes) if bytes.len() == 32 => {
            let cipher = XChaCha20Poly1305::new_from_slice(&bytes).map_err(|_| SealError::BadKey)?;
            let digest = Sha256::new().chain_update(b"ballast.seal.key-id\0").chain_update(&bytes).finalize();
            let id = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            let mac =
                Sha256::new().chain_update(b"ballast.seal.digest-key\0").chain_update(&bytes).finalize();
            Ok(Key { id, cipher, mac: mac.into() })
        }
        _ => Err(SealError::BadKey),
    }
}

/// The associated data of one sealed value of the first format: what it
/// belongs to (system, key, header name or `body`). Deliveries stored before
/// the envelope still open with it.
pub(crate) fn place(system: &str, key: &str, part: &str) -> Vec<u8> {
    format!("ballast.seal.v1\0{system}\0{key}\0{part}").into_bytes()
}

/// The associated data of an envelope: every part of the delivery stored in
/// clear, each length-prefixed so no two deliveries share it.
pub(crate) fn bound(parts: &[&str]) -> Vec<u8> {
    let mut out = b"ballast.seal.v2".to_vec();
    for part in parts {
        out.extend_from_slice(&(part.len() as u64).to_be_bytes());
        out.extend_from_slice(part.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_with_its_key_and_in_its_place() {
        let key = SealKey::from_text(&"ab".repeat(32)).unwrap();
        let other = SealKey::from_text(&BASE64.encode([7u8; 32])).unwrap();
        let here = bound(&["pay", "k-1", "POST", "payments"]);
        let sealed = key.seal(&here, b"Bearer card-token");
        assert!(!sealed.contains("card-token"));
        assert_eq!(key.open(Some(key.id()), &here, &sealed).unwrap(), b"Bearer card-token");
        assert_ne!(key.seal(&here, b"Bearer card-token"), sealed, "a fresh nonce each time");
        assert_eq!(
            other.open(Some(key.id()), &here, &sealed),
            Err(SealError::UnknownKey { id: key.id().into() })
        );
        assert_eq!(other.open(None, &here, &sealed), Err(SealError::DoesNotOpen));
        let elsewhere = bound(&["pay", "k-1", "DELETE", "payments"]);
        assert_eq!(key.open(Some(key.id()), &elsewhere, &sealed), Err(SealError::DoesNotOpen));
        assert_eq!(key.open(Some(key.id()), &here, "not base64!"), Err(SealError::DoesNotOpen));
        assert_ne!(bound(&["ab", "c"]), bound(&["a", "bc"]), "parts are told apart");
        for bad in ["", "ab", &"zz".repeat(32), &BASE64.encode([1u8; 16]), &format!("{},x", "ab".repeat(32))]
        {
            assert_eq!(SealKey::from_text(bad).unwrap_err(), SealError::BadKey, "{bad}");
        }
    }

    /// N6: after a rotation the new key seals, the old one still opens.
    #[test]
    fn a_rotated_ring_seals_with_the_new_key_and_opens_with_the_old() {
        let old = SealKey::from_text(&"ab".repeat(32)).unwrap();
        let ring = SealKey::from_text(&format!("{}, {}", "cd".repeat(32), "ab".repeat(32))).unwrap();
        let here = bound(&["pay"]);
        let before = old.seal(&here, b"secret");
        assert_eq!(ring.open(Some(old.id()), &here, &before).unwrap(), b"secret");
        let after = ring.seal(&here, b"secret");
        assert_eq!(
            old.open(Some(ring.id()), &here, &after),
            Err(SealError::UnknownKey { id: ring.id().into() })
        );
        assert!(ring.opens_id(old.id()) && !old.opens_id(ring.id()));
        assert_eq!(ring.id().len(), 16, "an id, not the key");
    }
}
