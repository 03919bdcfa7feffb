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
//! ```
//! use ballast_http::routes::{RouteKind, Routes};
//!
//! let routes = Routes::new()
//!     .route("POST", "/orders/search", RouteKind::Read)?
//!     .route("POST", "/payments", RouteKind::KeyedWrite)?
//!     .route("GET", "/reports/*", RouteKind::Read)?;
//! let found = routes.find(&http::Method::POST, "payments").unwrap();
//! assert_eq!((found.template(), found.kind()), ("/payments", RouteKind::KeyedWrite));
//! assert!(routes.find(&http::Method::POST, "orders").is_none(), "unmatched: the method decides");
//! # Ok::<(), ballast_http::routes::RouteError>(())
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use http::Method;

/// Whether a call with `method` and no route is a read: GET, HEAD and
/// OPTIONS (the safe methods a client may repeat, R-RES-RE-1 a). The one
/// reading of it for the client, the gateway and the checker.
///
/// ```
/// assert!(ballast_http::routes::is_safe(&http::Method::HEAD));
/// assert!(!ballast_http::routes::is_safe(&http::Method::POST));
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
}

/// One part of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param,
    /// A last `*`: any rest of the path, none included.
    Rest,
}

impl Segment {
    /// How much a segment narrows what matches: a literal most.
    fn weight(&self) -> u8 {
        match self {
            Segment::Literal(_) => 2,
            Segment::Param => 1,
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
        Ok(Route { method, template, name, segments, kind, timeout: None })
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

    /// Whether `path` (relative to the base URL, without its query) matches.
    pub fn matches(&self, path: &str) -> bool {
        let mut parts = split(path);
        for segment in &self.segments {
            match segment {
                Segment::Rest => return true,
                Segment::Literal(literal) => {
                    if parts.next() != Some(literal.as_str()) {
                        return false;
                    }
                }
                Segment::Param => {
                    if parts.next().is_none_or(str::is_empty) {
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
    fn more_specific_than(&self, other: &Route) -> bool {
        self.segments.iter().map(Segment::weight).gt(other.segments.iter().map(Segment::weight))
    }
}

fn split(path: &str) -> impl Iterator<Item = &str> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let trimmed = path.trim_start_matches('/');
    trimmed.split('/').filter(move |_| !trimmed.is_empty())
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
            Segment::Param
        } else if part.contains(['{', '}', '*']) || part.is_empty() || *part == "." || *part == ".." {
            return Err(bad("a segment is a literal, a whole {name}, or a last *"));
        } else {
            Segment::Literal((*part).to_owned())
        };
        segments.push(segment);
    }
    if template.contains(['?', '#']) {
        return Err(bad("a template is a path: no query, no fragment"));
    }
    Ok(segments)
}

/// The routes of one system; see the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routes(Vec<Route>);

impl Routes {
    /// No routes: every call is what its method and key make it.
    pub fn new() -> Routes {
        Routes(Vec::new())
    }

    /// Adds `method template` as `kind`.
    pub fn route(self, method: &str, template: &str, kind: RouteKind) -> Result<Routes, RouteError> {
        self.with(Route::new(method, template, kind)?)
    }

    /// Adds a route built with [`Route::new`].
    pub fn with(mut self, route: Route) -> Result<Routes, RouteError> {
        if self.0.iter().any(|r| r.method == route.method && r.segments == route.segments) {
            return Err(RouteError::Duplicate(route.name().to_owned()));
        }
        self.0.push(route);
        Ok(self)
    }

    /// The most specific route `method path` matches (literal segments beat
    /// `{param}`, which beats `*`; the first declared of equals), if any.
    pub fn find(&self, method: &Method, path: &str) -> Option<&Route> {
        self.position(method, path).map(|(_, route)| route)
    }

    /// [`find`](Self::find)'s route with its place in the order declared.
    pub fn position(&self, method: &Method, path: &str) -> Option<(usize, &Route)> {
        let mut best: Option<(usize, &Route)> = None;
        for (i, route) in self.0.iter().enumerate().filter(|(_, r)| r.method == *method && r.matches(path)) {
            if best.is_none_or(|(_, b)| route.more_specific_than(b)) {
                best = Some((i, route));
            }
        }
        best
    }

    /// Every route, in the order declared.
    pub fn iter(&self) -> impl Iterator<Item = &Route> {
        self.0.iter()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
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
        assert_eq!(found(Method::GET, "orders//"), None, "an empty parameter does not match");
        assert_eq!(found(Method::GET, ""), Some("GET /"));
        assert_eq!(found(Method::PUT, "orders/7"), None, "another method: unrouted");
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
