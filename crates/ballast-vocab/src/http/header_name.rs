//! Header names as the client reads them: the idempotency header's default,
//! and the one check of a name that `ballast lint` and the builder share.

/// The header keyed writes carry their key in, unless a system names another.
pub const DEFAULT_IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// Whether `name` is a header name the client can send (a token of RFC 9110),
/// checked by the same parser the client uses.
///
/// ```
/// assert!(ballast_vocab::http::is_header_name("Idempotency-Key"));
/// assert!(!ballast_vocab::http::is_header_name("Idempotency Key"));
/// assert!(!ballast_vocab::http::is_header_name(""));
/// ```
pub fn is_header_name(name: &str) -> bool {
    http::HeaderName::from_bytes(name.as_bytes()).is_ok()
}
