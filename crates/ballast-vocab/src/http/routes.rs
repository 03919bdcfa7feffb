//! What each endpoint of a system is, declared once: a method and a path
//! template, and whether a call to it is a read, a write that must carry
//! an idempotency key, or a write sent once — whatever its method says.
//!
//! Without routes a call is what its method and key make it: GET, HEAD and
//! OPTIONS read, anything else with a key a keyed write, the rest written
//! once. Real APIs do not fit that: `POST /orders/search` reads, and a
//! payment endpoint must never be called without a key, where forgetting
//! the header would otherwise make a silent write-once and, on a lost
//! answer, no payment and no retry (R-RES-RE-1).
//!
//! **No spelling of a path changes what a call is.** A path is matched as
//! the system will read it ([`Routes::find`]): the method in any case
//! (`post` is `POST`), percent-escapes of unreserved characters decoded
//! (`pay%6Dents` is `payments`), empty segments and a trailing `/` dropped
//! (`payments//7/` is `payments/7`), and `;params` cut from each segment
//! (`payments;x=1` is `payments`); an escaped `/` (`%2F`) stays inside its
//! segment. Letters match in their case unless the system says its paths
//! ignore it ([`Routes::case_insensitive`]). And when a system declares
//! routes, a write that matches none is not sent at all by default
//! ([`Unrouted::Refuse`]): a spelling the routes did not foresee cannot turn
//! a `write_once` into a retried write or skip a key check.
//!
//! ```
//! use ballast_vocab::http::routes::{RouteKind, Routes};
//!
//! let routes = Routes::new()
//!     .route("POST", "/orders/search", RouteKind::Read)?
//!     .route("POST", "/payments", RouteKind::KeyedWrite)?
//!     .route("GET", "/reports/*", RouteKind::Read)?;
//! let found = routes.find(&http::Method::POST, "payments").unwrap();
//! assert_eq!((found.template(), found.kind()), ("/payments", RouteKind::KeyedWrite));
//! assert!(routes.find(&http::Method::POST, "orders").is_none(), "unmatched: the method decides");
//! # Ok::<(), ballast_vocab::http::routes::RouteError>(())
//! ```

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use http::Method;

/// Whether a call with `method` and no route is a read: GET, HEAD and
/// OPTIONS (the safe methods a client may repeat, R-RES-RE-1 a). The one
/// reading of it for the client, the gateway and the checker.
///
/// ```
/// assert!(ballast_vocab::http::routes::is_safe(&http::Method::HEAD));
/// assert!(!ballast_vocab::http::routes::is_safe(&http::Method::POST));
/// ```
pub fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// What a call to a route is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteKind {
    /// A read (GET-equivalent), retried on transient failures, whatever its
    /// method (R-RES-RE-1 a).
    Read,
    /// A write that must carry an idempotency key: one without is refused
    /// unsent (R-RES-RE-1 b).
    KeyedWrite,
    /// A write sent once, key or not (R-RES-RE-X1).
    WriteOnce,
}

impl RouteKind {
    /// Every kind, by its name in a file.
    pub const ALL: [RouteKind; 3] = [RouteKind::Read, RouteKind::KeyedWrite, RouteKind::WriteOnce];

    /// `"read"`, `"keyed_write"` or `"write_once"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            RouteKind::Read => "read",
            RouteKind::KeyedWrite => "keyed_write",
            RouteKind::WriteOnce => "write_once",
        }
    }
}

impl fmt::Display for RouteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RouteKind {
    type Err = RouteError;

    fn from_str(s: &str) -> Result<Self, RouteError> {
        RouteKind::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| RouteError::Kind(s.to_owned()))
    }
}

/// What becomes of a write that matches none of a system's routes
/// (`[systems.NAME] unrouted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Unrouted {
    /// Refused unsent, naming the routes (`ballast_http::HttpError::Unrouted`):
    /// the default of a system with routes, whose writes are all declared.
    #[default]
    Refuse,
    /// Sent once, never retried, key or not (R-RES-RE-X1).
    Once,
    /// What its method and key make it, as without routes: the default of a
    /// system without routes.
    ByMethod,
}

impl Unrouted {
    /// Every choice, by its name in a file.
    pub const ALL: [Unrouted; 3] = [Unrouted::Refuse, Unrouted::Once, Unrouted::ByMethod];

