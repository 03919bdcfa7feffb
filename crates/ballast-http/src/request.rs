//! Requests: a buffered [`Request`] whose body every attempt can resend, and a
//! [`StreamingRequest`] that can be sent only once, so only
//! [`HttpSystem::write_once`](crate::HttpSystem::write_once) takes it.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Method};

use crate::HttpError;

/// What both request types share: method, path, query and headers, plus the
/// first mistake made while building, reported when the request is sent.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) query: Vec<(String, String)>,
    /// A query string sent as given (a proxy forwarding one), before `query`.
    pub(crate) raw_query: Option<String>,
    pub(crate) headers: HeaderMap,
    pub(crate) invalid: Option<String>,
    /// Past this many bytes, the answer's body is streamed (see [`crate::stream`]).
    pub(crate) stream_past: Option<usize>,
}

impl Head {
    fn new(method: Method, path: &str) -> Self {
        Self {
            method,
            path: path.to_owned(),
            query: Vec::new(),
            raw_query: None,
            headers: HeaderMap::new(),
            invalid: None,
            stream_past: None,
        }
    }

    fn header<K, V>(&mut self, name: K, value: V)
    where
        K: TryInto<HeaderName>,
        K::Error: std::fmt::Display,
        V: TryInto<HeaderValue>,
        V::Error: std::fmt::Display,
    {
        match (name.try_into(), value.try_into()) {
            (Ok(name), Ok(value)) => {
                self.headers.append(name, value);
            }
            (Err(e), _) => self.fail(format!("header name: {e}")),
            (_, Err(e)) => self.fail(format!("header value: {e}")),
        }
    }

    fn query(&mut self, pairs: &[(&str, &str)]) {
        self.query.extend(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    }

    fn fail(&mut self, reason: String) {
        self.invalid.get_or_insert(reason);
    }

    /// Why the request cannot be sent, if it cannot: a mistake made while
    /// building it, or a path that could leave the base URL.
    pub(crate) fn check(&self) -> Result<(), HttpError> {
        if let Some(reason) = &self.invalid {
            return Err(HttpError::invalid(reason));
        }
        if crate::dot_segments::has_dot_segment(&self.path) {
            return Err(HttpError::BadPath { path: self.path.chars().take(200).collect() });
        }
        Ok(())
    }
}

/// `header` and `query`, the same on both request types: they write to the
/// [`Head`] each one has.
macro_rules! head_builders {
    () => {
        /// Adds a header. An invalid name or value fails the call, unsent.
        pub fn header<K, V>(mut self, name: K, value: V) -> Self
        where
            K: TryInto<HeaderName>,
            K::Error: std::fmt::Display,
            V: TryInto<HeaderValue>,
            V::Error: std::fmt::Display,
        {
            self.head.header(name, value);
            self
        }

        /// Adds query parameters.
        pub fn query(mut self, pairs: &[(&str, &str)]) -> Self {
            self.head.query(pairs);
            self
        }
    };
}

/// A request with a buffered body, so every attempt sends the same bytes.
///
/// `path` is relative to the system's base URL, and stays under it: a path
/// with a `.` or `..` segment in any spelling (`../`, `%2e%2e/`, `..\\`) is
/// refused unsent with [`HttpError::BadPath`]. Put query parameters in
/// [`query`](Request::query), not in the path.
///
/// ```
/// use ballast_http::Request;
///
/// let lookup = Request::get("orders/42").query(&[("expand", "items")]);
/// let pay = Request::post("payments").json(&serde_json::json!({ "order": 42, "amount": 100 }));
/// let search = Request::post_query("orders/search").json(&serde_json::json!({ "status": "paid" }));
/// # let _ = (lookup, pay, search);
/// ```
#[derive(Debug, Clone)]
pub struct Request {
    pub(crate) head: Head,
    pub(crate) body: Bytes,
    query_endpoint: bool,
    sequence: Option<String>,
    pub(crate) gate: Option<SendGate>,
}

/// A check made right before each attempt of a request is sent, and again
/// before a `401`'s resend: an error closes it, and the attempt fails
/// unsent ([`HttpError::Stopped`](crate::HttpError::Stopped)) and is not
/// retried. A durable task's lease is one (`ballast_queue::LeaseGate`,
/// which the delivery handler puts on every request it sends): a worker
/// paused past its lease must not send a write that another worker may
/// have sent, and followed with later writes, since.
///
/// ```
/// use ballast_http::{Request, SendGate};
///
/// let open = SendGate::new(|| Ok(()));
/// let pay = Request::post("payments").gate(open);
/// # let _ = pay;
/// ```
#[derive(Clone)]
pub struct SendGate(std::sync::Arc<dyn Fn() -> Result<(), String> + Send + Sync>);

impl SendGate {
    /// A gate that `check` opens (`Ok`) or closes (`Err` with why).
    pub fn new(check: impl Fn() -> Result<(), String> + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(check))
    }

