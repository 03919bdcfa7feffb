//! What the fleet's tests share: a fresh schema on the PostgreSQL of
//! `BALLAST_TEST_PG`, and a replica's identity.

use ballast_fleet::Identity;

/// The URL of a new schema named after `prefix` on `BALLAST_TEST_PG`;
/// `None` (the test says it was skipped) when the variable is not set. A
/// set variable and a database that does not answer fail the test.
pub async fn database(prefix: &str) -> Option<String> {
    let Ok(url) = std::env::var("BALLAST_TEST_PG") else {
        eprintln!("skipped: BALLAST_TEST_PG not set");
        return None;
    };
    let schema = format!("{prefix}_{}", uuid::Uuid::now_v7().simple());
    let admin = sqlx::PgPool::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("BALLAST_TEST_PG={url} is set but PostgreSQL is unreachable: {e}"));
    sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&admin).await.unwrap();
    let separator = if url.contains('?') { '&' } else { '?' };
    Some(format!("{url}{separator}options=-c%20search_path%3D{schema}"))
}

/// A replica on this host that loaded the configuration of `digest`.
pub fn me(digest: &str) -> Identity {
    Identity {
        host: "gw".into(),
        pid: std::process::id(),
        version: "0.1.0".into(),
        config_digest: digest.into(),
        admin: "127.0.0.1:9464".into(),
        queue_schema: Some(6),
    }
}
