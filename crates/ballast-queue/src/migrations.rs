//! The queue's schema over its versions, one per migration (each backend's
//! SQL in `migrations/sqlite/` and `migrations/postgres/`), and what each
//! asks of the replicas still running while it is applied.
//!
//! A rolling upgrade runs two versions on one database, so within a minor
//! version every migration is additive: new columns are nullable or have a
//! default, new indexes and functions are added, and nothing the previous
//! version reads or writes is dropped or renamed (an index may be dropped:
//! a query without it is slower, never wrong). Each migration says from
//! which schema on a replica keeps working once it is applied
//! ([`Migration::oldest_reader`]): `ballast queue migrate --check` reads
//! that against the schema each live replica speaks.
//!
//! ```
//! use ballast_queue::migrations::{compatible, pending, SCHEMA};
//!
//! // A database at version 5, a replica of a version that speaks 5.
//! assert!(compatible(5, &pending(5)).is_ok());
//! assert_eq!(pending(SCHEMA).len(), 0);
//! ```

/// One migration of the queue's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// Its version: the schema it brings the database to.
    pub version: i64,
    /// What it does, in a few words.
    pub name: &'static str,
    /// The oldest schema whose replicas keep working once it is applied
    /// (1 for an additive migration).
    pub oldest_reader: i64,
}

/// Every migration, in order.
pub const HISTORY: &[Migration] = &[
    Migration { version: 1, name: "the tasks table", oldest_reader: 1 },
    Migration { version: 2, name: "an index of unfinished tasks", oldest_reader: 1 },
    Migration { version: 3, name: "a completed task's result", oldest_reader: 1 },
    Migration { version: 4, name: "the storage probe's table", oldest_reader: 1 },
    Migration { version: 5, name: "sequences: writes to one entity in order", oldest_reader: 1 },
    Migration { version: 6, name: "the claim walks pending tasks only (PostgreSQL)", oldest_reader: 1 },
    Migration { version: 7, name: "keys bound to their requests", oldest_reader: 1 },
];

/// The schema this version speaks: every migration it knows applied.
pub const SCHEMA: i64 = HISTORY.len() as i64;

/// The migrations a database at schema `applied` still needs.
pub fn pending(applied: i64) -> Vec<Migration> {
    HISTORY.iter().filter(|m| m.version > applied).copied().collect()
}

/// Whether a replica speaking schema `speaks` keeps working once `pending`
/// is applied; else the first migration it would not survive.
pub fn compatible(speaks: i64, pending: &[Migration]) -> Result<(), Migration> {
    match pending.iter().find(|m| m.oldest_reader > speaks) {
        Some(breaking) => Err(*breaking),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_run_from_one_without_a_gap() {
        for (i, m) in HISTORY.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "{m:?}");
            assert!(m.oldest_reader >= 1 && m.oldest_reader <= m.version, "{m:?}");
        }
    }

    #[test]
    fn a_migration_that_breaks_old_readers_is_named() {
        let breaking = Migration { version: 9, name: "x", oldest_reader: 8 };
        let additive = Migration { version: 8, name: "y", oldest_reader: 1 };
        assert_eq!(compatible(7, &[additive, breaking]), Err(breaking));
        assert_eq!(compatible(8, &[additive, breaking]), Ok(()));
    }
}
