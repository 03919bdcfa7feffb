//! Tasks as a caller makes them: [`NewTask`], its options, and the checks a
//! task passes before it is stored.

use std::time::{Duration, SystemTime};

use ballast::IdempotencyKey;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::ValidTask;
use crate::types::micros;
use crate::MAX_KIND_LEN;

/// Checks a task kind: 1 to [`MAX_KIND_LEN`] characters from `A–Z a–z 0–9`
/// and `. _ - : /`. A kind names a handler, a metric label and a column of
/// every admin view, so it is a short identifier, never data.
///
/// ```
/// use ballast_queue::check_kind;
///
/// assert!(check_kind("ballast.http.delivery").is_ok());
/// assert!(check_kind("").is_err());
/// assert!(check_kind("send sms").is_err());
/// ```
pub fn check_kind(kind: &str) -> Result<()> {
    match name_problem(kind, MAX_KIND_LEN, "it is longer than 128 bytes") {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidKind { kind: kind.chars().take(MAX_KIND_LEN).collect(), reason }),
    }
}

/// The family of a member kind (`ballast.http.delivery` of
/// `ballast.http.delivery/pay`): its part before the first `/`.
pub(crate) fn family_of(kind: &str) -> Option<&str> {
    kind.split_once('/').map(|(family, _)| family)
}

/// What is wrong with `name` as a kind or a sequence name, if anything.
fn name_problem(name: &str, max: usize, too_long: &'static str) -> Option<&'static str> {
    if name.is_empty() {
        Some("it is empty")
    } else if name.len() > max {
        Some(too_long)
    } else if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-:/".contains(&b)) {
        Some("it has characters other than A-Z a-z 0-9 . _ - : /")
    } else {
        None
    }
}

/// The longest sequence name, in bytes.
pub const MAX_SEQUENCE_LEN: usize = 200;

/// Checks that `sequence` is a sequence name: 1 to 200 characters from
/// A-Z a-z 0-9 . _ - : / (`customer/42`).
pub fn check_sequence(sequence: &str) -> Result<()> {
    match name_problem(sequence, MAX_SEQUENCE_LEN, "it is longer than 200 bytes") {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidSequence {
            sequence: sequence.chars().take(MAX_SEQUENCE_LEN).collect(),
            reason,
        }),
    }
}

/// A task to enqueue: its kind, JSON payload and options.
///
/// ```
/// use ballast::IdempotencyKey;
/// use ballast_queue::NewTask;
///
/// let task = NewTask::new("send-sms", &("+3100000000", "hello"))
///     .key(IdempotencyKey::v5("order-17", "send-sms"))
///     .max_attempts(5);
/// assert_eq!(task.kind(), "send-sms");
/// ```
#[derive(Debug, derive_setters::Setters)]
#[setters(generate = false)]
pub struct NewTask {
    pub(crate) kind: String,
    // Kept until enqueue so the builder chain stays infallible; the error
    // surfaces from `enqueue` with the task kind attached.
    pub(crate) payload: Result<String, serde_json::Error>,
    /// Deduplicates by `(kind, key)`: enqueueing the same key again returns the
    /// existing task. The handler receives the key (R-RES-RE-1).
    #[setters(generate, strip_option)]
    pub(crate) key: Option<IdempotencyKey>,
    /// Runs the task no earlier than the time given.
    #[setters(generate, strip_option)]
    pub(crate) run_at: Option<SystemTime>,
    /// Attempts before the task is marked failed and the alert fires
    /// (default: the queue's [`DurableSchedule`](crate::DurableSchedule), 10
    /// unless [`Queue::with_schedule`](crate::Queue::with_schedule) says otherwise).
    #[setters(generate, strip_option)]
    pub(crate) max_attempts: Option<u32>,
    /// The sequence the task belongs to, usually the entity its write
    /// changes (`customer/42`): a sequence's tasks run one at a time, in
    /// the order they were enqueued; one enqueued behind an unfinished one
    /// waits held until it completes or an operator cancels or releases it.
    /// 1 to 200 characters from A-Z a-z 0-9 . _ - : /.
    #[setters(generate, strip_option, into)]
    pub(crate) sequence: Option<String>,
}

/// The furthest [`NewTask::run_after`] goes.
const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl NewTask {
    /// A task of `kind` whose handler will receive `payload`.
    pub fn new<P: Serialize + ?Sized>(kind: impl Into<String>, payload: &P) -> Self {
        Self {
            kind: kind.into(),
            payload: serde_json::to_string(payload),
            key: None,
            run_at: None,
            max_attempts: None,
            sequence: None,
        }
    }

    /// Runs the task no earlier than `delay` from now (a delay past what
    /// the clock holds is a century).
    #[must_use]
    pub fn run_after(self, delay: Duration) -> Self {
        let now = SystemTime::now();
        self.run_at(now.checked_add(delay).unwrap_or(now + CENTURY))
    }

    /// The task kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The task checked for storing, with `default_max_attempts` unless it has its own.
    pub(crate) fn validate(self, default_max_attempts: u32) -> Result<ValidTask> {
        check_kind(&self.kind)?;
        let max = i32::MAX as u32;
        let max_attempts = self.max_attempts.unwrap_or(default_max_attempts);
        if max_attempts == 0 || max_attempts > max {
            return Err(Error::InvalidMaxAttempts { got: max_attempts, max });
        }
        if let Some(sequence) = &self.sequence {
            check_sequence(sequence)?;
        }
        let payload = self.payload.map_err(|source| Error::Payload { kind: self.kind.clone(), source })?;
        Ok(ValidTask {
            kind: self.kind,
            payload,
            key: self.key.map(|k| k.as_str().to_owned()),
            run_at: self.run_at.map(micros),
            max_attempts: max_attempts as i32,
            sequence: self.sequence,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DEFAULT_MAX_ATTEMPTS;

    #[test]
    fn kinds_are_short_identifiers() {
        for good in ["a", "send-sms", "ballast.http.delivery", "billing:charge/v2", &"k".repeat(MAX_KIND_LEN)]
        {
            assert!(NewTask::new(good, &1).validate(DEFAULT_MAX_ATTEMPTS).is_ok(), "{good}");
        }
        for bad in ["", " ", "send sms", "kind\u{1b}[2J", "ключ", &"k".repeat(MAX_KIND_LEN + 1)] {
            let err = NewTask::new(bad, &1).validate(DEFAULT_MAX_ATTEMPTS).unwrap_err();
            assert!(matches!(err, Error::InvalidKind { .. }), "{bad:?}: {err}");
        }
    }

    #[test]
    fn invalid_options_are_errors_not_panics() {
        assert!(matches!(
            NewTask::new("k", &1).max_attempts(0).validate(DEFAULT_MAX_ATTEMPTS),
            Err(Error::InvalidMaxAttempts { got: 0, .. })
        ));
        let bad = std::collections::HashMap::from([((1, 2), 3)]);
        assert!(matches!(NewTask::new("k", &bad).validate(DEFAULT_MAX_ATTEMPTS), Err(Error::Payload { .. })));
    }
}