    /// `"refuse"`, `"once"` or `"by_method"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Unrouted::Refuse => "refuse",
            Unrouted::Once => "once",
            Unrouted::ByMethod => "by_method",
        }
    }
}

impl FromStr for Unrouted {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Unrouted::ALL.into_iter().find(|u| u.as_str() == s).ok_or_else(|| {
            format!("unrouted {s:?} does not exist: use \"refuse\", \"once\" or \"by_method\"")
        })
    }
}

/// The headers through which a caller may ask for another method than the
/// request line's. Dropped before a request is sent unless the route the
/// named method reaches allows them ([`Route::method_override`]): an
/// upstream that honours one would otherwise act on a method the policy
/// never judged (a GET retried as a read that the upstream runs as a POST).
pub const METHOD_OVERRIDE_HEADERS: [&str; 3] =
    ["x-http-method-override", "x-http-method", "x-method-override"];

/// The method a request line or an override header names, in the case the
/// standard methods are written in: `post` is `POST`, so no spelling of a
/// method escapes its route or passes for a read.
///
/// ```
/// use ballast_vocab::http::routes::canonical_method;
///
/// assert_eq!(canonical_method(&http::Method::from_bytes(b"post").unwrap()), http::Method::POST);
/// assert_eq!(canonical_method(&http::Method::from_bytes(b"PURGE").unwrap()).as_str(), "PURGE");
/// ```
pub fn canonical_method(method: &Method) -> Method {
    if !method.as_str().bytes().any(|b| b.is_ascii_lowercase()) {
        return method.clone();
    }
    Method::from_bytes(method.as_str().to_ascii_uppercase().as_bytes()).unwrap_or_else(|_| method.clone())
}

/// A route that cannot be declared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The method is not an HTTP method token.
    #[error("{0:?} is not an HTTP method")]
    Method(String),
    /// The template is not a path of literal segments, `{name}` segments
    /// and a last `*`.
    #[error("path template {template:?}: {why}")]
    Template {
        /// The template as given.
        template: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// No such kind.
    #[error("route kind {0:?} does not exist: use \"read\", \"keyed_write\" or \"write_once\"")]
    Kind(String),
    /// The same method and template twice.
    #[error("{0} is declared twice")]
    Duplicate(String),
    /// A route's sequence names a parameter its template does not have, or
    /// is not a sequence name.
    #[error("the sequence {sequence:?} of {route}: {why}")]
    Sequence {
        /// `METHOD /template`.
        route: String,
        /// The sequence template as given.
        sequence: String,
        /// What is wrong with it.
        why: String,
    },
}

/// One part of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    /// `{name}`: any one segment.
    Param(String),
    /// A last `*`: any rest of the path, none included.
    Rest,
}

impl Segment {
    /// How much a segment narrows what matches: a literal most.
    fn weight(&self) -> u8 {
        match self {
            Segment::Literal(_) => 2,
            Segment::Param(_) => 1,
            Segment::Rest => 0,
        }
    }
}

/// A declared route.
#[derive(Debug, Clone, PartialEq, Eq, derive_setters::Setters)]
#[setters(generate = false)]
pub struct Route {
    method: Method,
    template: String,
    /// `METHOD /template`, made once: answers, metrics and spans show it on
    /// every call.
    name: String,
    segments: Vec<Segment>,
    kind: RouteKind,
    /// An attempt timeout of the route's own, shorter than the system's (an
    /// attempt of the system's takes no longer than the system allows).
    #[setters(generate, strip_option)]
    timeout: Option<Duration>,
    /// Whether a request may reach the route through a method-override
    /// header ([`METHOD_OVERRIDE_HEADERS`]): a `POST` with
    /// `X-HTTP-Method-Override: PATCH` is then this `PATCH` route's call, its
    /// header kept. Without it the header is dropped and the request is
    /// what its own method makes it (default false).
    #[setters(generate)]
    method_override: bool,
    /// The sequence its writes belong to, `{name}`s filled from the path
    /// ([`Route::sequence`]).
    sequence: Option<String>,
    /// Whether a `202 Accepted` with a `Location` is followed to the
    /// operation's end ([`Follow`]).
    #[setters(generate, strip_option)]
    follow: Option<Follow>,
}

/// How long an accepted operation is followed unless the route says.
pub const DEFAULT_FOLLOW_DEADLINE: Duration = Duration::from_secs(3600);

