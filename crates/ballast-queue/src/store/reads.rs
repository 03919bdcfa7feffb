//! The admin API's reads of tasks, the same on both backends: one reading
//! of a row into a [`TaskInfo`], and one order of binds for each read, over
//! each dialect's own SQL ([`ReadSql`]). Times come out of both as
//! microseconds since the Unix epoch; JSON as text.

use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Type};

use crate::error::Result;
use crate::types::{from_micros, ListFilter, TaskInfo, TaskState};

/// A backend's statements for the reads, each taking its binds in the
/// order written here.
pub(super) struct ReadSql {
    /// Tasks by `$1` kind (or a kind under it, `kind/…`; NULL: any), `$2`
    /// state (NULL: any), ids above `$3` and below `$5`, at most `$4`,
    /// ordered by id in the direction `{order}` names.
    pub list: &'static str,
    /// The task of id `$1`.
    pub get: &'static str,
    /// The task of kind `$1` holding idempotency key `$2`.
    pub get_by_key: &'static str,
}

/// The tasks `filter` asks for, `sql` a backend's [`ReadSql::list`].
pub(super) async fn list<DB>(pool: &Pool<DB>, sql: &str, filter: &ListFilter) -> Result<Vec<TaskInfo>>
where
    DB: Database,
    for<'c> &'c Pool<DB>: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    for<'r> i64: Decode<'r, DB>,
    for<'r> i32: Decode<'r, DB> + Type<DB>,
    for<'n> &'n str: ColumnIndex<DB::Row>,
{
    let order = if filter.newest_first { "DESC" } else { "ASC" };
    let rows = sqlx::query(&sql.replace("{order}", order))
        .bind(filter.kind.as_deref())
        .bind(filter.state.map(TaskState::as_str))
        .bind(filter.after_id)
        .bind(i64::from(filter.limit))
        .bind(filter.before_id.unwrap_or(i64::MAX))
        .fetch_all(pool)
        .await?;
    rows.iter().map(task_info).collect()
}

/// The task `query` (a backend's [`ReadSql::get`] or
/// [`ReadSql::get_by_key`], its binds given) finds, if any.
pub(super) async fn one<'q, DB>(
    pool: &Pool<DB>,
    query: sqlx::query::Query<'q, DB, DB::Arguments<'q>>,
) -> Result<Option<TaskInfo>>
where
    DB: Database,
    for<'c> &'c Pool<DB>: Executor<'c, Database = DB>,
    DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    for<'r> i64: Decode<'r, DB> + Type<DB>,
    for<'r> i32: Decode<'r, DB> + Type<DB>,
    for<'n> &'n str: ColumnIndex<DB::Row>,
{
    let row = query.fetch_optional(pool).await?;
    row.as_ref().map(task_info).transpose()
}

/// A row of the backends' task columns as the admin API shows it.
pub(super) fn task_info<R: Row>(row: &R) -> Result<TaskInfo>
where
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i32: Decode<'r, R::Database> + Type<R::Database>,
    for<'n> &'n str: ColumnIndex<R>,
{
    let state: String = row.try_get("state")?;
    let payload: String = row.try_get("payload")?;
    let errors: String = row.try_get("errors")?;
    let decode = |e: Box<dyn std::error::Error + Send + Sync>| sqlx::Error::Decode(e);
    let count = |n: i32| u32::try_from(n).unwrap_or(0);
    Ok(TaskInfo {
        id: row.try_get("id")?,
        kind: row.try_get("kind")?,
        payload: serde_json::from_str(&payload).map_err(|e| decode(e.into()))?,
        key: row.try_get("idempotency_key")?,
        state: state.parse::<TaskState>().map_err(|e| decode(e.into()))?,
        attempt: count(row.try_get("attempt")?),
        max_attempts: count(row.try_get("max_attempts")?),
        run_at: from_micros(row.try_get("run_at")?),
        lease_owner: row.try_get("lease_owner")?,
        lease_expires_at: row.try_get::<Option<i64>, _>("lease_expires_at")?.map(from_micros),
        last_error: row.try_get("last_error")?,
        errors: serde_json::from_str(&errors).map_err(|e| decode(e.into()))?,
        created_at: from_micros(row.try_get("created_at")?),
        updated_at: from_micros(row.try_get("updated_at")?),
        finalized_at: row.try_get::<Option<i64>, _>("finalized_at")?.map(from_micros),
        result: row
            .try_get::<Option<String>, _>("result")?
            .map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(|e| decode(e.into()))?,
        sequence: row.try_get("sequence")?,
    })
}
