//! A response body sent a byte at a time, for slow answers.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// The bytes left, each sent `every` after the one before (the first
/// `every` after the head); its length is known, so the head carries it.
pub(crate) struct Drip {
    left: Bytes,
    every: Duration,
    wait: Pin<Box<Sleep>>,
}

impl Drip {
    pub(crate) fn new(body: Bytes, every: Duration) -> Drip {
        Drip { left: body, every, wait: Box::pin(tokio::time::sleep(every)) }
    }
}

impl Body for Drip {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.left.is_empty() {
            return Poll::Ready(None);
        }
        ready!(this.wait.as_mut().poll(cx));
        this.wait.as_mut().reset(Instant::now() + this.every);
        Poll::Ready(Some(Ok(Frame::data(this.left.split_to(1)))))
    }

    fn is_end_stream(&self) -> bool {
        self.left.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left.len() as u64)
    }
}
