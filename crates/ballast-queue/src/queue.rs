//! Connecting to a queue and enqueueing tasks.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "postgres")]
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
#[cfg(feature = "sqlite")]
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::metrics::QueueGauges;
use crate::store::any::AnyStore;
#[cfg(feature = "postgres")]
use crate::store::postgres;
#[cfg(feature = "sqlite")]
use crate::store::sqlite;
use crate::store::Store;
use crate::task::NewTask;
use crate::types::EnqueueOutcome;
use crate::Backend;
use crate::DurableSchedule;

/// How long a PostgreSQL connection may sit idle before it is pinged on its
/// way out of the pool (see [`Queue::pg_pool_options`]).
#[cfg(feature = "postgres")]
const PING_IDLE: Duration = Duration::from_secs(10);

/// A durable task queue in one database.
///
/// Cheap to clone; clones share the connection pool.
#[derive(Debug, Clone)]
pub struct Queue {
    pub(crate) store: AnyStore,
    /// Wakes this process's workers when this process enqueues.
    pub(crate) wake: Arc<Notify>,
    /// The gauges [`Queue::record_metrics`] sets.
    pub(crate) gauges: Arc<QueueGauges>,
    /// What tasks enqueued here and workers built on it follow.
    pub(crate) schedule: DurableSchedule,
    /// The ids of tasks this process ended (its workers, its cancels).
    pub(crate) ended: tokio::sync::broadcast::Sender<i64>,
    /// How long a caller-facing statement may go unanswered
    /// ([`answering_within`](Self::answering_within)).
    pub(crate) answer_within: Option<Duration>,
    /// Until when the database counts as not answering, after a statement
    /// it left unanswered: callers are answered at once until then.
    pub(crate) unanswered_until: Arc<std::sync::Mutex<Option<tokio::time::Instant>>>,
}

/// How many ended task ids a slow [`Queue::ended`] receiver may fall behind
/// before it misses some (and is told so).
const ENDED_BACKLOG: usize = 4096;

impl Queue {
    /// The ids of tasks that end — complete, fail for good, or are
    /// cancelled — in this process (its workers, its
    /// [`cancel`](Self::cancel)s) from now on, each as its end is stored.
    /// Tasks ended by other processes on the same database are not told
    /// here: find them with [`ended_among`](Self::ended_among). A receiver
    /// that falls more than 4096 ids behind is told it lagged
    /// ([`RecvError::Lagged`](tokio::sync::broadcast::error::RecvError::Lagged))
    /// and should look again at what it waits for.
    ///
    /// ```no_run
    /// # async fn f(queue: ballast_queue::Queue, id: i64) {
    /// let mut ended = queue.ended();
    /// while let Ok(ended_id) = ended.recv().await {
    ///     if ended_id == id { break }
    /// }
    /// # }
    /// ```
    pub fn ended(&self) -> tokio::sync::broadcast::Receiver<i64> {
        self.ended.subscribe()
    }

