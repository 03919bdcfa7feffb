//! Reading a response's body as JSON, failing in the call's own error type:
//! a body that is not the JSON expected is a permanent failure of the call.

use ballast::{Class, Failure, StopReason};

use crate::{HttpError, Response};

impl Response {
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
