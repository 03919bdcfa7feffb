//! A buffered response: read inside the attempt, so a body that stalls or
//! breaks is an attempt failure the policy can classify, not a surprise after it.

use std::borrow::Cow;

use ballast::Classification;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use crate::stream::{AnswerStream, Rest};

/// A complete response from an external system, with what the policy made
/// of it beside it (as linkerd keeps a response's class beside the response).
#[derive(Debug, Clone)]
pub struct Response {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// The number of the attempt that got it: the call's attempts.
    pub(crate) attempts: u32,
    /// `None` for a success; else the class of a failed answer (a 4xx, a 5xx).
    pub(crate) verdict: Option<Classification>,
    /// The rest of a body streamed past its buffer ([`crate::stream`]).
    pub(crate) rest: Option<Rest>,
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

    /// The body — whole, unless the request asked for the answer to be
    /// streamed past a buffer ([`Request::stream_answer_past`](crate::Request::stream_answer_past))
    /// and it was larger: then only what was read within the attempt, and
    /// [`into_stream`](Self::into_stream) has it all.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Whether the body is still being streamed past its buffer
    /// ([`Request::stream_answer_past`](crate::Request::stream_answer_past)).
    pub fn is_streamed(&self) -> bool {
        self.rest.is_some()
    }

    /// The whole body as a stream: what was read within the attempt, then,
    /// for a streamed answer, the rest as it comes. The rest is read once:
    /// of this response's clones, the first that asks gets it.
    pub fn into_stream(self) -> AnswerStream {
        AnswerStream::new(self.body, self.rest.as_ref())
    }

    /// Takes the status, the headers and the whole body as a stream apart,
    /// to pass them on ([`into_stream`](Self::into_stream)).
    pub fn into_streamed_parts(self) -> (StatusCode, HeaderMap, AnswerStream) {
        let stream = AnswerStream::new(self.body, self.rest.as_ref());
        (self.status, self.headers, stream)
    }

    /// Takes the body (see [`body`](Self::body)).
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

    /// What the policy made of this answer: `None` for a success (1xx–3xx),
    /// else the class of a 4xx or 5xx under the system's `retry_on` (and the
    /// wait its `Retry-After` asks for) — transient answers were retried
    /// where the call allowed.
    pub fn verdict(&self) -> Option<Classification> {
        self.verdict
    }

    /// Takes the status, the headers and the body apart, to pass them on.
    pub fn into_parts(self) -> (StatusCode, HeaderMap, Bytes) {
        (self.status, self.headers, self.body)
    }
}
