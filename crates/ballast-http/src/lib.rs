//! # ballast-http — one HTTP client and one policy per external system
//!
//! Talk HTTP to a payment gateway, a CRM or an SMS provider without ever
//! repeating a side effect by accident. Each external system gets an
//! [`HttpSystem`]: its own transport and connection pool — a pooled hyper
//! client over rustls, or your own `reqwest::Client` ([`transport`]) — with
//! no retries or redirects of the client's own (R-RES-RE-X4), connect and read
//! timeouts under the [`Policy`](ballast::Policy)'s attempt and total timeouts,
//! and outcomes classified at the adapter ([`RetryOn`], R-RES-RE-X2):
//!
//! - [`HttpSystem::read`] — GET, HEAD, OPTIONS or a [`Request::post_query`]:
//!   retried on transient failures;
//! - [`HttpSystem::write`] — sends the `Idempotency-Key` header; retried only if
//!   the system [deduplicates by key](HttpSystemBuilder::dedupes_by_key),
//!   otherwise one attempt (R-RES-RE-1);
//! - [`HttpSystem::write_once`] — exactly one attempt (R-RES-RE-X1), the only
//!   entry point that takes a [`StreamingRequest`];
//! - [`HttpSystem::send`] — any of the three as a [`ballast::Operation`] says,
//!   handing every answer back as an answer (a 503 after the last attempt is
//!   `Ok`, its [`Response::verdict`] says what the policy made of it): for a
//!   proxy. The three above hand a final 4xx or 5xx back as
//!   [`HttpError::Status`], which reads better in an adapter.
//!
//! [`PolicyLayer`] does the same for any tower service; [`metrics`] exports
//! Prometheus metrics and [`Health`] derives readiness from breaker states.
//! With the `queue` feature (off by default), [`delivery`] hands a keyed write
//! that in-memory retry could not finish to the durable queue
//! (`HttpSystem::write_or_defer`) and delivers it later (`DeliveryHandler`).
//!
//! ```no_run
//! use std::time::Duration;
//! use ballast::{Breaker, Bulkhead, IdempotencyKey, Retry, Timeout};
//! use ballast_http::{metrics::SystemMetrics, HttpSystem, Request};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let sber = HttpSystem::builder("sber", "https://gateway.example/api/")
//!     .policy(|p| {
//!         p.retry(Retry::attempts(3))
//!             .breaker(Breaker::count(0.5, 50).half_open_after(Duration::from_secs(30)))
//!             // 8 in flight, 16 more may wait; without .queue(n) the 9th is refused at once
//!             .bulkhead(Bulkhead::new(8).queue(16))
//!             .timeout(Timeout::aggressive(Duration::from_secs(5)))
//!             .listener(SystemMetrics::register("sber"))
//!     })
//!     .dedupes_by_key(true) // the gateway's contract: keys kept 24 h
//!     .critical(true)
//!     .build()?;
//!
//! let key = IdempotencyKey::v5("order-42", "register-payment"); // stored with the order
//! let paid = sber.write(&key, Request::post("payments").json(&serde_json::json!({ "amount": 100 }))).await?;
//! println!("{}", paid.status());
//! # Ok(()) }
//! ```
//!
//! The classification table is in the [`classify`] module's documentation.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod build_error;
pub mod caller;
pub mod classify;
pub mod credential;
mod decode;
mod dot_segments;
mod error;
mod fingerprint;
mod health;
mod in_flight;
mod layer;
pub mod metrics;
mod no_answer;
pub mod plan;
mod planned;
mod proxy;
mod rate_headers;
mod request;
mod response;
pub mod stream;
mod system;
mod system_policy;
mod systems;
pub mod transport;
mod verdict;

/// A system's routes: see [`ballast_vocab::http::routes`], where they live
/// below the client so that `ballast lint` reads the same ones.
pub use ballast_vocab::http::routes;

/// A system's TLS settings: see [`ballast_tls`].
pub use ballast_tls::{IdentityFiles, Roots, TlsSettings, TlsVersion};
pub use ballast_vocab::http::{is_header_name, DEFAULT_IDEMPOTENCY_HEADER};
pub use build_error::{parse_base_url, SystemBuildError};
pub use classify::{Reqwest, RetryOn, TlsFailure, TransportKind, UnknownClass};
pub use error::{HttpError, Refused};
pub use fingerprint::Fingerprint;
pub use health::{FleetLimit, Health, HealthReport, SystemHealth, SystemStatus};
pub use layer::{BoxError, PolicyLayer, PolicyService, RequestKey, ServiceError};
pub use no_answer::NoAnswer;
pub use plan::{Plan, SentOnce};
pub use planned::Planned;
pub use proxy::{Proxy, ProxyError, ProxyUrlError};
pub use request::{OnceRequest, Request, SendGate, StreamingRequest};
pub use response::Response;
pub use system::{HttpSystem, HttpSystemBuilder};
pub use system_policy::CallStats;
pub use systems::Systems;

#[cfg(feature = "queue")]
#[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
pub mod delivery;
#[cfg(feature = "queue")]
#[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
pub mod key_life;
#[cfg(feature = "middleware")]
#[cfg_attr(docsrs, doc(cfg(feature = "middleware")))]
pub mod middleware;
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub mod otel;
#[cfg(feature = "queue")]
#[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
pub mod seal;

#[cfg(feature = "queue")]
#[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
pub use delivery::{delivery_kind, is_delivery_kind};
#[cfg(feature = "queue")]
#[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
pub use delivery::{
    DeferredBecause, Delivery, DeliveryError, DeliveryHandler, DeliveryResult, ExpiredBy, SealedHeader,
    TaskView, DELIVERY_KIND,
};
#[cfg(feature = "middleware")]
#[cfg_attr(docsrs, doc(cfg(feature = "middleware")))]
pub use middleware::{CallFailed, PolicyMiddleware};
#[cfg(feature = "queue")]
#[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
pub use seal::{SealError, SealKey};

/// The README's example, compiled and run as a doc test so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
