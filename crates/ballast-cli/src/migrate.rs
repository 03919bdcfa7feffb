//! `ballast queue migrate [--check]`: the migrations this version would
//! apply to the queue's database, and whether the replicas running on it
//! (the fleet's table, on PostgreSQL) keep working once they are applied —
//! the question a rolling upgrade asks before its first new replica starts.

use ballast_queue::migrations::{compatible, pending, Migration, SCHEMA};
use ballast_queue::{Backend, Queue};
use serde_json::json;

use crate::queue::Output;

/// A live replica and the schema it speaks.
struct Running {
    name: String,
    version: String,
    speaks: i64,
    /// Whether it said which (replicas of versions before it did not).
    said: bool,
}

/// What `migrate` found, or did with `--check` off.
pub(crate) async fn migrate(url: &str, shown: &str, reader: &Queue, check: bool) -> anyhow::Result<Output> {
    let applied = reader.applied_schema().await?;
    let todo = pending(applied);
    let running = match reader.backend() {
        Backend::Postgres => live_replicas(url, applied).await?,
        Backend::Sqlite => Vec::new(),
    };
    let blocked: Vec<(&Running, Migration)> =
        running.iter().filter_map(|r| compatible(r.speaks, &todo).err().map(|m| (r, m))).collect();
    let mut human =
        format!("the database at {shown} is at schema {applied}; this version speaks schema {SCHEMA}\n");
    if applied > SCHEMA {
        human.push_str(&format!(
            "the database is newer than this version: nothing to apply (its replicas keep working if the \
             migrations past {SCHEMA} are additive, as within a minor version they are)\n"
        ));
    }
    for m in &todo {
        let reads = if m.oldest_reader <= 1 {
            "additive: replicas of every schema keep working".to_owned()
        } else {
            format!("replicas of schema {} or newer keep working", m.oldest_reader)
        };
        human.push_str(&format!("pending: {} {} ({reads})\n", m.version, m.name));
    }
    for r in &running {
        let said = if r.said { "" } else { " (did not say: taken as the database's)" };
        human.push_str(&format!("running: {} {} schema {}{said}\n", r.name, r.version, r.speaks));
    }
    let json = json!({
        "applied": applied,
        "speaks": SCHEMA,
        "pending": todo.iter().map(|m| json!({ "version": m.version, "name": m.name, "oldest_reader": m.oldest_reader })).collect::<Vec<_>>(),
        "replicas": running.iter().map(|r| json!({ "replica": r.name, "version": r.version, "schema": r.speaks })).collect::<Vec<_>>(),
        "fleet_can_take_them": blocked.is_empty(),
    });
    if let Some((replica, breaking)) = blocked.first() {
        let why = format!(
            "replica {} speaks schema {} and migration {} ({}) needs {} or newer: restart it on a newer version first \
             (then run this again)",
            replica.name, replica.speaks, breaking.version, breaking.name, breaking.oldest_reader
        );
        return Ok(Output::nothing(format!("{human}{why}"), json));
    }
    if todo.is_empty() {
        human.push_str("nothing to apply\n");
        return Ok(Output::done(human, json));
    }
    if check {
        human.push_str(&format!(
            "the fleet can take them: {} live replica(s), each keeps working; apply with `ballast queue migrate`\n",
            running.len()
        ));
        return Ok(Output::done(human, json));
    }
    let writer = Queue::connect(url).await?;
    writer.migrate().await?;
    human.push_str(&format!(
        "applied {} migration(s): the database is at schema {}\n",
        todo.len(),
        writer.applied_schema().await?
    ));
    Ok(Output::done(human, json))
}

/// The fleet's live replicas and the schema each speaks.
async fn live_replicas(url: &str, applied: i64) -> anyhow::Result<Vec<Running>> {
    let view = ballast_fleet::FleetView::connect(url).await?;
    Ok(view
        .replicas()
        .await?
        .into_iter()
        .filter(|r| r.state == ballast_fleet::ReplicaState::Live)
        .map(|r| Running {
            name: format!("{} {}:{}", &r.id.simple().to_string()[24..], r.identity.host, r.identity.pid),
            speaks: r.identity.queue_schema.unwrap_or(applied),
            said: r.identity.queue_schema.is_some(),
            version: r.identity.version,
        })
        .collect())
}