    /// Those of `ids` whose task is final (completed, failed, cancelled) or
    /// no longer exists: one statement however many are asked about, for a
    /// process that waits on tasks others may end.
    pub async fn ended_among(&self, ids: &[i64]) -> Result<Vec<i64>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.answered(self.store.ended_among(ids)).await
    }

    /// Connects to `sqlite://path/to/file.db` (created if missing; WAL,
    /// `synchronous = NORMAL`, 5 s busy timeout) or `postgres://…` /
    /// `postgresql://…`.
    ///
    /// PostgreSQL speaks TLS (rustls) where the server offers it; the URL's
    /// `sslmode` says how much to demand, as with libpq. Managed services want
    /// `sslmode=require`, or better
    /// `postgres://app@db.example.com/queue?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem`:
    /// the server's certificate must then chain to that CA (or to a public
    /// one) and name the URL's host, else connecting fails with `invalid peer
    /// certificate: UnknownIssuer` or `certificate not valid for name …`.
    /// There is no default CA file (libpq's `~/.postgresql/root.crt`): name it.
    /// `verify-ca` checks the name too, as `verify-full` does.
    ///
    /// A URL of a backend this build lacks (features `sqlite`, the default,
    /// and `postgres`) is [`Error::BackendNotCompiled`].
    pub async fn connect(url: &str) -> Result<Self> {
        match backend(url)? {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => {
                let options = SqliteConnectOptions::from_str(url)?.create_if_missing(true);
                create_private(options.get_filename())?;
                Self::connect_sqlite(options).await
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                let pool = Self::pg_pool_options().connect(url).await?;
                Ok(Self::from_postgres(pool))
            }
            #[allow(unreachable_patterns)]
            other => Err(not_compiled(other)),
        }
    }

    /// Connects to an existing queue for looking into it ([`stats`](Self::stats),
    /// [`list`](Self::list), [`get`](Self::get)) without changing its
    /// database: every write through this queue fails.
    ///
    /// A SQLite file is opened read-only, as found: its journal mode stays
    /// what it is, a file the process may only read is fine, and a missing file
    /// is [`Error::NoDatabase`], never created. PostgreSQL sessions run with
    /// `default_transaction_read_only = on`. URLs are those of
    /// [`connect`](Self::connect).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), ballast_queue::Error> {
    /// let queue = ballast_queue::Queue::connect_read_only("sqlite://tasks.db").await?;
    /// for kind in queue.stats().await? {
    ///     println!("{}: {} pending", kind.kind, kind.pending);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn connect_read_only(url: &str) -> Result<Self> {
        match backend(url)? {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => {
                let options = SqliteConnectOptions::from_str(url)?
                    .read_only(true)
                    .create_if_missing(false)
                    .busy_timeout(Duration::from_secs(5));
                let pool = SqlitePoolOptions::new().max_connections(2).connect_with(options.clone()).await;
                pool.map(|pool| Self::with_store(AnyStore::Sqlite(sqlite::SqliteStore::new(pool, true))))
                    .map_err(|e| {
                        let path = options.get_filename();
                        if path.exists() {
                            e.into()
                        } else {
                            Error::NoDatabase { path: path.to_owned() }
                        }
                    })
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                let options =
                    PgConnectOptions::from_str(url)?.options([("default_transaction_read_only", "on")]);
                let pool = PgPoolOptions::new().max_connections(2).connect_with(options).await?;
                Ok(Self::from_postgres(pool))
            }
            #[allow(unreachable_patterns)]
            other => Err(not_compiled(other)),
        }
    }

    /// The settings [`connect`](Self::connect) opens the SQLite file at
    /// `path` with — created if missing, WAL, `synchronous = NORMAL`, a 5 s
    /// busy timeout — for a pool of your own beside the queue's. A file these
    /// options create gets the process's umask, where `connect` creates it
    /// readable by its owner only (tasks hold payloads): let the queue create
    /// the file first, or set its permissions yourself.
    ///
    /// ```
    /// let options = ballast_queue::Queue::sqlite_options("tasks.db");
    /// assert_eq!(options.get_filename(), std::path::Path::new("tasks.db"));
    /// ```
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub fn sqlite_options(path: impl AsRef<std::path::Path>) -> SqliteConnectOptions {
        with_queue_settings(SqliteConnectOptions::new().filename(path).create_if_missing(true))
    }

    /// Opens a SQLite queue with `options`, adding WAL, `synchronous = NORMAL`
    /// and a 5 s busy timeout.
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub async fn connect_sqlite(options: SqliteConnectOptions) -> Result<Self> {
        let options = with_queue_settings(options);
        // A local file connection does not go stale: the ping sqlx sends
        // before handing one out would be a round trip through its worker
        // thread on every statement.
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect_with(options)
            .await?;
        Ok(Self::from_sqlite(pool))
    }

    /// A queue on an existing SQLite pool, used as configured: the pool
    /// serves reads, migrations and the admin API. The queue's own writes
    /// (enqueues, claims, outcomes, lease renewals) go through one
    /// connection of its own to the pool's file, opened on first use with
    /// the pool's `synchronous` and busy timeout, on a thread of its own (a
    /// batch of tasks is one message there). The pool's file must be a file:
    /// an in-memory database is [`Error::InMemorySqlite`] on first write.
    /// To look into a queue without writing, use
    /// [`connect_read_only`](Self::connect_read_only).
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub fn from_sqlite(pool: SqlitePool) -> Self {
        Self::with_store(AnyStore::Sqlite(sqlite::SqliteStore::new(pool, false)))
    }

    /// The pool settings [`connect`](Self::connect) uses for PostgreSQL: 10
    /// connections, and a connection is pinged before use only after it sat
    /// idle for 10 s. sqlx pings every connection it hands out by default:
    /// for a worker that is one more round trip, and one more wake-up of the
    /// database, per batch. A connection that dies while busy fails one
    /// statement, which the worker retries.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::str::FromStr;
    /// use ballast_queue::Queue;
    /// use sqlx::postgres::PgConnectOptions;
    ///
    /// let options = PgConnectOptions::from_str("postgres://app@db/q")?.options([("search_path", "jobs")]);
    /// let queue = Queue::from_postgres(Queue::pg_pool_options().connect_with(options).await?);
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub fn pg_pool_options() -> PgPoolOptions {
        PgPoolOptions::new().max_connections(10).test_before_acquire(false).before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
    }

    /// A queue on an existing PostgreSQL pool (e.g. one whose connections set
    /// `search_path` to put the table in a schema of your choice), used as
    /// configured; [`pg_pool_options`](Self::pg_pool_options) are the
    /// settings a worker goes fastest with.
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub fn from_postgres(pool: PgPool) -> Self {
        Self::with_store(AnyStore::Postgres(postgres::PgStore::new(pool)))
    }

    fn with_store(store: AnyStore) -> Self {
        Self {
            store,
            wake: Arc::new(Notify::new()),
            gauges: Arc::default(),
            schedule: DurableSchedule::default(),
            ended: tokio::sync::broadcast::channel(ENDED_BACKLOG).0,
            answer_within: None,
            unanswered_until: Arc::default(),
        }
    }

    /// This queue with `schedule`: every task enqueued through it without a
    /// [`max_attempts`](NewTask::max_attempts) of its own gets the schedule's,
    /// and a [`Worker`](crate::Worker) built on it polls and backs off by it.
    /// Clones made before keep theirs.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), ballast_queue::Error> {
    /// use ballast_queue::{DurableSchedule, NewTask, Queue};
    ///
    /// let schedule = DurableSchedule { max_attempts: 3, ..DurableSchedule::default() };
    /// let queue = Queue::connect("sqlite://tasks.db").await?.with_schedule(schedule);
    /// let task = queue.enqueue(NewTask::new("send-sms", "hello")).await?;
    /// assert_eq!(queue.get(task.id).await?.map(|t| t.max_attempts), Some(3));
    /// # Ok(()) }
    /// ```
    pub fn with_schedule(mut self, schedule: DurableSchedule) -> Self {
        self.schedule = schedule;
        self
    }

    /// The schedule tasks enqueued here and workers built on it follow.
    pub fn schedule(&self) -> &DurableSchedule {
        &self.schedule
    }

    /// The backend this queue stores tasks in.
    pub fn backend(&self) -> Backend {
        self.store.backend()
    }

    /// Whether this database holds the queue's table with every migration
    /// this version knows applied, so the admin API and workers can use it.
    /// Only reads: on a URL naming the wrong database it answers `false`
    /// instead of planting an empty queue there, as [`migrate`](Self::migrate) would.
    pub async fn is_migrated(&self) -> Result<bool> {
        self.store.is_migrated().await
    }

    /// The schema of the database: the highest migration applied (0 before
    /// the first; see [`migrations`](crate::migrations)). Reads only.
    pub async fn applied_schema(&self) -> Result<i64> {
        self.store.applied_schema().await
    }

    /// Creates or upgrades the `ballast_tasks` table. Safe to run on every
    /// start, from several processes at once.
    pub async fn migrate(&self) -> Result<()> {
        self.store.migrate().await
    }

    /// Whether the queue can store a task now: writes one row that must
    /// reach the disk (a full disk, a read-only file system, an unreachable
    /// database fail it) and, for SQLite, checks that the file opened is
    /// still the one at its path ([`Error::FileGone`]). What
    /// [`QueueMonitorBuilder::storage`](crate::QueueMonitorBuilder::storage)
    /// runs for readiness.
    pub async fn check_storage(&self) -> Result<()> {
        self.store.probe_write().await
    }

    /// This queue, answering its callers within `within`: an enqueue or a
    /// look-up (`get`, `get_by_key`, `sequence_head`, `ended_among`) the
    /// database does not answer in that time fails with
    /// [`Error::Unanswered`] instead of waiting for the pool's acquire
    /// timeout (30 s) or a partitioned connection; for as long again after
    /// that, they have a tenth of it. A gateway answers its caller `503` then. An enqueue cut off that way may still
    /// be stored; sent again with the same key, it joins its task. The
    /// worker's own statements are not bounded by it (clones made before
    /// keep theirs).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), ballast_queue::Error> {
    /// use std::time::Duration;
    /// use ballast_queue::Queue;
    ///
    /// let for_callers = Queue::connect("postgres://app@db/q").await?.answering_within(Duration::from_secs(1));
    /// # let _ = for_callers; Ok(()) }
    /// ```
    pub fn answering_within(mut self, within: Duration) -> Self {
        self.answer_within = Some(within);
        self
    }

    /// `statement`, within [`answering_within`](Self::answering_within)'s bound.
    /// After one goes unanswered, the next ones for as long again get a
    /// tenth of the bound: a caller whose request meets the queue twice (a
    /// key's look-up, then its enqueue) waits for about one bound, not two,
    /// and a database that is back answers them as before.
    pub(crate) async fn answered<T>(
        &self,
        statement: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let Some(within) = self.answer_within else { return statement.await };
        let now = tokio::time::Instant::now();
        let until = *self.unanswered_until.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let short = until.is_some_and(|until| now < until);
        let bound = if short { within / 10 } else { within };
        match tokio::time::timeout(bound, statement).await {
            Ok(answer) => answer,
            // Only a whole bound unanswered starts the short window: a slow
            // database that answers within it is not held to a tenth forever.
            Err(_) if short => Err(Error::Unanswered { within: bound }),
            Err(_) => {
                let until = tokio::time::Instant::now() + within;
                *self.unanswered_until.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Some(until);
                Err(Error::Unanswered { within })
            }
        }
    }

    /// Enqueues one task. With a key that already exists for the kind, returns
    /// the existing task with `created: false`.
    pub async fn enqueue(&self, task: NewTask) -> Result<EnqueueOutcome> {
        let mut out = self.enqueue_batch(vec![task]).await?;
        // One task in, one outcome out: the stores return one per task.
        out.pop().ok_or_else(|| Error::Database(sqlx::Error::RowNotFound))
    }

    /// Enqueues several tasks in one transaction: all or none. Outcomes are in
    /// the order of `tasks`.
    pub async fn enqueue_batch(&self, tasks: Vec<NewTask>) -> Result<Vec<EnqueueOutcome>> {
        let max_attempts = self.schedule.max_attempts;
        let tasks = tasks.into_iter().map(|t| t.validate(max_attempts)).collect::<Result<Vec<_>>>()?;
        let out = self.answered(self.store.enqueue(tasks)).await?;
        self.wake.notify_one();
        Ok(out)
    }

    /// Enqueues inside the caller's open transaction (the outbox pattern): the
    /// task exists if and only if the transaction commits.
    ///
    /// `conn` is `&mut *tx` for a `sqlx::Transaction` of the queue's backend
    /// (`SqliteConnection`, or `PgConnection` with the `postgres` feature).
    ///
    /// ```no_run
    /// # async fn f(queue: ballast_queue::Queue, pool: sqlx::SqlitePool) -> Result<(), Box<dyn std::error::Error>> {
    /// use ballast_queue::NewTask;
    ///
    /// let mut tx = pool.begin().await?;
    /// sqlx::query("UPDATE orders SET state = 'paid' WHERE id = 17").execute(&mut *tx).await?;
    /// queue.enqueue_in(&mut *tx, NewTask::new("send-receipt", &17)).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_in<C: TxConnection>(&self, conn: &mut C, task: NewTask) -> Result<EnqueueOutcome> {
        if C::BACKEND != self.backend() {
            return Err(Error::BackendMismatch { queue: self.backend(), tx: C::BACKEND });
        }
        let task = task.validate(self.schedule.max_attempts)?;
        let out = sealed::Sealed::enqueue(conn, &task).await?;
        self.wake.notify_one();
        Ok(out)
    }
}

