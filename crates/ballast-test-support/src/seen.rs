//! The ledger's entry: one request as the upstream read it.

use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, Method};

/// One request as the upstream read it, body and all.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The method.
    pub method: Method,
    /// Path and query, as sent.
    pub target: String,
    /// The headers, repeated ones kept.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
    /// When it had been read.
    pub at: Instant,
    /// The HTTP version it came in.
    pub version: http::Version,
    /// The subject of the client certificate its connection presented
    /// (`CN=shop`), on a TLS upstream that asks for one.
    pub client_cert: Option<String>,
}

impl Seen {
    /// A header's value as text (the first, if repeated).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)?.to_str().ok()
    }

    /// The `Idempotency-Key` it carried.
    pub fn key(&self) -> Option<&str> {
        self.header("idempotency-key")
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}
