//! One run of a worker: the loop that joins the producer, the executor and
//! the completer, and sends the completer's round trips beside itself, up
//! to the worker's pipeline, until shutdown; then the grace period and the
//! last outcomes.

use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::completer::{Completer, Flushed, Report, Settling};
use super::executor::{Executor, Finished};
use super::producer::Producer;
use super::{RunSummary, LINGER};
use crate::lease::Held;
use crate::outcome::Outcome;
use crate::Queue;

/// How often a worker looks for tasks held behind a sequence nothing holds.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// How long after a task it put back is due a worker looks for it: the
/// round trip that writes its `run_at` is still to come.
const DUE_MARGIN: Duration = Duration::from_millis(100);

/// A round trip's answer, with what it asked for.
struct RoundTrip {
    flushed: Flushed,
    want: usize,
    asked: Instant,
}

/// Runs `worker` until `shutdown`; see [`Worker::run`](super::Worker::run).
pub(super) async fn run(worker: super::Worker, shutdown: CancellationToken) -> RunSummary {
    let super::Worker {
        queue,
        claim,
        concurrency,
        batch,
        pipeline,
        poll_interval,
        grace,
        attempts,
        counters,
        periodic,
    } = worker;
    let periodic = (!periodic.is_empty())
        .then(|| tokio::spawn(crate::periodic::run(queue.clone(), periodic, shutdown.child_token())));
    let held = attempts.held.clone();
    let producer = Producer::start(&queue.store, claim, concurrency, batch, held.clone(), counters).await;
    let mut run = Run {
        completer: Completer::new(std::sync::Arc::clone(&attempts.alert), queue.ended.clone()),
        executor: Executor::new(attempts),
        producer,
        held,
        queue,
        trips: JoinSet::new(),
        asking: 0,
        batch,
        pipeline,
        poll_interval,
        linger_until: None,
        retry_at: None,
        due_at: None,
        quiet: crate::quiet::Quiet::default(),
    };
    run.until(&shutdown).await;
    let summary = run.finish(grace).await;
    if let Some(periodic) = periodic {
        let _ = periodic.await;
    }
    summary
}

/// What wakes the loop.
enum Event {
    Stop,
    Finished((crate::store::Lease, Finished)),
    Answered(RoundTrip),
    Tick,
    Woken,
    /// A task put back by this worker is due.
    Due,
    Backed,
}

/// One run of a worker: the three parts and the round trips between them
/// and the database.
pub(super) struct Run {
    producer: Producer,
    executor: Executor,
    completer: Completer,
    held: Held,
    queue: Queue,
    /// Round trips in flight; `asking` tasks are asked for by them, and
    /// count against the concurrency as if they were running already.
    trips: JoinSet<RoundTrip>,
    asking: usize,
    batch: usize,
    pipeline: usize,
    poll_interval: Duration,
    /// Until when the next round trip may wait for the handlers still running.
    linger_until: Option<Instant>,
    /// After a database error: no round trip before then.
    retry_at: Option<Instant>,
    /// When a task this worker put back comes due, sooner than the next
    /// poll: a delivery looked at again in a second is claimed then, not
    /// at the poll after.
    due_at: Option<Instant>,
    /// Repeated errors, logged once an interval.
    quiet: crate::quiet::Quiet,
}

impl Run {
    async fn until(&mut self, shutdown: &CancellationToken) {
        let mut poll = tokio::time::interval_at(Instant::now() + self.poll_interval, self.poll_interval);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut next_sweep = Instant::now();
        while !shutdown.is_cancelled() {
            if Instant::now() >= next_sweep {
                next_sweep = Instant::now() + SWEEP_EVERY;
                self.sweep();
            }
            while let Some(finished) = self.executor.try_next() {
                self.finished(finished);
            }
            while let Some(answer) = self.trips.try_join_next() {
                self.answered(answer.expect("a round trip does not panic"));
            }
            let want = self.producer.want(self.asking);
            let backing_off = self.retry_at.is_some_and(|at| Instant::now() < at);
            let ready = (want > 0 || !self.completer.is_empty()) && self.trips.len() < self.pipeline;
            if ready && !backing_off {
                self.retry_at = None;
                // One round trip settles and claims a whole batch: while
                // handlers are still running and neither side of it is full,
                // wait for them, at most LINGER.
                let full = self.producer.in_flight(self.asking) == 0
                    || self.producer.full(want)
                    || self.completer.len() >= self.batch;
                let deadline = *self.linger_until.get_or_insert_with(|| Instant::now() + LINGER);
                if !full && Instant::now() < deadline {
                    let event = tokio::select! {
                        _ = shutdown.cancelled() => Event::Stop,
                        Some(finished) = self.executor.next() => Event::Finished(finished),
                        Some(answer) = self.trips.join_next() => Event::Answered(answer.expect("a round trip does not panic")),
                        _ = tokio::time::sleep_until(deadline) => Event::Backed,
                    };
                    self.handle(event);
                    continue;
                }
                self.linger_until = None;
                self.ask(want);
                continue;
            }
            let retry_at = self.retry_at.unwrap_or_else(Instant::now);
            let event = tokio::select! {
                _ = shutdown.cancelled() => Event::Stop,
                Some(finished) = self.executor.next() => Event::Finished(finished),
                Some(answer) = self.trips.join_next() => Event::Answered(answer.expect("a round trip does not panic")),
                _ = tokio::time::sleep_until(retry_at), if backing_off => Event::Backed,
                _ = tokio::time::sleep_until(self.due_at.unwrap_or(retry_at)), if self.due_at.is_some() => Event::Due,
                _ = poll.tick() => Event::Tick,
                _ = self.queue.wake.notified() => Event::Woken,
                _ = self.producer.notified() => Event::Woken,
            };
            self.handle(event);
        }
    }

