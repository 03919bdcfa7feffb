//! `ballast queue migrate [--check]` on a database an earlier version left:
//! the check says what is pending and changes nothing; the migration
//! applies it.

mod support;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use support::ballast;

const SQLITE: [&str; 5] = [
    include_str!("../../ballast-queue/migrations/sqlite/0001_tasks.sql"),
    include_str!("../../ballast-queue/migrations/sqlite/0002_live_index.sql"),
    include_str!("../../ballast-queue/migrations/sqlite/0003_task_result.sql"),
    include_str!("../../ballast-queue/migrations/sqlite/0004_probe.sql"),
    include_str!("../../ballast-queue/migrations/sqlite/0005_sequence.sql"),
];

fn said(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[tokio::test]
async fn a_check_says_what_is_pending_and_the_migration_applies_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let pool = SqlitePoolOptions::new()
        .connect_with(SqliteConnectOptions::new().filename(&path).create_if_missing(true))
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE ballast_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER)")
        .execute(&pool)
        .await
        .unwrap();
    for (version, sql) in (1..).zip(SQLITE) {
        sqlx::raw_sql(sql).execute(&pool).await.unwrap();
        sqlx::query("INSERT INTO ballast_migrations (version) VALUES (?1)")
            .bind(version)
            .execute(&pool)
            .await
            .unwrap();
    }
    pool.close().await;
    let db = format!("sqlite://{}", path.display());
    let before = std::fs::read(&path).unwrap();

    let check = ballast(&["queue", "--db", &db, "migrate", "--check"]);
    let text = said(&check);
    assert_eq!(check.status.code(), Some(0), "{text}");
    assert!(text.contains("is at schema 5; this version speaks schema 7"), "{text}");
    assert!(
        text.contains("pending: 6 ") && text.contains("pending: 7 keys bound to their requests"),
        "{text}"
    );
    assert!(text.contains("the fleet can take them"), "{text}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "a check changes nothing");

    let json = ballast(&["queue", "--db", &db, "--format", "json", "migrate", "--check"]);
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!((report["applied"].as_i64(), report["fleet_can_take_them"].as_bool()), (Some(5), Some(true)));

    let applied = ballast(&["queue", "--db", &db, "migrate"]);
    assert!(
        said(&applied).contains("applied 2 migration(s): the database is at schema 7"),
        "{}",
        said(&applied)
    );
    let again = ballast(&["queue", "--db", &db, "migrate", "--check"]);
    assert!(said(&again).contains("nothing to apply"), "{}", said(&again));
}
