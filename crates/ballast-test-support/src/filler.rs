//! A large response body made as it is sent: `size` bytes in 64 KiB chunks,
//! its length in the head (or sent chunked, its length untold), so a test
//! can answer 400 MB without holding it.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

const CHUNK: usize = 64 * 1024;

/// What is left to send, the chunk each part is cut from, and whether its
/// length is told.
pub(crate) struct Filler {
    left: u64,
    chunk: Bytes,
    chunked: bool,
}

impl Filler {
    pub(crate) fn new(size: u64, chunked: bool) -> Filler {
        Filler { left: size, chunk: Bytes::from(vec![b'x'; CHUNK]), chunked }
    }
}

impl Body for Filler {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.left == 0 {
            return Poll::Ready(None);
        }
        let part = usize::try_from(this.left).map_or(CHUNK, |left| left.min(CHUNK));
        this.left -= part as u64;
        Poll::Ready(Some(Ok(Frame::data(this.chunk.slice(..part)))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        if self.chunked {
            SizeHint::default()
        } else {
            SizeHint::with_exact(self.left)
        }
    }
}
