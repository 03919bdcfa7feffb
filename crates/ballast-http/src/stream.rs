//! An answer streamed past a buffer, as nginx streams through its
//! `proxy_buffers`: a body that fits in the buffer is read inside the
//! attempt (a body that stalls or breaks there is an attempt failure the
//! policy classifies); a larger one is judged on its head — status and
//! headers are all a verdict reads — and the rest is passed on as it comes,
//! so a 400 MB download holds no more than the buffer and a read's worth of
//! bytes at a time.
//!
//! Once streaming began the attempt is over: a body that breaks later ends
//! the caller's response and is not retried (nginx's `proxy_next_upstream`
//! does not retry once a byte was sent either). Only a call that asks for it
//! streams ([`Request::stream_answer_past`](crate::Request::stream_answer_past)):
//! every other answer is whole, as [`Response::body`](crate::Response::body)
//! promises.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use crate::classify::TransportKind;
use crate::transport::TransportError;

/// How long a streamed answer may take, all of it, unless its system says
/// otherwise (`HttpSystemBuilder::stream_timeout`): 5 minutes.
pub const DEFAULT_STREAM_TIMEOUT: Duration = Duration::from_secs(300);

/// An answer's body as a transport hands it over: whole, or its first part
/// with the rest still on the wire.
#[derive(Debug)]
pub(crate) enum AnswerBody {
    Whole(Bytes),
    Streaming(Bytes, Rest),
}

/// What is left of a streamed body: read once, by whichever copy of its
/// response takes it first ([`Response`](crate::Response) is `Clone`).
#[derive(Debug, Clone)]
pub(crate) struct Rest(Arc<Mutex<Flowing>>);

/// Where the rest of a body is.
#[derive(Debug)]
enum Flowing {
    /// On the wire, not yet taken by a stream.
    Waiting(Flow),
    /// Taken by the stream passing it on.
    Reading(Flow),
    /// Cut off at the stream timeout, this one: the stream says so next.
    Cut(Duration),
    /// Ended, broken, or its end told.
    Over,
}

/// A body still on the wire and what bounds it; dropping it closes the
/// upstream's connection, gives back its bulkhead slot and stops its watch.
#[derive(Debug)]
struct Flow {
    body: Incoming,
    /// The longest wait for its next part.
    read: Duration,
    /// Its system's bulkhead slot, held until it ends.
    _slot: Option<ballast::HeldSlot>,
    /// Dropped with the flow: ends its watch.
    _watched: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Rest {
    fn new(body: Incoming, read: Duration) -> Self {
        let flow = Flow { body, read, _slot: None, _watched: None };
        Self(Arc::new(Mutex::new(Flowing::Waiting(flow))))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Flowing> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The rest for the one stream that passes it on: this one, unless
    /// another copy of the response took it.
    fn take(&self) -> Option<Rest> {
        let mut flowing = self.lock();
        match std::mem::replace(&mut *flowing, Flowing::Over) {
            Flowing::Waiting(flow) => {
                *flowing = Flowing::Reading(flow);
                Some(self.clone())
            }
            other => {
                *flowing = other;
                None
            }
        }
    }

    /// Bounds the rest: all of it within `limit` from now, and `slot` of its
    /// system's bulkhead held until it ends. A watch cuts it off at the
    /// limit — the stream says so at its next part, or when its read timer
    /// wakes it — even if nobody reads it (a caller that stopped reading leaves
    /// the stream unpolled), so the slot is never held longer.
    pub(crate) fn bound(&self, limit: Duration, slot: Option<ballast::HeldSlot>) {
        let Some(until) = Instant::now().checked_add(limit) else { return };
        let (watched, unwatched) = tokio::sync::oneshot::channel::<()>();
        {
            let mut flowing = self.lock();
            let (Flowing::Waiting(flow) | Flowing::Reading(flow)) = &mut *flowing else { return };
            flow._slot = slot;
            flow._watched = Some(watched);
        }
        let rest = Arc::downgrade(&self.0);
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep_until(until) => {}
                // The flow was dropped: it ended before its limit.
                _ = unwatched => return,
            }
            if let Some(rest) = rest.upgrade() {
                let mut flowing = rest.lock().unwrap_or_else(PoisonError::into_inner);
                if matches!(*flowing, Flowing::Waiting(_) | Flowing::Reading(_)) {
                    *flowing = Flowing::Cut(limit);
                }
            }
        });
    }
}