/// A route whose writes a system accepts with `202 Accepted` and a status
/// URL in `Location` (the long-running-operation pattern; RFC 7240's
/// `respond-async`): the gateway answers its caller with a task of its own,
/// and the worker reads the status URL, as a read under the system's
/// policy, until the operation ends — a status other than 202, or, with a
/// [`field`](Self::field), that JSON field of the answer reaching one of
/// its final values — or the [`deadline`](Self::deadline) passes.
///
/// ```
/// use std::time::Duration;
/// use ballast_vocab::http::routes::Follow;
///
/// let follow = Follow::new().field("status", ["succeeded", "failed"]).deadline(Duration::from_secs(600));
/// assert_eq!(follow.field_name(), Some("status"));
/// assert!(follow.is_done_value("failed") && !follow.is_done_value("running"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Follow {
    field: Option<String>,
    done: Vec<String>,
    deadline: Duration,
}

impl Default for Follow {
    fn default() -> Self {
        Self::new()
    }
}

impl Follow {
    /// Followed until a status other than 202, for at most
    /// [`DEFAULT_FOLLOW_DEADLINE`].
    pub fn new() -> Self {
        Follow { field: None, done: Vec::new(), deadline: DEFAULT_FOLLOW_DEADLINE }
    }

    /// Ends also when the JSON field `field` (dotted for a nested one:
    /// `operation.status`) of a 200 reaches one of `done`; a 200 with
    /// another value is still running.
    pub fn field<S: Into<String>>(mut self, field: &str, done: impl IntoIterator<Item = S>) -> Self {
        self.field = Some(field.to_owned());
        self.done = done.into_iter().map(Into::into).collect();
        self
    }

    /// Followed for at most `deadline` from the write's acceptance; the
    /// task fails then, and alerts.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The field that says the operation ended, if any.
    pub fn field_name(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// The field's final values.
    pub fn done_values(&self) -> impl Iterator<Item = &str> {
        self.done.iter().map(String::as_str)
    }

    /// Whether `value` of the field is a final one.
    pub fn is_done_value(&self, value: &str) -> bool {
        self.done.iter().any(|d| d == value)
    }

    /// The longest the operation is followed.
    pub fn deadline_after(&self) -> Duration {
        self.deadline
    }
}

impl Route {
    /// `method` and `template` (`/payments/{id}`, `/reports/*`; relative to
    /// the system's base URL) are `kind`.
    pub fn new(method: &str, template: &str, kind: RouteKind) -> Result<Route, RouteError> {
        let method = Method::from_bytes(method.trim().to_ascii_uppercase().as_bytes())
            .map_err(|_| RouteError::Method(method.to_owned()))?;
        let segments = parse(template)?;
        let template = format!("/{}", template.trim().trim_start_matches('/'));
        let name = format!("{method} {template}");
        Ok(Route {
            method,
            template,
            name,
            segments,
            kind,
            timeout: None,
            method_override: false,
            sequence: None,
            follow: None,
        })
    }

