//! The fleet's tables and its lease function, created beside the queue's
//! table in the same database (`migrations/0001_fleet.sql`), under an
//! advisory lock so that replicas starting together do not race.

use sqlx::PgPool;

use crate::error::FleetError;

const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../migrations/0001_fleet.sql")),
    (2, include_str!("../migrations/0002_queue_schema.sql")),
    (3, include_str!("../migrations/0003_ceiling_expiry.sql")),
    (4, include_str!("../migrations/0004_samples_sent.sql")),
    (5, include_str!("../migrations/0005_fair_shares.sql")),
];

/// Serializes concurrent migrations across replicas (apart from the queue's).
const LOCK: i64 = 0x6261_6c6c_6173_7402;

/// Creates or upgrades the fleet's tables; safe on every start, from every replica.
pub(crate) async fn migrate(pool: &PgPool) -> Result<(), FleetError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(LOCK).execute(&mut *tx).await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS ballast_fleet_migrations (
            version BIGINT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    )
    .execute(&mut *tx)
    .await?;
    for &(version, sql) in MIGRATIONS {
        let done: Option<i64> =
            sqlx::query_scalar("SELECT version FROM ballast_fleet_migrations WHERE version = $1")
                .bind(version)
                .fetch_optional(&mut *tx)
                .await?;
        if done.is_none() {
            sqlx::raw_sql(sql).execute(&mut *tx).await?;
            sqlx::query("INSERT INTO ballast_fleet_migrations (version) VALUES ($1)")
                .bind(version)
                .execute(&mut *tx)
                .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}