/// How much of an answer is read before it is handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reading {
    /// The whole answer, at most this many bytes: a larger one is an error
    /// ([`TransportKind::TooLarge`]), its rest never read.
    Whole(usize),
    /// Up to this many bytes; the rest of a larger answer streams on.
    StreamPast(usize),
}

impl Reading {
    /// The most bytes read before the answer is handed over.
    pub(crate) fn limit(self) -> usize {
        match self {
            Reading::Whole(cap) | Reading::StreamPast(cap) => cap,
        }
    }

    /// The error of an answer over a whole read's cap.
    pub(crate) fn too_large(cap: usize) -> TransportError {
        TransportError::new(
            TransportKind::TooLarge,
            format!("the answer is over {cap} bytes, the most read whole; the rest was not read"),
        )
    }
}

/// Reads `body` until it ends or more than `reading`'s limit came, each
/// part within `read` of the one before: whole when it ended; past the
/// limit, what came and the rest (streaming), or an error (a whole read).
pub(crate) async fn read_up_to(
    mut body: Incoming,
    read: Duration,
    reading: Reading,
) -> Result<AnswerBody, TransportError> {
    let buffer = reading.limit();
    // An answer that says it is larger than a whole read may be is not read at all.
    if let Reading::Whole(cap) = reading {
        if body.size_hint().lower() > cap as u64 {
            return Err(Reading::too_large(cap));
        }
    }
    let late =
        || TransportError::new(TransportKind::ReadTimeout, format!("no part of the body within {read:?}"));
    let timer = tokio::time::sleep(read);
    tokio::pin!(timer);
    // The one frame of a small body is kept as it is, without a copy.
    let mut first: Option<Bytes> = None;
    let mut rest = BytesMut::new();
    let mut seen = 0usize;
    while !body.is_end_stream() {
        let frame = tokio::select! {
            biased;
            frame = body.frame() => frame,
            () = &mut timer => return Err(late()),
        };
        match frame {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    seen += data.len();
                    match first.take() {
                        None if rest.is_empty() => first = Some(data),
                        earlier => {
                            rest.extend_from_slice(&earlier.unwrap_or_default());
                            rest.extend_from_slice(&data);
                        }
                    }
                }
                if let (true, Reading::Whole(cap)) = (seen > buffer, reading) {
                    return Err(Reading::too_large(cap));
                }
                if seen > buffer && !body.is_end_stream() {
                    let head = first.unwrap_or_else(|| rest.freeze());
                    return Ok(AnswerBody::Streaming(head, Rest::new(body, read)));
                }
                timer.as_mut().reset(tokio::time::Instant::now() + read);
            }
            None => break,
            Some(Err(e)) => return Err(TransportError::new(crate::classify::transport_kind(&e), e)),
        }
    }
    Ok(AnswerBody::Whole(match first {
        Some(only) if rest.is_empty() => only,
        _ => rest.freeze(),
    }))
}

