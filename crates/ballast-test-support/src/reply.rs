//! What the upstream does with one request: answer, lose the answer, reset
//! the connection, answer late, or answer slowly.

use std::time::Duration;

/// What the upstream does with one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// An answer.
    With {
        /// Its status.
        status: u16,
        /// Its headers besides `content-length`.
        headers: Vec<(String, String)>,
        /// Its body.
        body: String,
    },
    /// The answer is lost: the connection closes without one, after the
    /// request was read (and, for the test's ledger, applied).
    Lost,
    /// The connection is reset (TCP RST) after the request was read.
    Reset,
    /// Waits, then does the rest.
    Late(Duration, Box<Reply>),
    /// Sends the answer's head at once, then its body one byte per interval:
    /// never silent long enough for a read timeout, slower than an attempt
    /// timeout.
    Drip(Duration, Box<Reply>),
    /// An answer with `status`, `headers` and a body of `size` bytes made as
    /// it is sent (never held whole by the upstream).
    Large {
        /// Its status.
        status: u16,
        /// Its headers besides `content-length`.
        headers: Vec<(String, String)>,
        /// The body's length.
        size: u64,
        /// Whether the length is left out of the head (sent chunked), as a
        /// stream of unknown length is.
        chunked: bool,
    },
}

impl Reply {
    /// An answer with `status` and an empty body.
    pub fn status(status: u16) -> Reply {
        Reply::With { status, headers: Vec::new(), body: String::new() }
    }

    /// An answer with `status` and `body`.
    pub fn body(status: u16, body: impl Into<String>) -> Reply {
        Reply::With { status, headers: Vec::new(), body: body.into() }
    }

    /// An answer with `status` and a body of `size` bytes, made as it is sent.
    pub fn large(status: u16, size: u64) -> Reply {
        Reply::Large { status, headers: Vec::new(), size, chunked: false }
    }

    /// This large answer sent chunked, its length not in its head.
    pub fn chunked(self) -> Reply {
        match self {
            Reply::Large { status, headers, size, .. } => {
                Reply::Large { status, headers, size, chunked: true }
            }
            other => other,
        }
    }

    /// This answer with a header added.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::With { headers, .. } | Reply::Large { headers, .. } = &mut self {
            headers.push((name.to_owned(), value.to_owned()));
        }
        self
    }

    /// This reply after `wait`.
    pub fn after(self, wait: Duration) -> Reply {
        Reply::Late(wait, Box::new(self))
    }

    /// This answer's body a byte at a time, one every `every`, its head sent at once.
    pub fn dripped(self, every: Duration) -> Reply {
        Reply::Drip(every, Box::new(self))
    }
}
