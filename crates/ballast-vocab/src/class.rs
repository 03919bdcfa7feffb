//! Whether asking again can help: the two classes every failure falls in
//! (R-RES-RE-X2), shared by the in-memory policy, the HTTP client's verdicts
//! and the checker's `retry_on`.

/// Whether asking again can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// A failure that may pass: a timeout, a 5xx, a refused or reset connection.
    Transient,
    /// A contract error: the system answered and asking again gives the same answer.
    Permanent,
}

impl Class {
    /// `"transient"` or `"permanent"`, as used in events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Transient => "transient",
            Class::Permanent => "permanent",
        }
    }
}