/// WAL, `synchronous = NORMAL` and a 5 s busy timeout: what a queue's SQLite
/// file is opened with.
#[cfg(feature = "sqlite")]
fn with_queue_settings(options: SqliteConnectOptions) -> SqliteConnectOptions {
    options
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5))
}

/// Creates a missing SQLite file readable and writable by its owner only
/// (0600): tasks hold payloads. SQLite gives its `-wal` and `-shm` files the
/// database file's permissions. An existing file is left as it is.
#[cfg(feature = "sqlite")]
fn create_private(path: &std::path::Path) -> Result<()> {
    let name = path.to_string_lossy();
    if name.is_empty() || name == ":memory:" || name.starts_with("file:") {
        return Ok(());
    }
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
    match open.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::Database(sqlx::Error::Io(e))),
    }
}

/// The backend `url` names, or why none.
fn backend(url: &str) -> Result<Backend> {
    Backend::from_url(url).ok_or_else(|| Error::UnsupportedUrl { url: ballast::redact_url(url) })
}

/// The error for a backend left out of this build.
#[cfg_attr(all(feature = "sqlite", feature = "postgres"), allow(dead_code))]
fn not_compiled(backend: Backend) -> Error {
    let feature = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    Error::BackendNotCompiled { backend, feature }
}

