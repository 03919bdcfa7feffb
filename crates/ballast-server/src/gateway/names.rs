//! Every header name the gateway reads, writes or strips by name, in one
//! place: its own (`Ballast-*`), and the standard ones `http` has no
//! constant for.

use axum::http::header::HeaderName;

/// The attempts the call made, on every gateway response.
pub const ATTEMPTS: HeaderName = HeaderName::from_static("ballast-attempts");

/// The reason of the gateway's own answers ([`Problem`](super::problem::Problem)).
pub const PROBLEM: HeaderName = HeaderName::from_static("ballast-problem");

/// The route a request matched (`POST /payments/{id}`), on every answer to it.
pub const ROUTE: HeaderName = HeaderName::from_static("ballast-route");

/// The sequence a write belongs to (`customer/42`): the gateway's own
/// header, never forwarded.
pub(super) const SEQUENCE: HeaderName = HeaderName::from_static("ballast-sequence");

/// Where to `POST` when a deferred write ends: the gateway's own header,
/// never forwarded.
pub(super) const CALLBACK: HeaderName = HeaderName::from_static("ballast-callback");

/// The caller's idempotency key, read once by the gateway and sent by the
/// system's own header name.
pub(super) const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// `Prefer` (RFC 7240).
pub(super) const PREFER: HeaderName = HeaderName::from_static("prefer");

/// `Preference-Applied` (RFC 7240), on a deferred write's 202.
pub(super) const PREFERENCE_APPLIED: HeaderName = HeaderName::from_static("preference-applied");

/// `Keep-Alive`: hop-by-hop on the way in, the idle hint on the way out.
pub(super) const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

/// `Proxy-Connection`, hop-by-hop though no standard's.
pub(super) const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