    /// Releases, beside the loop, the tasks held behind a sequence that
    /// nothing holds any more: a completion releases the next task itself,
    /// this finds what a process stopped between the two left behind.
    fn sweep(&self) {
        let queue = self.queue.clone();
        tokio::spawn(async move {
            match queue.release_held().await {
                Ok(0) => {}
                Ok(released) => tracing::info!(released, "tasks held behind their sequences released"),
                Err(error) => tracing::warn!(%error, "cannot release the tasks held behind their sequences"),
            }
        });
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Finished(finished) => self.finished(finished),
            Event::Answered(answer) => self.answered(answer),
            Event::Tick | Event::Woken => self.producer.wake(),
            Event::Due => {
                self.due_at = None;
                self.producer.wake();
            }
            Event::Stop | Event::Backed => {}
        }
    }

    /// An attempt came back: its outcome waits for the next round trip.
    fn finished(&mut self, (lease, finished): (crate::store::Lease, Finished)) {
        if let Finished::Ran(settling) = finished {
            if let Some(delay) = settling.due_in.filter(|delay| *delay < self.poll_interval) {
                // Its run_at is set when the outcome is written, a round
                // trip from now: looked for just after.
                let due = Instant::now() + delay + DUE_MARGIN;
                self.due_at = Some(self.due_at.map_or(due, |at| at.min(due)));
            }
            self.held.remove(lease);
            self.completer.push(settling);
        }
    }

    /// Sends the completer's round trip — the outcomes waiting and a claim
    /// for up to `want` tasks — beside this loop; [`answered`](Self::answered)
    /// takes its answer.
    fn ask(&mut self, want: usize) {
        self.asking += want;
        let flush = self.completer.flush(self.queue.store.clone(), self.producer.request(want));
        self.trips.spawn(async move {
            let asked = Instant::now();
            RoundTrip { flushed: flush.await, want, asked }
        });
    }

    /// Accounts for the outcomes of an answered round trip and starts the
    /// handlers of the tasks it claimed. On a database error the outcomes
    /// are kept for the next try, which waits a moment.
    fn answered(&mut self, answer: RoundTrip) {
        self.asking -= answer.want;
        match self.completer.answered(answer.flushed) {
            Err(e) => {
                let error = e.to_string();
                if let Some(held_back) = self.quiet.let_through(&error) {
                    tracing::error!(
                        %error,
                        held_back,
                        "settling and claiming tasks failed; retrying every second (the same error is logged once in {:?}, with how many were held back)",
                        crate::quiet::QUIET_FOR
                    );
                }
                self.producer.failed();
                self.retry_at = Some(Instant::now() + self.poll_interval.min(Duration::from_secs(1)));
            }
            Ok((claimed, released)) => {
                for cleared in self.producer.claimed(answer.want, answer.asked, claimed) {
                    self.executor.start(cleared.task, cleared.cancel, cleared.counters);
                }
                if released {
                    // The tasks behind the completed ones are due now: a
                    // sequence's next write does not wait for the poll.
                    self.producer.wake();
                }
            }
        }
    }

    /// Lets the claims already sent come back (their tasks run, or are
    /// released, like the others), gives the handlers `grace`, then stops
    /// the rest and releases their tasks with the last outcomes.
    async fn finish(mut self, grace: Duration) -> RunSummary {
        while let Some(answer) = self.trips.join_next().await {
            self.answered(answer.expect("a round trip does not panic"));
        }
        let deadline = Instant::now() + grace;
        while self.held.len() > 0 {
            let event = tokio::select! {
                Some(finished) = self.executor.next() => Event::Finished(finished),
                _ = tokio::time::sleep_until(deadline) => break,
            };
            self.handle(event);
        }
        self.held.cancel_all();
        self.executor.abort().await;
        while let Some(finished) = self.executor.try_next() {
            self.finished(finished);
        }
        for (lease, counters) in self.held.drain() {
            self.completer.push(Settling {
                outcome: Outcome::Released { lease },
                due_in: None,
                counters,
                report: Report::Released,
            });
        }
        if !self.completer.is_empty() {
            let outcomes = self.completer.len();
            let flushed = self.completer.flush(self.queue.store.clone(), self.producer.request(0)).await;
            if let Err(e) = self.completer.answered(flushed) {
                tracing::warn!(
                    error = %e,
                    outcomes,
                    "could not write the last outcomes at shutdown; their leases expire on their own and the tasks run again"
                );
            }
        }
        self.producer.stop().await;
        self.completer.summary()
    }
}
