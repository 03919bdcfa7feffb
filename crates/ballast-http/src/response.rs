//! A buffered response: read inside the attempt, so a body that stalls or
//! breaks is an attempt failure the policy can classify, not a surprise after it.

use std::borrow::Cow;

use ballast::{Class, Failure, StopReason};
use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use crate::HttpError;

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

    /// The body parsed as JSON. A body that is not the JSON expected is a
    /// permanent failure of the call ([`HttpError::Decode`]), in the same
    /// error type as the call's own, so one `?` handles both:
    ///
    /// ```no_run
    /// # async fn f(crm: ballast_http::HttpSystem) -> Result<(), ballast::Failure<ballast_http::HttpError>> {
    /// #[derive(serde::Deserialize)]
    /// struct Order { id: u64 }
    /// let order: Order = crm.read(ballast_http::Request::get("orders/7")).await?.json()?;
    /// # let _ = order.id; Ok(()) }
    /// ```
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, Failure<HttpError>> {
        serde_json::from_slice(&self.body).map_err(|source| Failure::Operation {
            error: HttpError::Decode { status: self.status, source },
            class: Class::Permanent,
            attempts: self.attempts,
            stop: StopReason::Permanent,
        })
    }
}
