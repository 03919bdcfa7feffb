//! Following an accepted write to its end: a route whose system answers
//! `202 Accepted` with a status URL, read until the operation ends.

use std::time::Duration;

/// How long an accepted operation is followed unless the route says.
pub const DEFAULT_FOLLOW_DEADLINE: Duration = Duration::from_secs(3600);

/// A route whose writes a system accepts with `202 Accepted` and a status
/// URL in `Location` (the long-running-operation pattern; RFC 7240's
/// `respond-async`): the gateway answers its caller with a task of its own,
/// and the worker reads the status URL, as a read under the system's
/// policy, until the operation ends — a status other than 202, or, with a
/// [`field`](Self::field), that JSON field of the answer reaching one of
/// its final values — or the [`deadline`](Self::deadline) passes.
///
/// ```
/// use std::time::Duration;
/// use ballast_vocab::http::routes::Follow;
///
/// let follow = Follow::new().field("status", ["succeeded", "failed"]).deadline(Duration::from_secs(600));
/// assert_eq!(follow.field_name(), Some("status"));
/// assert!(follow.is_done_value("failed") && !follow.is_done_value("running"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Follow {
    field: Option<String>,
    done: Vec<String>,
    deadline: Duration,
}

impl Default for Follow {
    fn default() -> Self {
        Self::new()
    }
}

impl Follow {
    /// Followed until a status other than 202, for at most
    /// [`DEFAULT_FOLLOW_DEADLINE`].
    pub fn new() -> Self {
        Follow { field: None, done: Vec::new(), deadline: DEFAULT_FOLLOW_DEADLINE }
    }

    /// Ends also when the JSON field `field` (dotted for a nested one:
    /// `operation.status`) of a 200 reaches one of `done`; a 200 with
    /// another value is still running.
    pub fn field<S: Into<String>>(mut self, field: &str, done: impl IntoIterator<Item = S>) -> Self {
        self.field = Some(field.to_owned());
        self.done = done.into_iter().map(Into::into).collect();
        self
    }

    /// Followed for at most `deadline` from the write's acceptance; the
    /// task fails then, and alerts.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The field that says the operation ended, if any.
    pub fn field_name(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// The field's final values.
    pub fn done_values(&self) -> impl Iterator<Item = &str> {
        self.done.iter().map(String::as_str)
    }

    /// Whether `value` of the field is a final one.
    pub fn is_done_value(&self, value: &str) -> bool {
        self.done.iter().any(|d| d == value)
    }

    /// The longest the operation is followed.
    pub fn deadline_after(&self) -> Duration {
        self.deadline
    }
}
