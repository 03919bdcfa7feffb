//! # ballast-vocab — the words ballast's crates share, with no runtime
//!
//! What `ballast lint` checks a configuration against must be what the HTTP
//! client and the durable queue enforce. So the vocabulary lives here, below
//! them all, and each reads it from here: the checker (`ballast-config`)
//! without compiling an HTTP client or a database driver, the client
//! (`ballast-http`) and the queue (`ballast-queue`), which re-export it under
//! their own names.
//!
//! - Below everything, the words the core speaks too: a failure's
//!   [`Class`] (R-RES-RE-X2), the [`IdempotencyKey`] (R-RES-RE-1), the
//!   [`OpKind`] of a call (a route's kind too), and
//!   [`redact_url`], which every crate applies before it shows a URL.
//!   These need no feature; `ballast` itself builds on them.
//! - [`http`] (feature `http`): which outcomes are transient ([`http::RetryOn`],
//!   R-RES-RE-X2); a system's [`routes`](http::routes) (`read`,
//!   `keyed_write`, `write_once`); its base URL and header names.
//! - [`queue`] (feature `queue`): the durable schedule ([`queue::DurableSchedule`],
//!   R-RES-RE-5), the backends a queue URL names, every default and bound.
//!
//! ```
//! use ballast_vocab::http::{parse_base_url, RetryOn};
//! use ballast_vocab::queue::{Backend, DurableSchedule};
//!
//! assert!(parse_base_url("https://crm.example/api/").is_ok());
//! assert!(RetryOn::from_names(&["5xx", "4xx"]).is_err(), "4xx are never retried (R-RES-RE-X2)");
//! assert_eq!(Backend::from_url("postgres://db/q"), Some(Backend::Postgres));
//! assert_eq!(DurableSchedule::default().max_attempts, 10);
//! ```

mod class;
mod key;
mod kind;
mod redact;

#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "queue")]
pub mod queue;

pub use class::Class;
pub use key::{IdempotencyKey, KeyError, KEY_NAMESPACE, MAX_KEY_LEN};
pub use kind::{OpKind, UnknownKind};
pub use redact::redact_url;