mod sealed {
    use crate::error::Result;
    use crate::store::ValidTask;
    use crate::types::EnqueueOutcome;

    /// Keeps [`super::TxConnection`] closed: only the two backends' connections
    /// can enqueue.
    pub trait Sealed {
        fn enqueue(
            &mut self,
            task: &ValidTask,
        ) -> impl std::future::Future<Output = Result<EnqueueOutcome>> + Send;
    }

    #[cfg(feature = "sqlite")]
    impl Sealed for sqlx::SqliteConnection {
        async fn enqueue(&mut self, task: &ValidTask) -> Result<EnqueueOutcome> {
            crate::store::sqlite::enqueue_one(self, task).await
        }
    }

    #[cfg(feature = "postgres")]
    impl Sealed for sqlx::PgConnection {
        async fn enqueue(&mut self, task: &ValidTask) -> Result<EnqueueOutcome> {
            crate::store::postgres::enqueue_one(self, task).await
        }
    }
}

/// A connection (usually inside a transaction) that [`Queue::enqueue_in`] can
/// write to: `SqliteConnection` or `PgConnection`.
pub trait TxConnection: sealed::Sealed + Send {
    /// Which backend the connection belongs to.
    const BACKEND: Backend;
}

#[cfg(feature = "sqlite")]
impl TxConnection for SqliteConnection {
    const BACKEND: Backend = Backend::Sqlite;
}

#[cfg(feature = "postgres")]
impl TxConnection for PgConnection {
    const BACKEND: Backend = Backend::Postgres;
}

#[cfg(all(test, unix, feature = "sqlite"))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// Tasks hold payloads: a queue file, its WAL and its shared memory are
    /// the owner's alone.
    #[tokio::test]
    async fn a_new_sqlite_queue_is_readable_by_its_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db");
        let queue = Queue::connect(&format!("sqlite://{}", path.display())).await.unwrap();
        queue.migrate().await.unwrap();
        queue.enqueue(NewTask::new("k", &"card 4111")).await.unwrap();
        for suffix in ["", "-wal", "-shm"] {
            let file = dir.path().join(format!("tasks.db{suffix}"));
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}: {mode:o}", file.display());
        }
    }
}