    /// Whether the request may be sent now.
    pub(crate) fn check(&self) -> Result<(), crate::HttpError> {
        (self.0)().map_err(|reason| crate::HttpError::Stopped { reason })
    }
}

impl std::fmt::Debug for SendGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SendGate")
    }
}

impl Request {
    /// A request with any method.
    pub fn new(method: Method, path: &str) -> Self {
        Self {
            head: Head::new(method, path),
            body: Bytes::new(),
            query_endpoint: false,
            sequence: None,
            gate: None,
        }
    }

    /// Checks `gate` right before each attempt is sent ([`SendGate`]).
    pub fn gate(mut self, gate: SendGate) -> Self {
        self.gate = Some(gate);
        self
    }

    /// A GET.
    pub fn get(path: &str) -> Self {
        Self::new(Method::GET, path)
    }

    /// A HEAD.
    pub fn head(path: &str) -> Self {
        Self::new(Method::HEAD, path)
    }

    /// An OPTIONS.
    pub fn options(path: &str) -> Self {
        Self::new(Method::OPTIONS, path)
    }

    /// A POST (a write).
    pub fn post(path: &str) -> Self {
        Self::new(Method::POST, path)
    }

    /// A POST to a query endpoint that has no side effect (a search with a
    /// body too large for a URL): the one POST that
    /// [`HttpSystem::read`](crate::HttpSystem::read) accepts and retries.
    pub fn post_query(path: &str) -> Self {
        Self { query_endpoint: true, ..Self::post(path) }
    }

    /// A PUT (a write).
    pub fn put(path: &str) -> Self {
        Self::new(Method::PUT, path)
    }

    /// A PATCH (a write).
    pub fn patch(path: &str) -> Self {
        Self::new(Method::PATCH, path)
    }

    /// A DELETE (a write).
    pub fn delete(path: &str) -> Self {
        Self::new(Method::DELETE, path)
    }

    head_builders!();

    /// Sends `query`, an already percent-encoded query string, exactly as
    /// given (parameters added with [`query`](Request::query) follow it): for
    /// a proxy that must not re-encode what its client sent.
    pub fn raw_query(mut self, query: &str) -> Self {
        self.head.raw_query = (!query.is_empty()).then(|| query.to_owned());
        self
    }

    /// Adds every header of `headers`, keeping repeated ones. Invalid names
    /// cannot occur in a `HeaderMap`.
    pub fn headers(mut self, headers: &HeaderMap) -> Self {
        for (name, value) in headers {
            self.head.headers.append(name.clone(), value.clone());
        }
        self
    }

    /// Takes `headers` as the request's own (after any set before, which
    /// they join): a proxy hands over what it received without copying it.
    pub fn with_headers(mut self, headers: HeaderMap) -> Self {
        if self.head.headers.is_empty() {
            self.head.headers = headers;
        } else {
            for (name, value) in headers {
                if let Some(name) = name {
                    self.head.headers.append(name, value);
                }
            }
        }
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and `Content-Type: application/json`. A value that
    /// cannot be serialized fails the call, unsent.
    pub fn json<T: serde::Serialize + ?Sized>(mut self, value: &T) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => {
                self.body = body.into();
                self.head.headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
            Err(e) => self.head.fail(format!("JSON body: {e}")),
        }
        self
    }

