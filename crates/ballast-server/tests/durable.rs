//! `ballast lint` / `explain` and the running server agree on every durable
//! number: the server's queue (and so its tasks and worker) has the schedule
//! the checker reasoned about.

mod support;

use std::time::Duration;

use ballast_queue::NewTask;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_schedule_is_the_one_explain_prints() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ballast.toml");
    let text = format!(
        r#"
[queue]
url = "sqlite://{}"
poll_interval = "100ms"
max_attempts = 4
max_age = "3h"

[serve]
listen = "127.0.0.1:0"

[systems.pay]
base_url = "http://127.0.0.1:1/"
dedupes_by_key = true
key_ttl = "2h"
"#,
        dir.path().join("queue.db").display()
    );
    std::fs::write(&path, text).unwrap();
    let config = ballast_config::Config::load(&path).unwrap();
    assert!(!ballast_config::has_errors(&config.lint()));
    let server = ballast_server::Server::bind(&config, support::prometheus(), None).await.unwrap();

    let explained = config.explain(Some("pay")).unwrap();
    let timeline = &explained.systems[0];
    let durable = timeline.durable.as_ref().expect("a [queue] takes over");
    let schedule = server.queue().schedule();
    assert_eq!(*schedule, durable.schedule, "the served queue's schedule is explain's");
    assert_eq!(
        (schedule.max_attempts, schedule.max_age, schedule.poll_interval),
        (4, Duration::from_secs(3 * 3600), Duration::from_millis(100))
    );
    assert_eq!(timeline.key_needed, schedule.key_lifetime(timeline.in_memory.window));

    // What the served queue makes of a task: the schedule's attempts.
    let queue = server.queue();
    let task = queue.enqueue(NewTask::new("ballast.http.delivery", &serde_json::json!({}))).await.unwrap();
    assert_eq!(queue.get(task.id).await.unwrap().unwrap().max_attempts, 4);
}
