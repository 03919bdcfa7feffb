//! The workload both clients run: orders arriving at a steady rate, each one
//! three calls to the gateway, with a bounded number of orders in flight.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use indicatif::ProgressBar;
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

/// Calls per order: register the payment, read the order, update the profile.
pub const CALLS_PER_ORDER: u64 = 3;

/// A client of the shop's gateway: the naive one or ballast's.
pub trait Client: Send + Sync + 'static {
    /// Handles `order` to its end, every call of it.
    fn order(&self, order: u32) -> impl Future<Output = ()> + Send;
}

/// The shape of one run, the same for both clients.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Names this run's orders, so a queue file kept with `--db` never mixes
    /// them up with an earlier run's.
    pub run: String,
    /// Orders, numbered from 1.
    pub orders: u32,
    /// Time between two orders' arrivals.
    pub arrival: Duration,
    /// Orders handled at once; arrivals wait when all are busy.
    pub in_flight: usize,
}

impl Workload {
    /// How long the orders take to arrive.
    pub fn span(&self) -> Duration {
        self.arrival * self.orders
    }

    /// The body of `POST /payments` for `order`.
    pub fn payment(&self, order: u32) -> Value {
        json!({ "run": self.run, "order": order, "amount": 1000 + order % 97 * 10 })
    }

    /// The path of `GET` for `order`.
    pub fn order_path(order: u32) -> String {
        format!("orders/{order}")
    }

    /// The path of `PATCH` for `order`'s customer (one customer per order).
    pub fn customer_path(order: u32) -> String {
        format!("customers/{order}")
    }

    /// The body of the profile update for `order`. `update_id` names the
    /// logical update so the gateway's ledger can count duplicate
    /// notifications; nobody deduplicates by it.
    pub fn profile(&self, order: u32) -> Value {
        json!({
            "run": self.run,
            "order": order,
            "update_id": u64::from(order),
            "email": format!("customer-{order}@example.com"),
        })
    }

    /// Places every order through `client` as they arrive, at most
    /// `in_flight` at once, ticking `bar` as each finishes; returns when all
    /// are done.
    pub async fn drive(&self, bar: &ProgressBar, client: &Arc<impl Client>) {
        let slots = Arc::new(Semaphore::new(self.in_flight.max(1)));
        let mut running = JoinSet::new();
        let mut arrivals = tokio::time::interval(self.arrival.max(Duration::from_micros(1)));
        // Orders that had to wait for a slot do not arrive in a burst afterwards.
        arrivals.set_missed_tick_behavior(MissedTickBehavior::Delay);
        for order in 1..=self.orders {
            arrivals.tick().await;
            // The semaphore is never closed, so acquiring only waits.
            let Ok(slot) = Arc::clone(&slots).acquire_owned().await else { break };
            let (client, bar) = (Arc::clone(client), bar.clone());
            running.spawn(async move {
                client.order(order).await;
                bar.inc(1);
                drop(slot);
            });
        }
        while let Some(done) = running.join_next().await {
            if let Err(e) = done {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
    }
}