/// A response's body for passing on: the bytes read within the attempt,
/// then, for a streamed answer, the rest as it comes — each part within the
/// transport's read timeout of the one before and all of it within the
/// system's stream timeout, or the stream ends with an error (a proxy then
/// ends its own response early, so its caller sees the answer cut off,
/// never a complete-looking short one). Until it ends or is dropped it
/// holds a slot of its system's bulkhead.
///
/// ```
/// # async fn run(system: ballast_http::HttpSystem) -> Result<(), Box<dyn std::error::Error>> {
/// use http_body_util::BodyExt;
///
/// let report = ballast_http::Request::get("reports/2026.csv").stream_answer_past(64 * 1024);
/// let answer = system.read(report).await?;
/// let mut body = answer.into_stream();
/// while let Some(frame) = body.frame().await {
///     let part = frame?.into_data().unwrap_or_default();
///     // write `part` out; at most the buffer and one read are held at a time
/// #   let _ = part;
/// }
/// # Ok(()) }
/// ```
pub struct AnswerStream {
    head: Option<Bytes>,
    rest: Option<Rest>,
    timer: Option<Pin<Box<Sleep>>>,
    /// A part was passed on since the timer was last armed: the wait for
    /// the next counts from when it is asked for, not from when the caller
    /// took the last (a slow caller is not a stalled upstream).
    rearm: bool,
}

impl std::fmt::Debug for AnswerStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerStream").field("streaming", &self.rest.is_some()).finish_non_exhaustive()
    }
}

impl AnswerStream {
    pub(crate) fn new(head: Bytes, rest: Option<&Rest>) -> Self {
        let head = (!head.is_empty()).then_some(head);
        Self { head, rest: rest.and_then(Rest::take), timer: None, rearm: false }
    }
}

/// A streamed body that stalled or broke after the caller's answer began.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// No part of the body came within the read timeout.
    #[error("the answer's body stalled: no part within {0:?}")]
    Stalled(Duration),
    /// The connection broke.
    #[error("the answer's body broke off: {0}")]
    Broken(#[source] hyper::Error),
    /// The whole body did not come within the system's stream timeout
    /// (`[systems.NAME.timeout] stream`).
    #[error(
        "the answer's body was cut off: not all of it came within the stream timeout of {0:?} \
         ([systems.NAME.timeout] stream)"
    )]
    TooLong(Duration),
}

impl http_body::Body for AnswerStream {
    type Data = Bytes;
    type Error = StreamError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(head) = this.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        let Some(rest) = this.rest.as_ref() else { return Poll::Ready(None) };
        let mut flowing = rest.lock();
        let flow = match &mut *flowing {
            Flowing::Reading(flow) => flow,
            Flowing::Cut(limit) => {
                let limit = *limit;
                *flowing = Flowing::Over;
                return Poll::Ready(Some(Err(StreamError::TooLong(limit))));
            }
            Flowing::Waiting(_) | Flowing::Over => return Poll::Ready(None),
        };
        let read = flow.read;
        match Pin::new(&mut flow.body).poll_frame(cx) {
            Poll::Ready(None) => {
                *flowing = Flowing::Over;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(frame))) => {
                this.rearm = true;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                *flowing = Flowing::Over;
                Poll::Ready(Some(Err(StreamError::Broken(e))))
            }
            Poll::Pending => {
                let timer = this.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(read)));
                if std::mem::take(&mut this.rearm) {
                    timer.as_mut().reset(tokio::time::Instant::now() + read);
                }
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        *flowing = Flowing::Over;
                        Poll::Ready(Some(Err(StreamError::Stalled(read))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_none()
            && self.rest.as_ref().is_none_or(|rest| match &*rest.lock() {
                Flowing::Reading(flow) => flow.body.is_end_stream(),
                Flowing::Cut(_) => false,
                Flowing::Waiting(_) | Flowing::Over => true,
            })
    }

    fn size_hint(&self) -> SizeHint {
        let head = self.head.as_ref().map_or(0, |h| h.len() as u64);
        let rest = self.rest.as_ref().map_or_else(
            || SizeHint::with_exact(0),
            |rest| match &*rest.lock() {
                Flowing::Reading(flow) => flow.body.size_hint(),
                _ => SizeHint::with_exact(0),
            },
        );
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + head);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + head);
        }
        hint
    }
}
