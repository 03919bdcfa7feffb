//! Durable delivery of keyed writes: an HTTP write that in-memory retry could
//! not finish becomes a [`Delivery`] task in a [`ballast_queue::Queue`],
//! carrying the same idempotency key, and a worker running a
//! [`DeliveryHandler`] sends it again later (R-RES-RE-4, R-RES-RE-1).
//! Available with the crate's `queue` feature.
//!
//! ```no_run
//! use ballast::IdempotencyKey;
//! use ballast_http::{DeliveryHandler, HttpSystem, Request, DELIVERY_KIND};
//! use ballast_queue::{Handover, Queue, Worker};
//!
//! # async fn run(sber: HttpSystem) -> Result<(), Box<dyn std::error::Error>> {
//! let queue = Queue::connect("sqlite://tasks.db").await?;
//! queue.migrate().await?;
//!
//! let key = IdempotencyKey::v5("order-42", "register-payment"); // stored with the order
//! let pay = Request::post("payments").json(&serde_json::json!({ "amount": 100 }));
//! match sber.write_or_defer(&key, &queue, pay).await? {
//!     Handover::Done(response) => println!("paid: {}", response.status()),
//!     Handover::Deferred { task_id, .. } => println!("in progress, task {task_id}"),
//! }
//!
//! // In the worker process (or the same one):
//! let worker = Worker::builder(queue).handler(DELIVERY_KIND, DeliveryHandler::new([sber])).build()?;
//! # let _ = worker;
//! # Ok(()) }
//! ```

mod answer;
pub mod callback;
mod defer;
mod error;
mod follow;
mod handler;
mod view;
mod wire;

pub use answer::{Answer, DeliveryResult, DEFAULT_KEEP_ANSWER};
pub use callback::{Callback, CallbackHandler, CallbackPolicy, CallbackRefused, CALLBACK_KIND};
pub use defer::DeferOptions;
pub use error::{DeliveryError, ExpiredBy};
pub use follow::Following;
pub use handler::DeliveryHandler;
pub use view::{ResultView, TaskView};
pub use wire::{Body, DeferredBecause, Delivery, SealedHeader};

/// The task kind of a [`Delivery`]: register a [`DeliveryHandler`] under it.
pub const DELIVERY_KIND: &str = "ballast.http.delivery";