    /// Writes through this route belong to `sequence`, a template whose
    /// `{name}`s are the route's parameters: `customer/{id}` on `PUT
    /// /customers/{id}` puts `PUT /customers/42` in sequence `customer/42`,
    /// so that writes to one customer are applied in the order they were
    /// accepted (see the README's "Order").
    ///
    /// A value is compared as text: `042` and `42` are two sequences. Where
    /// the system reads the id as a number, `{id:int}` writes an integer
    /// value in one spelling — `042`, `+42`, `42.0` and `42` are all `42` —
    /// and any other value as it is.
    ///
    /// ```
    /// use ballast_vocab::http::routes::{Route, RouteKind};
    ///
    /// let route = Route::new("PUT", "/customers/{id}", RouteKind::KeyedWrite)?
    ///     .sequence("customer/{id}")?;
    /// assert_eq!(route.sequence_of("customers/42").as_deref(), Some("customer/42"));
    /// assert_eq!(route.sequence_of("customers/042").as_deref(), Some("customer/042"));
    /// let numeric = Route::new("PUT", "/customers/{id}", RouteKind::KeyedWrite)?
    ///     .sequence("customer/{id:int}")?;
    /// assert_eq!(numeric.sequence_of("customers/0042").as_deref(), Some("customer/42"));
    /// assert_eq!(numeric.sequence_of("customers/42.0").as_deref(), Some("customer/42"));
    /// assert!(Route::new("PUT", "/customers/{id}", RouteKind::KeyedWrite)?.sequence("customer/{cid}").is_err());
    /// # Ok::<(), ballast_vocab::http::routes::RouteError>(())
    /// ```
    pub fn sequence(mut self, sequence: &str) -> Result<Route, RouteError> {
        let bad = |why: String| RouteError::Sequence {
            route: self.name.clone(),
            sequence: sequence.to_owned(),
            why,
        };
        let mut rest = sequence;
        while let Some(open) = rest.find('{') {
            let after = &rest[open + 1..];
            let Some(close) = after.find('}') else {
                return Err(bad("a `{` without its `}`".into()));
            };
            let (name, filter) = placeholder(&after[..close]);
            if !self.segments.iter().any(|s| matches!(s, Segment::Param(p) if p == name)) {
                return Err(bad(format!("the template {} has no parameter {{{name}}}", self.template)));
            }
            if filter.is_some_and(|f| f != "int") {
                return Err(bad(format!(
                    "{{{}}}: the only spelling a sequence can normalise is `int` ({{{name}:int}})",
                    &after[..close]
                )));
            }
            rest = &after[close + 1..];
        }
        if rest.contains('}') || sequence.trim().is_empty() {
            return Err(bad(
                "a sequence is a name with `{param}`s of the route's template, like customer/{id}".into(),
            ));
        }
        self.sequence = Some(sequence.to_owned());
        Ok(self)
    }

    /// The sequence template, if the route has one.
    pub fn sequence_template(&self) -> Option<&str> {
        self.sequence.as_deref()
    }

    /// The sequence a write to `path` through this route belongs to: the
    /// template with each `{name}` replaced by that segment of the path
    /// (escapes of unreserved characters decoded, as routing reads them).
    /// `None` without a sequence, or when `path` does not match.
    pub fn sequence_of(&self, path: &str) -> Option<String> {
        let template = self.sequence.as_deref()?;
        let mut values: Vec<(&str, Cow<'_, str>)> = Vec::new();
        let mut parts = segments(path);
        for segment in &self.segments {
            match segment {
                Segment::Rest => break,
                Segment::Literal(_) => {
                    parts.next()?;
                }
                Segment::Param(name) => values.push((name, parts.next()?)),
            }
        }
        // One pass: a value with braces in it is not read as a template.
        let mut filled = String::with_capacity(template.len() + 16);
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            filled.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let close = after.find('}')?;
            let (name, filter) = placeholder(&after[..close]);
            let (_, value) = values.iter().find(|(param, _)| *param == name)?;
            match filter.and_then(|_| canonical_integer(value)) {
                Some(number) => filled.push_str(&number),
                None => filled.push_str(value),
            }
            rest = &after[close + 1..];
        }
        filled.push_str(rest);
        Some(filled)
    }

    /// The method.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The template, with a leading `/`: what answers, spans and metrics
    /// show instead of the path.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// `POST /payments/{id}`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What a call to it is.
    pub fn kind(&self) -> RouteKind {
        self.kind
    }

    /// Its own attempt timeout, if it has one.
    pub fn attempt_timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Whether a method-override header may reach it.
    pub fn allows_method_override(&self) -> bool {
        self.method_override
    }

    /// How an accepted write through the route is followed, if it is ([`Follow`]).
    pub fn followed(&self) -> Option<&Follow> {
        self.follow.as_ref()
    }

    /// Whether `path` (relative to the base URL, without its query) matches,
    /// read as the module docs say, letters in their case.
    pub fn matches(&self, path: &str) -> bool {
        self.matches_in(path, false)
    }

    fn matches_in(&self, path: &str, any_case: bool) -> bool {
        let mut parts = segments(path);
        for segment in &self.segments {
            match segment {
                Segment::Rest => return true,
                Segment::Literal(literal) => match parts.next() {
                    Some(part) if any_case && part.eq_ignore_ascii_case(literal) => {}
                    Some(part) if part == literal.as_str() => {}
                    _ => return false,
                },
                Segment::Param(_) => {
                    if parts.next().is_none() {
                        return false;
                    }
                }
            }
        }
        parts.next().is_none()
    }

