//! What the queue reports to its caller while it opens its database and
//! runs: [`Error`]. Building a worker has errors of its own
//! ([`WorkerBuildError`](crate::WorkerBuildError)).

use crate::Backend;

/// What the queue reports while it opens its database and runs, in the
/// order of those phases: opening (`UnsupportedUrl` to `InMemorySqlite`),
/// then every statement (`Database`, `FileGone`), then what a caller asked
/// for (`Payload` to `InvalidArgument`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The connection URL names no supported backend.
    #[error("unsupported database URL {url:?}: use sqlite://path/to/file.db or postgres://user@host/db")]
    UnsupportedUrl {
        /// The URL as given, its secrets masked ([`ballast::redact_url`]).
        url: String,
    },
    /// The URL names a backend this build of the crate was compiled without.
    #[error(
        "{backend} is not compiled in: enable ballast-queue's `{feature}` feature \
         (ballast-queue = {{ features = [\"{feature}\"] }})"
    )]
    BackendNotCompiled {
        /// The backend the URL names.
        backend: Backend,
        /// The feature that adds it: `sqlite` or `postgres`.
        feature: &'static str,
    },
    /// A read-only open named a SQLite file that does not exist.
    #[error("no SQLite database at {path:?}: a read-only queue never creates one; check the URL")]
    NoDatabase {
        /// The file the URL names.
        path: std::path::PathBuf,
    },
    /// The database refused or failed a statement.
    #[error("database error: {0}; check that the database is reachable and that Queue::migrate() has run")]
    Database(#[from] sqlx::Error),
    /// The database did not answer within the queue's bound for its callers
    /// ([`Queue::answering_within`](crate::Queue::answering_within)).
    #[error(
        "the queue's database did not answer within {within:?}; check that it is reachable. A task being \
         stored may have been stored: sending it again with the same key joins it"
    )]
    Unanswered {
        /// The bound.
        within: std::time::Duration,
    },
    /// A SQLite queue in memory: its workers' connection could not open the
    /// same database.
    #[error("a SQLite queue must be a file (sqlite://path/to/file.db): an in-memory database cannot be shared by the queue's connections")]
    InMemorySqlite,
    /// The queue's SQLite file was removed or replaced while the queue had
    /// it open: what is written now goes to a file nobody opens again.
    #[error(
        "the queue's SQLite file {path:?} was removed or replaced since it was opened: a task stored now \
         would be lost at the next start, so none is; restore the file (or accept its loss) and restart"
    )]
    FileGone {
        /// The file's path.
        path: std::path::PathBuf,
    },
    /// A task's payload could not be turned into JSON.
    #[error("payload of task kind {kind:?} cannot be serialized to JSON: {source}")]
    Payload {
        /// The task kind.
        kind: String,
        /// Why serialization failed.
        source: serde_json::Error,
    },
    /// A task kind that is not a short identifier (see [`check_kind`](crate::check_kind)).
    #[error("invalid task kind {kind:?}: {reason}; use 1 to 128 characters from A-Z a-z 0-9 . _ - : /")]
    InvalidKind {
        /// The kind given (cut at 128 characters).
        kind: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A sequence name that is not one (see [`check_sequence`](crate::check_sequence)).
    #[error("invalid sequence {sequence:?}: {reason}; use 1 to 200 characters from A-Z a-z 0-9 . _ - : /, such as customer/42")]
    InvalidSequence {
        /// The name given (cut at 200 characters).
        sequence: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A task was built with `max_attempts` out of range.
    #[error("max_attempts must be between 1 and {max} (got {got}); R-RES-RE-5 suggests 10")]
    InvalidMaxAttempts {
        /// The value given.
        got: u32,
        /// The largest value the table can store.
        max: u32,
    },
    /// A transaction of one backend was used with a queue of the other.
    #[error("this queue stores tasks in {queue} but the transaction is a {tx} one: enqueue inside a transaction of the queue's own database")]
    BackendMismatch {
        /// The queue's backend.
        queue: Backend,
        /// The transaction's backend.
        tx: Backend,
    },
    /// An argument an admin call cannot take.
    #[error("{0}")]
    InvalidArgument(String),
    /// PostgreSQL aborted the statement to break a deadlock or a
    /// serialization conflict with another transaction, again after it was
    /// retried: nothing of it was stored. Not a fault of the schema or the
    /// connection: send it again.
    #[error(
        "PostgreSQL aborted {what} to break a deadlock or a serialization conflict with another \
         transaction ({source}), {tries} times: nothing of it was stored; send it again"
    )]
    Conflict {
        /// What was aborted: `an enqueue`, `a lease renewal`, `a settle`.
        what: &'static str,
        /// How many times it was tried.
        tries: usize,
        /// PostgreSQL's error.
        source: sqlx::Error,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
