//! What the fleet reports to its caller.

/// Why the fleet could not be joined or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// The queue's database is not PostgreSQL: a fleet shares one.
    #[error(
        "a fleet shares its state in PostgreSQL, and this queue is {0}: `scope = \"fleet\"` and `ballast fleet` \
         need [queue] url = \"postgres://…\""
    )]
    NotPostgres(String),
    /// The database did not answer within the connect timeout.
    #[error(
        "the fleet's database did not answer within {0:?}: check that PostgreSQL is up and reachable at \
         [queue] url"
    )]
    Unreachable(std::time::Duration),
    /// The database refused or failed a statement.
    #[error("fleet database error: {0}")]
    Database(#[from] sqlx::Error),
}
