//! Callers holding `GET /tasks/{handle}?wait=…` until their task ends,
//! cheaply: one background task per gateway wakes them — at once for a task
//! this process ends ([`Queue::ended`]), and for one another replica ends
//! by one statement a second over every task still waited on
//! ([`Queue::ended_among`]) — never a query per waiter.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use ballast_queue::Queue;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::oneshot;

/// How often the tasks still waited on are looked up, for those ended
/// elsewhere.
const SWEEP: Duration = Duration::from_secs(1);

/// The longest wait a caller may ask for.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(60);

/// Callers waiting on tasks, bounded.
#[derive(Debug)]
pub(super) struct Waiters {
    inner: Arc<Inner>,
    started: OnceLock<()>,
}

#[derive(Debug)]
struct Inner {
    queue: Queue,
    max: usize,
    count: AtomicUsize,
    waiting: Mutex<HashMap<i64, Vec<oneshot::Sender<()>>>>,
}

/// One caller's place: resolves when its task ends; gives the place back
/// when dropped.
#[derive(Debug)]
pub(super) struct Ticket {
    id: i64,
    ended: oneshot::Receiver<()>,
    inner: Arc<Inner>,
}

impl Ticket {
    /// Until the task may have ended: it did, or ids were missed (then
    /// every caller reads its task again).
    pub(super) async fn ended(&mut self) {
        let _ = (&mut self.ended).await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Its own place goes with it, not at the next sweep: a caller that
        // hangs up leaves nothing behind.
        self.ended.close();
        let mut waiting = self.inner.lock();
        if let Some(tells) = waiting.get_mut(&self.id) {
            tells.retain(|t| !t.is_closed());
            if tells.is_empty() {
                waiting.remove(&self.id);
            }
        }
        drop(waiting);
        self.inner.count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Waiters {
    /// At most `max` callers waiting on `queue`'s tasks at once.
    pub(super) fn new(queue: Queue, max: usize) -> Self {
        let inner = Inner { queue, max, count: AtomicUsize::new(0), waiting: Mutex::default() };
        Self { inner: Arc::new(inner), started: OnceLock::new() }
    }

    /// A place waiting on task `id`; `None` when `max` callers wait already.
    /// Take it before reading the task, so an end in between is not missed.
    pub(super) fn wait(&self, id: i64) -> Option<Ticket> {
        let admitted = self
            .inner
            .count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < self.inner.max).then_some(n + 1))
            .is_ok();
        if !admitted {
            return None;
        }
        self.started.get_or_init(|| {
            tokio::spawn(watch(Arc::downgrade(&self.inner), self.inner.queue.ended()));
        });
        let (tell, ended) = oneshot::channel();
        self.inner.lock().entry(id).or_default().push(tell);
        Some(Ticket { id, ended, inner: Arc::clone(&self.inner) })
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Vec<oneshot::Sender<()>>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake(&self, id: i64) {
        for tell in self.lock().remove(&id).unwrap_or_default() {
            let _ = tell.send(());
        }
    }

    fn wake_all(&self) {
        for (_, tells) in self.lock().drain() {
            for tell in tells {
                let _ = tell.send(());
            }
        }
    }

    /// The tasks still waited on, forgetting the places whose caller left.
    fn waited(&self) -> Vec<i64> {
        let mut waiting = self.lock();
        waiting.retain(|_, tells| {
            tells.retain(|t| !t.is_closed());
            !tells.is_empty()
        });
        waiting.keys().copied().collect()
    }
}

/// Wakes the callers of tasks as they end, until the gateway is dropped.
async fn watch(inner: Weak<Inner>, mut ended: tokio::sync::broadcast::Receiver<i64>) {
    let mut sweep = tokio::time::interval(SWEEP);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            id = ended.recv() => {
                let Some(inner) = inner.upgrade() else { return };
                match id {
                    Ok(id) => inner.wake(id),
                    // Ids were missed: every caller looks again.
                    Err(RecvError::Lagged(_)) => inner.wake_all(),
                    Err(RecvError::Closed) => return,
                }
            }
            _ = sweep.tick() => {
                let Some(inner) = inner.upgrade() else { return };
                let ids = inner.waited();
                if ids.is_empty() {
                    continue;
                }
                match inner.queue.ended_among(&ids).await {
                    Ok(ended) => ended.into_iter().for_each(|id| inner.wake(id)),
                    Err(error) => tracing::debug!(%error, "cannot look up the tasks callers wait on; looked up again in {SWEEP:?}"),
                }
            }
        }
    }
}

/// `wait=` as a caller writes it: `30s`, `1500ms`, `2m`, or bare seconds.
/// `None` when it is none of these.
pub(super) fn parse_wait(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, unit) =
        text.find(|c: char| !c.is_ascii_digit() && c != '.').map_or((text, ""), |i| text.split_at(i));
    let value: f64 = number.parse().ok().filter(|v: &f64| v.is_finite() && *v >= 0.0)?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(seconds).ok()
}

#[cfg(test)]
mod tests {
    use super::parse_wait;
    use std::time::Duration;

    #[test]
    fn a_wait_is_read_as_callers_write_it() {
        assert_eq!(parse_wait("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_wait("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_wait("1500ms"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_wait("2m"), Some(Duration::from_secs(120)));
        for bad in ["", "soon", "-1s", "1h", "NaN", "1e400"] {
            assert_eq!(parse_wait(bad), None, "{bad}");
        }
    }
}
