//! What the policy makes of an answer: a success, or a failure of a class —
//! for every front end (`HttpSystem`, `PolicyLayer`, `PolicyMiddleware`).

use ballast::Classification;
use http::HeaderMap;

use crate::{classify, HttpError, Response, RetryOn};

/// The judge of one call's answers, built once from its plan
/// ([`Plan::judge`](crate::Plan)): what every front end — the system's
/// attempt, the tower layer, the middleware — makes of an answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AnswerJudge {
    retry_on: RetryOn,
    /// A keyed write to a system that deduplicates: a 409 "still in flight"
    /// is transient.
    keyed_write: bool,
}

impl AnswerJudge {
    pub(crate) const fn new(retry_on: RetryOn, keyed_write: bool) -> Self {
        Self { retry_on, keyed_write }
    }

    /// `None` for a success (1xx–3xx), else the class of `status` and the
    /// wait `headers` ask for.
    pub(crate) fn verdict(&self, status: http::StatusCode, headers: &HeaderMap) -> Option<Classification> {
        verdict(self.retry_on, status, headers, self.keyed_write)
    }
}

/// An answer a judge reads: its status and headers.
pub(crate) trait Answer {
    fn status(&self) -> http::StatusCode;
    fn headers(&self) -> &HeaderMap;
}

impl<B> Answer for http::Response<B> {
    fn status(&self) -> http::StatusCode {
        http::Response::status(self)
    }

    fn headers(&self) -> &HeaderMap {
        http::Response::headers(self)
    }
}

#[cfg(feature = "middleware")]
impl Answer for (reqwest::Response, http::Extensions) {
    fn status(&self) -> http::StatusCode {
        self.0.status()
    }

    fn headers(&self) -> &HeaderMap {
        self.0.headers()
    }
}

impl<A: Answer> ballast::Judge<A> for AnswerJudge {
    fn judge(&self, answer: &A) -> Option<Classification> {
        self.verdict(answer.status(), answer.headers())
    }
}

/// What the policy makes of an answer: `None` for a success (1xx–3xx),
/// else the class of its status under `retry_on` and the wait it asks for.
fn verdict(
    retry_on: RetryOn,
    status: http::StatusCode,
    headers: &HeaderMap,
    keyed_write: bool,
) -> Option<Classification> {
    if !(status.is_client_error() || status.is_server_error()) {
        return None;
    }
    let class = retry_on.status_class(status, keyed_write);
    let after = classify::retry_after(headers);
    // Too many requests, or unavailable for a while: the system throttles,
    // and a rate limit learns from it whatever the retry makes of it.
    let throttled = status == http::StatusCode::TOO_MANY_REQUESTS
        || (status == http::StatusCode::SERVICE_UNAVAILABLE && after.is_some());
    let retry_after = after.filter(|_| class == ballast::Class::Transient || throttled);
    Some(Classification { class, retry_after, throttled, elsewhere: false })
}

/// The entry points that hand a failed answer back as an error: it becomes
/// [`HttpError::Status`], classified as the policy judged it.
pub(crate) fn failed(response: Response) -> Result<Response, HttpError> {
    match response.verdict {
        None => Ok(response),
        Some(c) => Err(HttpError::Status {
            status: response.status,
            class: c.class,
            retry_after: c.retry_after,
            response: Box::new(response),
        }),
    }
}
