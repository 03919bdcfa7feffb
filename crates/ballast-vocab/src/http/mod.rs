//! The vocabulary of an HTTP system: which outcomes are transient, its
//! routes, its base URL and header names — parsed one way for the client
//! and for `ballast lint`.

mod base_url;
mod header_name;
mod retry_on;
pub mod routes;

pub use base_url::{parse_base_url, InvalidBaseUrl};
pub use header_name::{is_header_name, DEFAULT_IDEMPOTENCY_HEADER};
pub use retry_on::{RetryOn, TlsFailure, TransportKind, UnknownClass};