    /// Names the sequence this write belongs to, usually the entity it
    /// changes (`customer/42`): with
    /// [`write_or_defer`](crate::HttpSystem::write_or_defer), while an
    /// earlier write of the sequence waits in the durable queue this one is
    /// not sent live — it is deferred behind it, and the queue delivers a
    /// sequence's writes one at a time in the order they were accepted. A
    /// name is 1 to 200 characters from A-Z a-z 0-9 . _ - : /.
    ///
    /// ```
    /// use ballast_http::Request;
    ///
    /// let update = Request::put("customers/42").sequence("customer/42");
    /// assert_eq!(update.sequence_name(), Some("customer/42"));
    /// ```
    pub fn sequence(mut self, name: impl Into<String>) -> Self {
        self.sequence = Some(name.into());
        self
    }

    /// Streams the answer's body past `buffer` bytes instead of reading it
    /// whole: the answer is judged on its status and headers, and
    /// [`Response::into_stream`](crate::Response::into_stream) passes the
    /// rest on as it comes, so a large download holds about `buffer` bytes
    /// at a time. A body that breaks after the call returned is not retried
    /// ([`crate::stream`]). A keyed write's answer is always read whole: it
    /// is shared with the same request in flight, and kept when deferred.
    ///
    /// ```
    /// use ballast_http::Request;
    ///
    /// let report = Request::get("reports/2026.csv").stream_answer_past(64 * 1024);
    /// # let _ = report;
    /// ```
    pub fn stream_answer_past(mut self, buffer: usize) -> Self {
        self.head.stream_past = Some(buffer);
        self
    }

    /// The sequence the write belongs to ([`sequence`](Self::sequence)).
    pub fn sequence_name(&self) -> Option<&str> {
        self.sequence.as_deref()
    }

    /// The method.
    pub fn method(&self) -> &Method {
        &self.head.method
    }

    /// The path, relative to the base URL.
    pub fn path(&self) -> &str {
        &self.head.path
    }

    /// Whether this request has no side effect: GET, HEAD, OPTIONS, or a
    /// [`post_query`](Request::post_query).
    pub fn is_read(&self) -> bool {
        crate::routes::is_safe(&self.head.method) || (self.query_endpoint && self.head.method == Method::POST)
    }
}

/// A request whose body is a stream: it cannot be resent, so it is accepted
/// only by [`HttpSystem::write_once`](crate::HttpSystem::write_once), which
/// makes exactly one attempt (R-RES-RE-X1).
#[derive(Debug)]
pub struct StreamingRequest {
    pub(crate) head: Head,
    pub(crate) body: reqwest::Body,
}

impl StreamingRequest {
    /// A request with any method and any body reqwest accepts (a stream needs
    /// reqwest's `stream` feature in your own dependency on it).
    pub fn new(method: Method, path: &str, body: impl Into<reqwest::Body>) -> Self {
        Self { head: Head::new(method, path), body: body.into() }
    }

    head_builders!();
}

/// What [`HttpSystem::write_once`](crate::HttpSystem::write_once) accepts: a
/// buffered [`Request`] or a [`StreamingRequest`].
#[derive(Debug)]
pub enum OnceRequest {
    /// A buffered request.
    Buffered(Request),
    /// A streaming request.
    Streaming(StreamingRequest),
}

impl From<Request> for OnceRequest {
    fn from(r: Request) -> Self {
        OnceRequest::Buffered(r)
    }
}

impl From<StreamingRequest> for OnceRequest {
    fn from(r: StreamingRequest) -> Self {
        OnceRequest::Streaming(r)
    }
}
