//! # ballast — resilient calls that never repeat a side effect by accident
//!
//! Retry is the most dangerous resilience tool: most retry incidents are
//! "charged the card twice", "sent the SMS three times". So in ballast an
//! operation declares whether it may be retried, and the policy obeys:
//!
//! | entry point | retried? | rule |
//! |---|---|---|
//! | [`Policy::read`] | on transient errors | R-RES-RE-1 (a) |
//! | [`Policy::write`] with an [`IdempotencyKey`] | on transient errors, same key every attempt | R-RES-RE-1 (b) |
//! | [`Policy::write_once`] | never: exactly one attempt | R-RES-RE-X1 |
//!
//! Every attempt passes through one composition in a fixed order — retry →
//! circuit breaker → bulkhead and rate limit → timeout (R-RES-RE-2,
//! R-RES-CB-1) — errors
//! are classified ([`Classify`]) and only transient ones are retried
//! (R-RES-RE-X2), backoff is always jittered exponential ([`Backoff`],
//! R-RES-RE-X3), at most 5 attempts (R-RES-RE-3), and a policy whose
//! worst-case in-memory window exceeds 30 s is refused (R-RES-RE-4).
//!
//! ```
//! use std::time::Duration;
//! use ballast::{Backoff, Breaker, Bulkhead, Failure, IdempotencyKey, Policy, Retry, Timeout};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let policy = Policy::builder("sber")
//!     .retry(Retry::attempts(3).backoff(Backoff::exponential(Duration::from_millis(500))))
//!     .breaker(Breaker::count(0.5, 50).half_open_after(Duration::from_secs(30)))
//!     .bulkhead(Bulkhead::new(8).queue(16)) // 16 more may wait; without .queue(n) the 9th concurrent call is refused
//!     .timeout(Timeout::aggressive(Duration::from_secs(5)))
//!     .build()
//!     .expect("the guide's own policy passes its rules");
//!
//! let key = IdempotencyKey::v5("order-42", "register-payment"); // stored with the order
//! let result = policy
//!     .write(&key, |ctx| async move {
//!         // send ctx.key() as the Idempotency-Key header …
//!         Ok::<_, std::io::Error>(ctx.attempt())
//!     })
//!     .await;
//! assert_eq!(result.unwrap(), 1);
//!
//! // More than 5 attempts is a job for the durable task queue:
//! let refused = Policy::builder("sber").retry(Retry::attempts(10)).build().unwrap_err();
//! assert!(refused.to_string().contains("R-RES-RE-3"));
//! # let _: Option<Failure<std::io::Error>> = None;
//! # }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod background;
mod backoff;
pub mod breaker;
mod budget;
mod bulkhead;
mod call;
mod classified;
mod classify;
mod events;
mod fallback;
pub mod guide;
mod nesting;
mod op;
mod outcome;
mod policy;
mod policy_builder;
mod policy_state;
pub mod rate_limit;
mod retry;
mod rules;
mod stripe;
mod timeline;
mod timeout;

// The words below are the vocabulary's; the core speaks them too.
pub use background::{background, background_within};
pub use backoff::{Backoff, DelayBounds, Delays, MIN_FIRST_DELAY, MIN_GROWTH};
pub use ballast_vocab::{redact_url, Class, IdempotencyKey, KeyError, OpKind, KEY_NAMESPACE, MAX_KEY_LEN};
pub use breaker::{Breaker, BreakerSnapshot, BreakerState, CircuitBreaker, HalfOpenAfter};
pub use budget::{Budget, BudgetLevel};
pub use bulkhead::{Bulkhead, HeldSlot, DEFAULT_RESERVE_LIVE};
pub use classified::Classified;
pub use classify::{Classification, Classify, Judge, NoJudge};
pub use events::{Event, EventKind, Listener};
pub use fallback::Fallback;
pub use op::{AttemptContext, Operation};
pub use outcome::{Failure, Rejection, StopReason, TimeoutKind};
pub use policy::{Policy, PolicyCall, WINDOW_ERROR, WINDOW_WARNING};
pub use policy_builder::PolicyBuilder;
pub use rate_limit::{RateLimit, RateLimiter, RateSnapshot, Scope};
pub use retry::{Retry, MAX_ATTEMPTS};
pub use rules::{BuildError, Rule, Severity, Violation};
pub use timeline::{Timeline, TimelineAttempt};
pub use timeout::{Strategy, Timeout};

/// The README's example, compiled and run as a doc test so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
