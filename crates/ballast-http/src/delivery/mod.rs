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
mod line;
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
/// It is a family ([`ballast_queue::Handler::family`]): each system's
/// deliveries are of its own member kind ([`delivery_kind`]), so one
/// system's key never names another's task; periodic calls, and deliveries
/// stored before the kinds were per system, are of this kind itself.
pub const DELIVERY_KIND: &str = "ballast.http.delivery";

/// The task kind of deliveries to `system`: `ballast.http.delivery/{system}`,
/// a member of [`DELIVERY_KIND`]'s family. A key deduplicates within one
/// kind, so the same key sent to two systems is two tasks. A name a kind
/// cannot carry (characters other than `A–Z a–z 0–9 . _ -`, or longer than
/// 64 bytes) is replaced by a digest of it.
///
/// ```
/// use ballast_http::delivery::delivery_kind;
///
/// assert_eq!(delivery_kind("pay"), "ballast.http.delivery/pay");
/// assert!(delivery_kind("payments (EU)").starts_with("ballast.http.delivery/sha-"));
/// ```
pub fn delivery_kind(system: &str) -> String {
    format!("{DELIVERY_KIND}/{}", kind_member(system))
}

/// `system` as a name in the queue: itself, or a digest of a name a kind
/// cannot carry. It never holds a `:` or a `/`, so `{member}:{sequence}`
/// names one system's sequence and no other's.
pub(crate) fn kind_member(system: &str) -> String {
    let plain = !system.is_empty()
        && system.len() <= 64
        && system.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if plain {
        return system.to_owned();
    }
    let digest = <sha2::Sha256 as sha2::Digest>::digest(system.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("sha-{hex}")
}

/// Whether `kind` is a delivery's: [`DELIVERY_KIND`] or one of its members.
pub fn is_delivery_kind(kind: &str) -> bool {
    kind.strip_prefix(DELIVERY_KIND).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}
