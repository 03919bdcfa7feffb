//! Callers holding `GET /tasks/{handle}?wait=…` until their task ends,
//! cheaply: one background task per gateway wakes them — at once for a task
//! this process ends ([`Queue::ended`]), and for one another replica ends
//! by one statement a second over every task still waited on
//! ([`Queue::ended_among`]) — never a query per waiter.
//!
//! The places are shared out: a quarter of them is kept for callers from
//! addresses (an IPv6 /64 as one) holding less than a quarter, so one
//! address may take up to three quarters — an application waiting on many
//! tasks from one host — but never every place; and a handle takes at most
//! [`PER_HANDLE`] callers.

use std::collections::HashMap;
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

/// The most callers waiting on one handle at once.
pub(super) const PER_HANDLE: usize = 8;

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
    places: Mutex<Places>,
}

/// Who waits: every place, by task and by client address.
#[derive(Debug, Default)]
struct Places {
    count: usize,
    by_task: HashMap<i64, Vec<oneshot::Sender<()>>>,
    by_client: HashMap<u128, usize>,
}

/// Why a caller was given no place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Full {
    /// The listener holds `max_waiters` callers.
    Listener,
    /// The caller's address holds this many, and the places left are kept
    /// for other addresses.
    Client(usize),
    /// The handle has [`PER_HANDLE`] callers waiting.
    Handle,
}

/// One caller's place: resolves when its task ends; gives the place back
/// when dropped.
#[derive(Debug)]
pub(super) struct Ticket {
    id: i64,
    client: u128,
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
        let mut places = self.inner.lock();
        if let Some(tells) = places.by_task.get_mut(&self.id) {
            tells.retain(|t| !t.is_closed());
            if tells.is_empty() {
                places.by_task.remove(&self.id);
            }
        }
        if let Some(held) = places.by_client.get_mut(&self.client) {
            *held -= 1;
            if *held == 0 {
                places.by_client.remove(&self.client);
            }
        }
        places.count -= 1;
    }
}

impl Waiters {
    /// At most `max` callers waiting on `queue`'s tasks at once.
    pub(super) fn new(queue: Queue, max: usize) -> Self {
        let inner = Inner { queue, max, places: Mutex::default() };
        Self { inner: Arc::new(inner), started: OnceLock::new() }
    }

    /// A quarter of the places: what an address holds before the last
    /// quarter is kept from it for the others.
    fn quarter(&self) -> usize {
        (self.inner.max / 4).max(1)
    }

    /// A place for `client` (its address as [`crate::auth::peer_key`] keys
    /// it) waiting on task `id`, or why there is none. Take it before
    /// reading the task, so an end in between is not missed.
    pub(super) fn wait(&self, id: i64, client: u128) -> Result<Ticket, Full> {
        let quarter = self.quarter();
        let mut places = self.inner.lock();
        if places.count >= self.inner.max {
            return Err(Full::Listener);
        }
        let held = places.by_client.get(&client).copied().unwrap_or(0);
        if held >= quarter && self.inner.max - places.count <= quarter {
            return Err(Full::Client(held));
        }
        let tells = places.by_task.entry(id).or_default();
        tells.retain(|t| !t.is_closed());
        if tells.len() >= PER_HANDLE {
            return Err(Full::Handle);
        }
        let (tell, ended) = oneshot::channel();
        tells.push(tell);
        *places.by_client.entry(client).or_default() += 1;
        places.count += 1;
        drop(places);
        self.started.get_or_init(|| {
            tokio::spawn(watch(Arc::downgrade(&self.inner), self.inner.queue.ended()));
        });
        Ok(Ticket { id, client, ended, inner: Arc::clone(&self.inner) })
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Places> {
        self.places.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake(&self, id: i64) {
        for tell in self.lock().by_task.remove(&id).unwrap_or_default() {
            let _ = tell.send(());
        }
    }

    fn wake_all(&self) {
        for (_, tells) in self.lock().by_task.drain() {
            for tell in tells {
                let _ = tell.send(());
            }
        }
    }

    /// The tasks still waited on, forgetting the places whose caller left.
    fn waited(&self) -> Vec<i64> {
        let mut places = self.lock();
        places.by_task.retain(|_, tells| {
            tells.retain(|t| !t.is_closed());
            !tells.is_empty()
        });
        places.by_task.keys().copied().collect()
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
