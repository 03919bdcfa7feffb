//! Round 3's R7 through `ballast serve` on PostgreSQL (when
//! `BALLAST_TEST_PG` is set): a fleet-wide rate limit's announced ceiling
//! lasts the policy's window, at most `max_hold`, and a restart forgets it.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ballast_test_support::{eventually, Reply, Upstream};
use support::{client, Served};

/// The fleet's rate of `crm` as `/metrics` says it.
async fn rate(served: &Served) -> f64 {
    let Ok(answer) = client().get(format!("{}/metrics", served.admin)).send().await else { return -1.0 };
    let text = answer.text().await.unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with("ballast_rate_limit_permits_per_second{system=\"crm\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1.0)
}

/// Keeps reading through the gateway, so the replica leases.
async fn read(served: &Served) {
    let _ = client().get(format!("{}/call/crm/contacts", served.gateway)).send().await;
}

/// One `RateLimit-Policy: 1;w=100` answer lowers the fleet's 100/s to its
/// floor, 1/s; with `max_hold = "3s"` it is back at 100/s within seconds
/// although the window says 100 s. Said again, it is forgotten by a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_an_announced_fleet_ceiling_expires_and_a_restart_forgets_it() {
    let Some(queue_url) = support::pg_queue("r7").await else { return };
    let announce = Arc::new(AtomicBool::new(true));
    let say = Arc::clone(&announce);
    let upstream = Upstream::start(move |_, _| {
        if say.swap(false, Ordering::SeqCst) {
            Reply::status(200).header("ratelimit-policy", "1;w=100")
        } else {
            Reply::status(200)
        }
    })
    .await;
    let text = format!(
        "[queue]\nurl = \"{queue_url}\"\n\n[serve]\nstats_interval = \"1s\"\n\n[gateway]\nlisten = \"127.0.0.1:0\"\n\n\
         [systems.crm]\nbase_url = \"http://{}/\"\n\n[systems.crm.rate_limit]\nrate = \"100/s\"\nscope = \"fleet\"\n\
         adaptive = true\nmax_hold = \"3s\"\nwait = \"2s\"\n",
        upstream.addr
    );
    let mut served = Served::start_text(&text, &[]);
    eventually("the fleet's rate is the configured one", || async { rate(&served).await == 100.0 }).await;
    read(&served).await;
    eventually("the announced window caps the fleet at its floor", || async {
        read(&served).await;
        rate(&served).await <= 1.0
    })
    .await;
    eventually("the ceiling expires after max_hold, not the 100 s window", || async {
        read(&served).await;
        rate(&served).await == 100.0
    })
    .await;

    announce.store(true, Ordering::SeqCst);
    read(&served).await;
    eventually("announced again", || async {
        read(&served).await;
        rate(&served).await <= 1.0
    })
    .await;
    served.restart(&[]);
    read(&served).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    read(&served).await;
    assert_eq!(rate(&served).await, 100.0, "a restart forgets what the fleet learned");
}
