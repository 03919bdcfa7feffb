//! A buffered response: read inside the attempt, so a body that stalls or
//! breaks is an attempt failure the policy can classify, not a surprise after it.

use std::borrow::Cow;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

/// A complete response from an external system.
#[derive(Debug, Clone)]
pub struct Response {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Response {
    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Takes the body.
    pub fn into_body(self) -> Bytes {
        self.body
    }

    /// The body as text, invalid UTF-8 replaced.
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }

    /// The body parsed as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}
