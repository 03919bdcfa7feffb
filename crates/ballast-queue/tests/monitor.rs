//! The queue monitor: counts read in the background, a refresh on request.

mod support;

use std::time::Duration;

use ballast_queue::{NewTask, QueueMonitor, TaskState};
use support::Harness;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn counts_arrive_in_the_background_and_a_refresh_can_be_asked_for() {
    let h = Harness::sqlite().await;
    for i in 0..3 {
        h.queue.enqueue(NewTask::new("sms", &i)).await.unwrap();
    }
    let stop = CancellationToken::new();
    // An interval far beyond the test: every later refresh is asked for.
    let monitor =
        QueueMonitor::builder(h.other_queue().await).every(Duration::from_secs(3600)).spawn(stop.clone());

    let pending = |monitor: &QueueMonitor| {
        let snapshot = monitor.snapshot();
        snapshot.stats.iter().find(|s| s.kind == "sms").map(|s| s.count(TaskState::Pending))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while pending(&monitor) != Some(3) {
        assert!(tokio::time::Instant::now() < deadline, "no first refresh: {:?}", monitor.snapshot());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let first = monitor.snapshot();
    assert!(first.reachable && first.error.is_none() && first.taken_at.is_some());

    h.queue.enqueue(NewTask::new("sms", &3)).await.unwrap();
    assert_eq!(pending(&monitor), Some(3), "reading the snapshot does not count");
    monitor.refresh_soon();
    while pending(&monitor) != Some(4) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "refresh_soon was not heard: {:?}",
            monitor.snapshot()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    h.cleanup().await;
}

#[tokio::test]
async fn a_refused_queue_url_does_not_echo_its_secrets() {
    let err = ballast_queue::Queue::connect("mysql://app:s3cret@db/q?password=s3cret").await.unwrap_err();
    let shown = format!("{err} / {err:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
}
