//! One declared route: a method, a path template and what a call to it is,
//! with its own attempt timeout, method override, sequence and follow.

use std::time::Duration;

use http::Method;

use super::spelling::segments;
use super::template::{parse, Segment};
#[cfg(doc)]
use super::METHOD_OVERRIDE_HEADERS;
use super::{Follow, RouteKind};

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

/// A declared route.
#[derive(Debug, Clone, PartialEq, Eq, derive_setters::Setters)]
#[setters(generate = false)]
pub struct Route {
    pub(super) method: Method,
    pub(super) template: String,
    /// `METHOD /template`, made once: answers, metrics and spans show it on
    /// every call.
    pub(super) name: String,
    pub(super) segments: Vec<Segment>,
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
    pub(super) method_override: bool,
    /// The sequence its writes belong to, `{name}`s filled from the path
    /// ([`Route::sequence`]).
    pub(super) sequence: Option<String>,
    /// Whether a `202 Accepted` with a `Location` is followed to the
    /// operation's end ([`Follow`]).
    #[setters(generate, strip_option)]
    follow: Option<Follow>,
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

    pub(super) fn matches_in(&self, path: &str, any_case: bool) -> bool {
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
    pub(super) fn same_paths(&self, other: &Route) -> bool {
        self.segments.len() == other.segments.len()
            && self.segments.iter().zip(&other.segments).all(|pair| match pair {
                (Segment::Param(_), Segment::Param(_)) => true,
                (a, b) => a == b,
            })
    }

    pub(super) fn more_specific_than(&self, other: &Route) -> bool {
        self.segments.iter().map(Segment::weight).gt(other.segments.iter().map(Segment::weight))
    }
}
