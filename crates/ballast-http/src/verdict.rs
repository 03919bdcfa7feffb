//! What the policy makes of an answer: a success, or a failure of a class —
//! for every front end (`HttpSystem`, `PolicyLayer`, `PolicyMiddleware`).

use ballast::Classification;
use http::HeaderMap;

use crate::{classify, HttpError, Response, RetryOn};

/// What the policy makes of an answer: `None` for a success (1xx–3xx),
/// else the class of its status under `retry_on` and the wait it asks for.
pub(crate) fn verdict(
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

/// Every `Ok` a success: errors carry the failed answers.
#[derive(Clone, Copy)]
pub(crate) struct AllAnswersGood;

impl ballast::Judge<Response> for AllAnswersGood {
    fn judge(&self, _: &Response) -> Option<Classification> {
        None
    }
}