    /// Literal beats `{param}` beats `*`, position by position; then longer.
    /// Whether this route is more specific than `other`: segment by segment
    /// from the left, a literal over a `{param}` over the `*`; where one is a
    /// prefix of the other, the longer.
    /// Whether `other` matches exactly the paths this route does
    /// (`/orders/{id}` and `/orders/{number}` do).
    fn same_paths(&self, other: &Route) -> bool {
        self.segments.len() == other.segments.len()
            && self.segments.iter().zip(&other.segments).all(|pair| match pair {
                (Segment::Param(_), Segment::Param(_)) => true,
                (a, b) => a == b,
            })
    }

    fn more_specific_than(&self, other: &Route) -> bool {
        self.segments.iter().map(Segment::weight).gt(other.segments.iter().map(Segment::weight))
    }
}

fn split(path: &str) -> impl Iterator<Item = &str> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let trimmed = path.trim_start_matches('/');
    trimmed.split('/').filter(move |_| !trimmed.is_empty())
}

/// The segments of a request's `path` as a route sees them: each without
/// its `;params`, escapes of unreserved characters decoded, empty ones
/// skipped. Borrowed unless a segment has an escape to decode.
fn segments(path: &str) -> impl Iterator<Item = Cow<'_, str>> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    path.split('/').filter_map(|segment| {
        let segment = segment.split(';').next().unwrap_or_default();
        (!segment.is_empty()).then(|| decode_unreserved(segment))
    })
}

/// `segment` with `%XX` escapes of unreserved characters (RFC 3986 §2.3:
/// letters, digits, `-`, `.`, `_`, `~`) decoded: they mean the same
/// character, which servers decode before routing. Other escapes stay.
fn decode_unreserved(segment: &str) -> Cow<'_, str> {
    if !segment.contains('%') {
        return Cow::Borrowed(segment);
    }
    let bytes = segment.as_bytes();
    let mut out = String::with_capacity(segment.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| segment.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            .filter(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'));
        match escaped {
            Some(byte) => {
                out.push(char::from(byte));
                i += 3;
            }
            None => {
                // `i` is on a char boundary: escapes and ASCII are one byte each.
                let ch = segment[i..].chars().next().unwrap_or_default();
                out.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    Cow::Owned(out)
}

fn parse(template: &str) -> Result<Vec<Segment>, RouteError> {
    let bad = |why| RouteError::Template { template: template.to_owned(), why };
    let parts: Vec<&str> = split(template).collect();
    let mut segments = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let segment = if *part == "*" {
            if i + 1 != parts.len() {
                return Err(bad("`*` may only end a template"));
            }
            Segment::Rest
        } else if let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            if name.is_empty() || name.contains(['{', '}']) {
                return Err(bad("a parameter is a whole segment with a name, like {id}"));
            }
            Segment::Param(name.to_owned())
        } else if part.contains(['{', '}', '*']) || part.is_empty() || *part == "." || *part == ".." {
            return Err(bad("a segment is a literal, a whole {name}, or a last *"));
        } else {
            Segment::Literal(decode_unreserved(part).into_owned())
        };
        segments.push(segment);
    }
    if template.contains(['?', '#']) {
        return Err(bad("a template is a path: no query, no fragment"));
    }
    Ok(segments)
}

/// The route a request reaches ([`Routes::reach`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reached<'a> {
    /// The route, with its place in the order declared, if any.
    pub found: Option<(usize, &'a Route)>,
    /// Whether the request reached it through a method-override header,
    /// which then stays on the request; otherwise such a header is dropped.
    pub by_override: bool,
}

impl<'a> Reached<'a> {
    /// The route, if any.
    pub fn route(&self) -> Option<&'a Route> {
        self.found.map(|(_, route)| route)
    }
}

/// The routes of one system; see the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routes {
    routes: Vec<Route>,
    any_case: bool,
}

impl Routes {
    /// No routes: every call is what its method and key make it.
    pub const fn new() -> Routes {
        Routes { routes: Vec::new(), any_case: false }
    }

    /// Matches paths whatever the case of their letters
    /// (`[systems.NAME] path_case = "insensitive"`): for a system whose own
    /// routing ignores case, where `/Payments` is `/payments`. By default
    /// letters match in their case, as most systems route.
    #[must_use]
    pub fn case_insensitive(mut self, yes: bool) -> Routes {
        self.any_case = yes;
        self
    }

    /// Whether paths match whatever their case.
    pub fn is_case_insensitive(&self) -> bool {
        self.any_case
    }

