//! Idempotency keys: made once per user action, stored in the domain, reused by
//! every attempt and by the durable task that may take over (R-RES-RE-1).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// The fixed namespace of [`IdempotencyKey::v5`] keys.
///
/// It is `Uuid::new_v5(&Uuid::NAMESPACE_URL, b"https://docs.rs/ballast/idempotency-key")`,
/// written out so that other languages can derive the same keys.
pub const KEY_NAMESPACE: Uuid = Uuid::from_u128(0xf35c_9ecb_294e_5662_a13f_9edc_adca_ad03);

/// Longest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 255;

/// The key an external system deduplicates a write by.
///
/// Keys are made **once per user action** and stored with the domain object —
/// never generated inside an adapter on each attempt. Either derive one
/// deterministically from the entity and the operation ([`IdempotencyKey::v5`]),
/// or create a UUID v7 once ([`IdempotencyKey::v7`]) and keep it.
///
/// Cloning is cheap (a reference count), so every attempt of a call and the
/// durable task that may take over later carry the very same key.
///
/// ```
/// use ballast_vocab::IdempotencyKey;
///
/// let key = IdempotencyKey::v5(42, "register-payment");
/// assert_eq!(key, IdempotencyKey::v5(42, "register-payment")); // deterministic
/// assert_ne!(key, IdempotencyKey::v5(42, "refund"));
///
/// let parsed = IdempotencyKey::parse("order-42/register-payment").unwrap();
/// assert_eq!(parsed.as_str(), "order-42/register-payment");
/// assert!(IdempotencyKey::parse("has space").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(Arc<str>);

/// Why a string is not a valid [`IdempotencyKey`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The string is empty.
    #[error("idempotency key is empty: it needs 1 to 255 visible ASCII characters")]
    Empty,
    /// The string is longer than [`MAX_KEY_LEN`] bytes.
    #[error("idempotency key is {len} bytes long: at most 255 visible ASCII characters are allowed")]
    TooLong {
        /// Length of the rejected string in bytes.
        len: usize,
    },
    /// The string holds a character outside visible ASCII (`!` to `~`).
    #[error("idempotency key has {found:?} at byte {position}: only visible ASCII characters ('!' to '~') are allowed, no spaces or control characters")]
    InvalidChar {
        /// Byte offset of the offending character.
        position: usize,
        /// The offending character.
        found: char,
    },
}

impl IdempotencyKey {
    /// A deterministic UUID v5 key from an entity id and an operation name.
    ///
    /// The UUID's name is `"{len}:{entity_id}{operation}"`, where `len` is the
    /// byte length of the entity id, so `("a/b", "c")` and `("a", "b/c")` give
    /// different keys. The namespace is [`KEY_NAMESPACE`].
    pub fn v5(entity_id: impl fmt::Display, operation: &str) -> Self {
        let entity = entity_id.to_string();
        let name = format!("{}:{}{}", entity.len(), entity, operation);
        Self::from_uuid(Uuid::new_v5(&KEY_NAMESPACE, name.as_bytes()))
    }

    /// A fresh, time-ordered UUID v7 key. Create it once per user action and
    /// store it; a new one on every attempt defeats deduplication.
    pub fn v7() -> Self {
        Self::from_uuid(Uuid::now_v7())
    }

    /// A key from a UUID, in its hyphenated lowercase form.
    pub fn from_uuid(uuid: Uuid) -> Self {
        let mut buf = Uuid::encode_buffer();
        Self(Arc::from(&*uuid.hyphenated().encode_lower(&mut buf)))
    }

    /// Parses a key given by a caller or stored earlier: 1 to 255 visible
    /// ASCII characters (`!` to `~`).
    pub fn parse(s: &str) -> Result<Self, KeyError> {
        if s.is_empty() {
            return Err(KeyError::Empty);
        }
        if let Some((position, found)) = s.char_indices().find(|(_, c)| !c.is_ascii_graphic()) {
            return Err(KeyError::InvalidChar { position, found });
        }
        if s.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong { len: s.len() });
        }
        Ok(Self(Arc::from(s)))
    }

    /// The key as text, as sent in the `Idempotency-Key` header.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({:?})", &*self.0)
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for IdempotencyKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<&str> for IdempotencyKey {
    type Error = KeyError;
    fn try_from(s: &str) -> Result<Self, Self::Error> {
        Self::parse(s)
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = KeyError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<Uuid> for IdempotencyKey {
    fn from(uuid: Uuid) -> Self {
        Self::from_uuid(uuid)
    }
}

impl Serialize for IdempotencyKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for IdempotencyKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_is_the_documented_derivation() {
        assert_eq!(
            KEY_NAMESPACE,
            Uuid::new_v5(&Uuid::NAMESPACE_URL, b"https://docs.rs/ballast/idempotency-key")
        );
    }

    #[test]
    fn v5_is_deterministic_and_unambiguous() {
        assert_eq!(IdempotencyKey::v5("o-1", "pay"), IdempotencyKey::v5("o-1", "pay"));
        assert_ne!(IdempotencyKey::v5("a/b", "c"), IdempotencyKey::v5("a", "b/c"));
        let key = IdempotencyKey::v5(7, "pay");
        assert_eq!(Uuid::parse_str(key.as_str()).unwrap().get_version_num(), 5);
    }

    #[test]
    fn v7_keys_differ_and_parse_back() {
        let a = IdempotencyKey::v7();
        let b = IdempotencyKey::v7();
        assert_ne!(a, b);
        assert_eq!(IdempotencyKey::parse(a.as_str()).unwrap(), a);
    }

    #[test]
    fn parse_rejects_what_a_header_cannot_carry() {
        assert_eq!(IdempotencyKey::parse(""), Err(KeyError::Empty));
        assert_eq!(IdempotencyKey::parse("a b"), Err(KeyError::InvalidChar { position: 1, found: ' ' }));
        assert_eq!(IdempotencyKey::parse("ключ"), Err(KeyError::InvalidChar { position: 0, found: 'к' }));
        assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
        assert_eq!(IdempotencyKey::parse(&"k".repeat(256)), Err(KeyError::TooLong { len: 256 }));
        let msg = KeyError::Empty.to_string();
        assert!(msg.contains("1 to 255"), "{msg}");
    }

    #[test]
    fn serde_round_trip_validates() {
        let key = IdempotencyKey::v5(1, "x");
        let json = serde_json::to_string(&key).unwrap();
        assert_eq!(json, format!("\"{key}\""));
        let back: IdempotencyKey = serde_json::from_str(&json).unwrap();
        assert_eq!(back, key);
        assert!(serde_json::from_str::<IdempotencyKey>("\"bad key\"").is_err());
    }
}
