//! The kind of a call — a read, a keyed write, a write made once — as the
//! policy's entry points, a system's routes, events and metrics all name it
//! (R-RES-RE-1, R-RES-RE-X1). One enum under one set of words.

use std::fmt;
use std::str::FromStr;

/// The three kinds of operation (R-RES-RE-1, R-RES-RE-X1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// A read (GET-equivalent): no side effect, retried.
    Read,
    /// A write carrying an idempotency key the system deduplicates by:
    /// retried. One name wherever a keyed write is named: this kind, its
    /// `ballast::Operation`, a route's `keyed_write`, the metrics' `kind` label.
    #[serde(alias = "write")]
    KeyedWrite,
    /// A write without a key: exactly one attempt, never retried.
    WriteOnce,
}

impl OpKind {
    /// `"read"`, `"keyed_write"` or `"write_once"`, as used in events and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::KeyedWrite => "keyed_write",
            OpKind::WriteOnce => "write_once",
        }
    }

    /// Every kind, by its name in a file.
    pub const ALL: [OpKind; 3] = [OpKind::Read, OpKind::KeyedWrite, OpKind::WriteOnce];

    /// Whether this kind may be retried at all.
    pub const fn is_retryable(self) -> bool {
        !matches!(self, OpKind::WriteOnce)
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OpKind {
    type Err = UnknownKind;

    /// `"read"`, `"keyed_write"` or `"write_once"`.
    ///
    /// ```
    /// use ballast_vocab::OpKind;
    ///
    /// assert_eq!("keyed_write".parse::<OpKind>(), Ok(OpKind::KeyedWrite));
    /// assert!("keyed".parse::<OpKind>().unwrap_err().to_string().contains("\"keyed_write\""));
    /// ```
    fn from_str(s: &str) -> Result<Self, UnknownKind> {
        OpKind::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| UnknownKind(s.to_owned()))
    }
}

/// A word that names no [`OpKind`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("route kind {0:?} does not exist: use \"read\", \"keyed_write\" or \"write_once\"")]
pub struct UnknownKind(pub String);