    /// Adds `method template` as `kind`.
    pub fn route(self, method: &str, template: &str, kind: RouteKind) -> Result<Routes, RouteError> {
        self.with(Route::new(method, template, kind)?)
    }

    /// Adds a route built with [`Route::new`].
    pub fn with(mut self, route: Route) -> Result<Routes, RouteError> {
        if self.routes.iter().any(|r| r.method == route.method && r.same_paths(&route)) {
            return Err(RouteError::Duplicate(route.name().to_owned()));
        }
        self.routes.push(route);
        Ok(self)
    }

    /// The most specific route `method path` matches (literal segments beat
    /// `{param}`, which beats `*`; the first declared of equals), if any;
    /// the method in any case, the path read as the module docs say.
    pub fn find(&self, method: &Method, path: &str) -> Option<&Route> {
        self.position(method, path).map(|(_, route)| route)
    }

    /// [`find`](Self::find)'s route with its place in the order declared.
    pub fn position(&self, method: &Method, path: &str) -> Option<(usize, &Route)> {
        let mut best: Option<(usize, &Route)> = None;
        let method = method.as_str();
        let candidates = self.routes.iter().enumerate().filter(|(_, r)| {
            r.method.as_str().eq_ignore_ascii_case(method) && r.matches_in(path, self.any_case)
        });
        for (i, route) in candidates {
            if best.is_none_or(|(_, b)| route.more_specific_than(b)) {
                best = Some((i, route));
            }
        }
        best
    }

