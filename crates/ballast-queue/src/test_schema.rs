//! A fresh PostgreSQL schema for the crate's own tests that need one:
//! `None` (said on stderr) without `BALLAST_TEST_PG`, a loud failure when it
//! is set and the server cannot be reached.

use sqlx::postgres::PgConnectOptions;

/// A schema made for one test, dropped by [`TestSchema::drop_it`].
pub(crate) struct TestSchema {
    url: String,
    name: String,
    /// Connection options whose `search_path` is the schema.
    pub options: PgConnectOptions,
}

impl TestSchema {
    pub(crate) async fn create() -> Option<Self> {
        let Ok(url) = std::env::var("BALLAST_TEST_PG") else {
            eprintln!("skipped: BALLAST_TEST_PG not set");
            return None;
        };
        let name = format!("t_{}", uuid::Uuid::now_v7().simple());
        let admin = sqlx::PgPool::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("BALLAST_TEST_PG={url} is set but PostgreSQL is unreachable: {e}"));
        sqlx::query(&format!("CREATE SCHEMA {name}")).execute(&admin).await.unwrap();
        let options = <PgConnectOptions as std::str::FromStr>::from_str(&url)
            .unwrap()
            .options([("search_path", name.as_str())]);
        Some(Self { url, name, options })
    }

    pub(crate) async fn drop_it(self) {
        let admin = sqlx::PgPool::connect(&self.url).await.unwrap();
        sqlx::query(&format!("DROP SCHEMA {} CASCADE", self.name)).execute(&admin).await.unwrap();
    }
}
