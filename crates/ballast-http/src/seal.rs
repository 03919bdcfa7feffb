//! Sealing what a deferred write must not store in clear: the caller's
//! credential headers (and, with a key, its body), encrypted with
//! XChaCha20-Poly1305 (RustCrypto's `chacha20poly1305`) before the delivery
//! is written to the queue, and opened only by the worker that sends it.
//!
//! Each sealed value is bound to the system, the write's idempotency key and
//! the header's name (the AEAD's associated data), so a sealed value copied
//! into another task does not open. A random 24-byte nonce per value; the
//! stored text is `base64(nonce ‖ ciphertext ‖ tag)`.
//!
//! ```
//! use ballast_http::SealKey;
//!
//! let key = SealKey::from_text(&"2f".repeat(32)).unwrap();           // 32 bytes, as 64 hex digits (or base64)
//! assert!(SealKey::from_text("too short").unwrap_err().to_string().contains("32 bytes"));
//! assert_eq!(format!("{key:?}"), "SealKey(***)");
//! ```

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;

/// Headers sealed by default: they carry the caller's credentials.
pub const SEALED_BY_DEFAULT: [&str; 4] = ["authorization", "proxy-authorization", "cookie", "x-api-key"];

const NONCE: usize = 24;

/// The key sealing deferred writes; cheap to clone, never printed.
#[derive(Clone)]
pub struct SealKey(Arc<XChaCha20Poly1305>);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(***)")
    }
}

/// A key text that is not 32 bytes, or a sealed value that does not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The key is not 32 bytes written as 64 hex digits or as base64.
    #[error("a seal key is 32 bytes, written as 64 hex digits or as base64 (e.g. `openssl rand -hex 32`); this one is not")]
    BadKey,
    /// The sealed value was not sealed with this key for this place.
    #[error(
        "a sealed value does not open with this key: the key changed since the write was deferred, or \
         the value was moved from another task"
    )]
    DoesNotOpen,
}

impl SealKey {
    /// A key from its text: 64 hex digits, or the base64 of 32 bytes.
    pub fn from_text(text: &str) -> Result<SealKey, SealError> {
        let text = text.trim();
        let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            (0..32)
                .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16))
                .collect::<Result<Vec<u8>, _>>()
                .ok()
        } else {
            BASE64.decode(text).ok()
        };
        match bytes {
            Some(bytes) if bytes.len() == 32 => {
                let cipher = XChaCha20Poly1305::new_from_slice(&bytes).map_err(|_| SealError::BadKey)?;
                Ok(SealKey(Arc::new(cipher)))
            }
            _ => Err(SealError::BadKey),
        }
    }

    /// `plain`, sealed for `place` (the associated data).
    pub(crate) fn seal(&self, place: &[u8], plain: &[u8]) -> String {
        let mut nonce = [0u8; NONCE];
        rand::rng().fill_bytes(&mut nonce);
        // Encryption with a valid key and nonce cannot fail; an empty value is sealed as empty.
        let sealed = self
            .0
            .encrypt(XNonce::from_slice(&nonce), Payload { msg: plain, aad: place })
            .unwrap_or_default();
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        BASE64.encode(out)
    }

    /// What `sealed` holds, if it was sealed with this key for `place`.
    pub(crate) fn open(&self, place: &[u8], sealed: &str) -> Result<Vec<u8>, SealError> {
        let bytes = BASE64.decode(sealed).map_err(|_| SealError::DoesNotOpen)?;
        if bytes.len() < NONCE {
            return Err(SealError::DoesNotOpen);
        }
        let (nonce, body) = bytes.split_at(NONCE);
        self.0
            .decrypt(XNonce::from_slice(nonce), Payload { msg: body, aad: place })
            .map_err(|_| SealError::DoesNotOpen)
    }
}

/// The associated data of a sealed value: what it belongs to.
pub(crate) fn place(system: &str, key: &str, part: &str) -> Vec<u8> {
    format!("ballast.seal.v1\0{system}\0{key}\0{part}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_with_its_key_and_in_its_place() {
        let key = SealKey::from_text(&"ab".repeat(32)).unwrap();
        let other = SealKey::from_text(&BASE64.encode([7u8; 32])).unwrap();
        let here = place("pay", "k-1", "authorization");
        let sealed = key.seal(&here, b"Bearer card-token");
        assert!(!sealed.contains("card-token"));
        assert_eq!(key.open(&here, &sealed).unwrap(), b"Bearer card-token");
        assert_ne!(key.seal(&here, b"Bearer card-token"), sealed, "a fresh nonce each time");
        assert_eq!(other.open(&here, &sealed), Err(SealError::DoesNotOpen));
        assert_eq!(key.open(&place("pay", "k-2", "authorization"), &sealed), Err(SealError::DoesNotOpen));
        assert_eq!(key.open(&here, "not base64!"), Err(SealError::DoesNotOpen));
        for bad in ["", "ab", &"zz".repeat(32), &BASE64.encode([1u8; 16])] {
            assert_eq!(SealKey::from_text(bad).unwrap_err(), SealError::BadKey, "{bad}");
        }
    }
}