    /// The route a request reaches: the one its method-override header
    /// ([`METHOD_OVERRIDE_HEADERS`]) names when that route allows it, else
    /// the one its own method finds.
    pub fn reach(&self, method: &Method, path: &str, headers: &http::HeaderMap) -> Reached<'_> {
        let named = METHOD_OVERRIDE_HEADERS
            .iter()
            .find_map(|name| headers.get(*name))
            .and_then(|v| Method::from_bytes(v.to_str().ok()?.trim().as_bytes()).ok());
        if let Some(named) = named {
            if let Some(found) = self.position(&named, path).filter(|(_, r)| r.method_override) {
                return Reached { found: Some(found), by_override: true };
            }
        }
        Reached { found: self.position(method, path), by_override: false }
    }

    /// Every route, in the order declared.
    pub fn iter(&self) -> impl Iterator<Item = &Route> {
        self.routes.iter()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

/// A sequence template's `{name}` or `{name:filter}`.
fn placeholder(inside: &str) -> (&str, Option<&str>) {
    match inside.split_once(':') {
        Some((name, filter)) => (name, Some(filter)),
        None => (inside, None),
    }
}

/// `value` in one spelling if it reads as an integer — an optional sign,
/// digits, and a fraction of zeros (`+042.00` is `42`) — else `None`.
fn canonical_integer(value: &str) -> Option<String> {
    let (negative, digits) = match value.as_bytes().first()? {
        b'-' => (true, &value[1..]),
        b'+' => (false, &value[1..]),
        _ => (false, value),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) || !fraction.bytes().all(|b| b == b'0')
    {
        return None;
    }
    let trimmed = whole.trim_start_matches('0');
    Some(match (trimmed.is_empty(), negative) {
        (true, _) => "0".to_owned(),
        (false, true) => format!("-{trimmed}"),
        (false, false) => trimmed.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes() -> Routes {
        Routes::new()
            .route("GET", "/orders/{id}", RouteKind::Read)
            .and_then(|r| r.route("post", "orders/search", RouteKind::Read))
            .and_then(|r| r.route("POST", "/orders/{id}", RouteKind::WriteOnce))
            .and_then(|r| r.route("POST", "/orders/*", RouteKind::KeyedWrite))
            .and_then(|r| r.route("GET", "/", RouteKind::Read))
            .unwrap()
    }

    #[test]
    fn the_most_specific_route_wins() {
        let routes = routes();
        let found = |method: Method, path: &str| routes.find(&method, path).map(Route::name);
        assert_eq!(found(Method::POST, "orders/search"), Some("POST /orders/search"));
        assert_eq!(found(Method::POST, "/orders/7?x=1"), Some("POST /orders/{id}"));
        assert_eq!(found(Method::POST, "orders/7/items"), Some("POST /orders/*"));
        assert_eq!(found(Method::POST, "orders"), Some("POST /orders/*"), "* takes an empty rest");
        assert_eq!(found(Method::GET, "orders/7"), Some("GET /orders/{id}"));
        assert_eq!(found(Method::GET, "orders//"), None, "no parameter: empty segments are not one");
        assert_eq!(found(Method::GET, ""), Some("GET /"));
        assert_eq!(found(Method::PUT, "orders/7"), None, "another method: unrouted");
    }

    /// N2: no spelling of a path or a method escapes its route.
    #[test]
    fn every_spelling_of_a_path_finds_the_route_the_system_routes_it_to() {
        let routes = Routes::new()
            .route("POST", "/payments", RouteKind::KeyedWrite)
            .and_then(|r| r.route("PATCH", "/payments/{id}", RouteKind::WriteOnce))
            .unwrap();
        let found = |method: &str, path: &str| {
            routes.find(&Method::from_bytes(method.as_bytes()).unwrap(), path).map(Route::name)
        };
        for path in
            ["payments", "/payments", "payments/", "pay%6Dents", "pay%6dents", "payments;x=1", "//payments//"]
        {
            assert_eq!(found("POST", path), Some("POST /payments"), "{path}");
        }
        assert_eq!(found("post", "payments"), Some("POST /payments"), "a method in any case");
        for path in ["payments/7/", "payments//7", "payments/7;v=2", "payments/%37"] {
            assert_eq!(found("PATCH", path), Some("PATCH /payments/{id}"), "{path}");
        }
        for path in ["Payments", "payments%2F", "payments%2F7", "payments/7/x"] {
            assert_eq!(
                found("POST", path),
                None,
                "{path}: another resource, or one the routes did not foresee"
            );
        }
        assert_eq!(found("PATCH", "payments%2F7"), None, "an escaped slash stays in its segment");
        let any_case = routes.clone().case_insensitive(true);
        assert_eq!(any_case.find(&Method::POST, "PayMents").map(Route::name), Some("POST /payments"));
    }

    #[test]
    fn a_route_s_sequence_is_filled_from_the_path_as_routing_reads_it() {
        let route = Route::new("PUT", "/customers/{id}/addresses/{n}", RouteKind::KeyedWrite)
            .and_then(|r| r.sequence("customer/{id}"))
            .unwrap();
        assert_eq!(route.sequence_of("customers/42/addresses/1").as_deref(), Some("customer/42"));
        assert_eq!(route.sequence_of("/customers/4%32/addresses/1;v=2").as_deref(), Some("customer/42"));
        assert_eq!(route.sequence_of("customers/%7Bn%7D/addresses/1").as_deref(), Some("customer/%7Bn%7D"));
        let both =
            Route::new("PUT", "/a/{x}/b/{y}", RouteKind::KeyedWrite).and_then(|r| r.sequence("{y}-{x}"));
        assert_eq!(both.unwrap().sequence_of("a/1/b/2").as_deref(), Some("2-1"));
        let unknown =
            Route::new("PUT", "/customers/{id}", RouteKind::KeyedWrite).unwrap().sequence("c/{cid}");
        assert!(unknown.unwrap_err().to_string().contains("has no parameter {cid}"));
        let unclosed = Route::new("PUT", "/customers/{id}", RouteKind::KeyedWrite).unwrap().sequence("c/{id");
        assert!(unclosed.is_err());
        assert_eq!(
            Route::new("PUT", "/customers/{id}", RouteKind::KeyedWrite).unwrap().sequence_of("customers/1"),
            None
        );
    }

    #[test]
    fn bad_declarations_say_what_is_wrong() {
        for (method, template) in [
            ("POST", "/a/*/b"),
            ("POST", "/a/{}"),
            ("POST", "/a/x{id}"),
            ("POST", "/a?b=1"),
            ("POST", "/a/../b"),
        ] {
            assert!(
                matches!(Route::new(method, template, RouteKind::Read), Err(RouteError::Template { .. })),
                "{template}"
            );
        }
        assert!(matches!(Route::new("PO ST", "/a", RouteKind::Read), Err(RouteError::Method(_))));
        assert_eq!("keyed".parse::<RouteKind>(), Err(RouteError::Kind("keyed".into())));
        let twice = routes().route("POST", "/orders/{number}", RouteKind::Read);
        assert_eq!(twice, Err(RouteError::Duplicate("POST /orders/{number}".into())));
    }
}
