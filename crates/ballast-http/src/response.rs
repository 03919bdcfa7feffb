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
    /// The number of the attempt that got it: the call's attempts.
    pub(crate) attempts: u32,
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

    /// How many attempts the call made, this one included.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}
