//! Which database a queue URL names: read by the queue when it connects and
//! by `ballast lint` when it checks `[queue] url`.

use std::fmt;

/// The database a queue stores its tasks in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Embedded SQLite file (the default).
    Sqlite,
    /// PostgreSQL, for many workers on many hosts.
    Postgres,
}

impl Backend {
    /// The backend a queue URL names: `sqlite:…` (`sqlite://file.db`) or
    /// `postgres://…` / `postgresql://…`; `None` for anything else. The one
    /// place a URL's scheme is read.
    ///
    /// ```
    /// use ballast_vocab::queue::Backend;
    ///
    /// assert_eq!(Backend::from_url("sqlite://tasks.db"), Some(Backend::Sqlite));
    /// assert_eq!(Backend::from_url("postgresql://app@db/q"), Some(Backend::Postgres));
    /// assert_eq!(Backend::from_url("mysql://db/q"), None);
    /// ```
    pub fn from_url(url: &str) -> Option<Backend> {
        if url.starts_with("sqlite:") {
            Some(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Backend::Postgres)
        } else {
            None
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
        })
    }
}
