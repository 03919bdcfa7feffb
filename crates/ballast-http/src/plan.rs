//! What a call to a system is, decided once: the [`Plan`] that one function,
//! `Planner::plan`, makes before anything is sent, and that every front end
//! passes on to the attempts — [`HttpSystem::read`](crate::HttpSystem::read),
//! `write`, `write_once`, `send` and `write_or_defer`, the gateway through
//! [`HttpSystem::plan_forwarded`](crate::HttpSystem::plan_forwarded) (the
//! plan bound to its request, [`Planned`](crate::Planned)),
//! [`PolicyLayer`](crate::PolicyLayer) and `PolicyMiddleware` — so that no
//! layer works it out again. The route is looked up once, here; the
//! idempotency key is read from a header once, by [`key_in`].
//!
//! A request nobody declared (a gateway's, a proxy's, a tower layer's) is
//! planned by its route, else its method and key (R-RES-RE-1):
//!
//! | request | operation | attempts |
//! |---|---|---|
//! | a route declared `read` (any method) | read | retried on transient failures |
//! | a route declared `keyed_write`, with a key | keyed write | retried if the system deduplicates by key, else one ([`SentOnce::NotDeduplicated`]) |
//! | a route declared `keyed_write`, without one | — | refused unsent: [`Refused::KeyRequired`] (R-RES-RE-1) |
//! | a route declared `write_once` | write once, key or not | one ([`SentOnce::WriteOnce`]) |
//! | no route: GET, HEAD, OPTIONS | read | retried |
//! | no route, another method, on a system with routes | what [`Unrouted`] says: refused unsent by default ([`Refused::Unrouted`]), or written once | one |
//! | no route: any other method with a key | keyed write | as a route's keyed write |
//! | no route: any other method without one | write once | one (R-RES-RE-X1) |
//! | a body that cannot be sent twice (a stream) | as above | one ([`SentOnce::Stream`]) |
//!
//! A call its caller declared (`read`, `write`, `write_once`, `send`) is
//! planned as declared, with the route's word over the caller's where the
//! contract says more: a read of a route declared `read` may use any method;
//! a route declared `keyed_write` takes no write without a key; a route
//! declared `write_once` is written once, key or not; a read that is not one
//! (a POST that is not a [query](crate::Request::post_query)) is refused
//! unsent ([`Refused::NotARead`]).
//!
//! A keyed write makes one attempt, too, when the system does not
//! deduplicate by its key: the key is still sent, but a retry needs the
//! system's guarantee, not just the header. [`Plan::retried`] says so before
//! the call, and the failure's [`StopReason`] says so after it.
//!
//! A route is found as [`routes`](crate::routes) says: by the method in any
//! case, a path in any spelling, and through a method-override header only
//! where the route allows one (otherwise the header is dropped).

use std::fmt;

use ballast::{IdempotencyKey, KeyError, Operation, Rule, StopReason};
use http::header::HeaderName;
use http::{HeaderMap, Method};

use crate::routes::{Reached, Route, RouteKind, Routes, Unrouted};
use crate::{HttpError, Refused};

/// What a call is: see the module docs.
#[derive(Debug, Clone, Copy)]
pub struct Plan<'a> {
    pub(crate) operation: Operation<'a>,
    pub(crate) reached: Reached<'a>,
    pub(crate) dedupes_by_key: bool,
    pub(crate) stream: bool,
}

/// Why a call makes one attempt only (see [`Plan::retried`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SentOnce {
    /// A write without a key, or one its route declares `write_once`
    /// (R-RES-RE-X1).
    WriteOnce,
    /// A keyed write to a system that does not declare that it deduplicates
    /// by key (R-RES-RE-1): the key is sent, the write is not retried.
    NotDeduplicated,
    /// A body that cannot be sent twice, such as a stream (R-RES-RE-X1).
    Stream,
}

impl SentOnce {
    /// The rule that stops the retry.
    pub fn rule(self) -> Rule {
        match self {
            SentOnce::WriteOnce | SentOnce::Stream => Rule::ReX1,
            SentOnce::NotDeduplicated => Rule::Re1,
        }
    }

    /// What a failure of such a call says stopped it.
    pub fn stop_reason(self) -> StopReason {
        match self {
            SentOnce::WriteOnce | SentOnce::Stream => StopReason::NotRetryable,
            SentOnce::NotDeduplicated => StopReason::NotDeduplicated,
        }
    }
}

impl<'a> Plan<'a> {
    /// The operation the call is made as.
    pub fn operation(&self) -> Operation<'a> {
        self.operation
    }

    /// The route the request reached, if any.
    pub fn route(&self) -> Option<&'a Route> {
        self.reached.route()
    }

    /// The sequence `request` belongs to: the one it names
    /// ([`Request::sequence`](crate::Request::sequence)), else, for a write,
    /// its route's filled from the path (`sequence = "customer/{id}"`).
    pub fn sequence(&self, request: &crate::Request) -> Option<String> {
        if let Some(named) = request.sequence_name() {
            return Some(named.to_owned());
        }
        match self.operation {
            Operation::Read => None,
            _ => self.route()?.sequence_of(request.path()),
        }
    }

    /// `Ok` if the call is retried on transient failures, else why it makes
    /// one attempt.
    pub fn retried(&self) -> Result<(), SentOnce> {
        match self.operation {
            _ if self.stream => Err(SentOnce::Stream),
            Operation::Read => Ok(()),
            Operation::KeyedWrite(_) if self.dedupes_by_key => Ok(()),
            Operation::KeyedWrite(_) => Err(SentOnce::NotDeduplicated),
            Operation::WriteOnce => Err(SentOnce::WriteOnce),
        }
    }

    /// Whether the call is a keyed write to a system that deduplicates by
    /// its key: the one kind of call a durable queue may finish later, and
    /// the one whose 409 may mean "the original is still in flight".
    pub fn is_deduplicated_write(&self) -> bool {
        matches!(self.operation, Operation::KeyedWrite(_)) && self.dedupes_by_key
    }

    /// The judge of the call's answers under `retry_on`, built once: the
    /// one every front end runs the call with.
    pub(crate) fn judge(&self, retry_on: crate::RetryOn) -> crate::verdict::AnswerJudge {
        crate::verdict::AnswerJudge::new(retry_on, self.is_deduplicated_write())
    }

    /// The same plan for a body that can be sent once only.
    pub(crate) fn streamed(self) -> Self {
        Self { stream: true, ..self }
    }

    pub(crate) fn index(&self) -> Option<usize> {
        self.reached.found.map(|(index, _)| index)
    }
}

/// What the caller of a call says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Declared<'k> {
    /// `read`, `write`, `write_once`, `send`: the caller declared it.
    As(Operation<'k>),
    /// Nobody declared it: its route, else its method and this key, decide.
    ByMethod(Option<&'k IdempotencyKey>),
}

/// What planning reads of a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Line<'r> {
    pub method: &'r Method,
    pub path: &'r str,
    pub headers: &'r HeaderMap,
    /// Whether it has no side effect: a safe method, or a query sent as a POST.
    pub is_read: bool,
}

/// A request its plan refused, and the route it reached (for the route's
/// count of calls refused).
#[derive(Debug)]
pub(crate) struct Refusal {
    pub error: HttpError,
    pub route: Option<usize>,
}

/// The routes of a front end that has none (a tower layer, a middleware).
pub(crate) static NO_ROUTES: Routes = Routes::new();

/// The system's side of planning: its routes, what becomes of an unrouted
/// write, and whether it deduplicates by key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Planner<'a> {
    pub routes: &'a Routes,
    pub unrouted: Unrouted,
    pub dedupes_by_key: bool,
}

impl<'a> Planner<'a> {
    /// The one function that decides what a call is: the module docs' table.
    pub fn plan<'k: 'a>(&self, line: Line<'_>, declared: Declared<'k>) -> Result<Plan<'a>, Refusal> {
        let reached = self.routes.reach(line.method, line.path, line.headers);
        let operation = self
            .operation(line, declared, reached.route())
            .map_err(|error| Refusal { error, route: reached.found.map(|(index, _)| index) })?;
        Ok(Plan { operation, reached, dedupes_by_key: self.dedupes_by_key, stream: false })
    }

    fn operation<'k>(
        &self,
        line: Line<'_>,
        declared: Declared<'k>,
        route: Option<&Route>,
    ) -> Result<Operation<'k>, HttpError> {
        let key_required = || {
            HttpError::Refused(Refused::KeyRequired {
                route: route.map(Route::name).unwrap_or_default().to_owned(),
            })
        };
        let not_a_read = || HttpError::Refused(Refused::NotARead { method: line.method.clone() });
        Ok(match (declared, route.map(Route::kind)) {
            (Declared::As(Operation::Read) | Declared::ByMethod(_), Some(RouteKind::Read)) => Operation::Read,
            // A write its caller declared on a read route is made as declared.
            (Declared::As(operation), Some(RouteKind::Read)) => operation,
            (Declared::As(Operation::Read), Some(_)) => return Err(not_a_read()),
            (Declared::As(Operation::Read), None) if line.is_read => Operation::Read,
            (Declared::As(Operation::Read), None) => return Err(not_a_read()),
            (_, Some(RouteKind::WriteOnce)) => Operation::WriteOnce,
            (
                Declared::As(Operation::KeyedWrite(key)) | Declared::ByMethod(Some(key)),
                Some(RouteKind::KeyedWrite),
            ) => Operation::KeyedWrite(key),
            (_, Some(RouteKind::KeyedWrite)) => return Err(key_required()),
            (Declared::ByMethod(_), None) if crate::routes::is_safe(line.method) => Operation::Read,
            (Declared::As(operation), None) => self.unrouted(operation, line)?,
            (Declared::ByMethod(Some(key)), None) => self.unrouted(Operation::KeyedWrite(key), line)?,
            (Declared::ByMethod(None), None) => self.unrouted(Operation::WriteOnce, line)?,
        })
    }

    fn unrouted<'k>(&self, operation: Operation<'k>, line: Line<'_>) -> Result<Operation<'k>, HttpError> {
        match self.unrouted {
            Unrouted::ByMethod => Ok(operation),
            Unrouted::Once => Ok(Operation::WriteOnce),
            Unrouted::Refuse => Err(HttpError::Refused(Refused::Unrouted {
                method: line.method.clone(),
                path: line.path.chars().take(200).collect(),
                routes: self.routes.iter().map(Route::name).collect::<Vec<_>>().join(", "),
            })),
        }
    }
}

/// Why the idempotency header holds no key a call can carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadKey {
    /// The header appears more than once: which key is meant is unknown.
    Repeated,
    /// Its value is not visible ASCII.
    NotAscii,
    /// Its value is not a key.
    Invalid(KeyError),
}

impl fmt::Display for BadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadKey::Repeated => f.write_str("the header appears more than once; send one key"),
            BadKey::NotAscii => f.write_str("not visible ASCII"),
            BadKey::Invalid(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for BadKey {}

/// The idempotency key in header `name` of `headers`, if there is one: the
/// one reading of the key a request carries, for the gateway, the
/// middleware and anything that forwards requests.
///
/// ```
/// use ballast_http::plan::{key_in, BadKey};
/// use http::header::{HeaderMap, HeaderName, HeaderValue};
///
/// let name = HeaderName::from_static("idempotency-key");
/// let mut headers = HeaderMap::new();
/// assert_eq!(key_in(&headers, &name), Ok(None));
/// headers.insert(&name, HeaderValue::from_static("order-7"));
/// assert_eq!(key_in(&headers, &name).unwrap().unwrap().as_str(), "order-7");
/// headers.append(&name, HeaderValue::from_static("order-8"));
/// assert_eq!(key_in(&headers, &name), Err(BadKey::Repeated));
/// ```
pub fn key_in(headers: &HeaderMap, name: &HeaderName) -> Result<Option<IdempotencyKey>, BadKey> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(BadKey::Repeated);
    }
    let text = value.to_str().map_err(|_| BadKey::NotAscii)?;
    IdempotencyKey::parse(text).map(Some).map_err(BadKey::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(error: &HttpError) -> &'static str {
        match error {
            HttpError::Refused(Refused::KeyRequired { .. }) => "key_required",
            HttpError::Refused(Refused::Unrouted { .. }) => "unrouted",
            HttpError::Refused(Refused::NotARead { .. }) => "not_a_read",
            _ => "other",
        }
    }

    /// Every row of the module docs' table, for a system that deduplicates
    /// by key and one that does not.
    #[test]
    fn the_table_of_what_a_request_is() {
        let routes = Routes::new()
            .route("GET", "/leads/{id}", RouteKind::Read)
            .and_then(|r| r.route("POST", "/search", RouteKind::Read))
            .and_then(|r| r.route("POST", "/payments", RouteKind::KeyedWrite))
            .and_then(|r| r.route("POST", "/notes", RouteKind::WriteOnce))
            .unwrap();
        let key = IdempotencyKey::parse("order-7").unwrap();
        let headers = HeaderMap::new();
        type Want = Result<(&'static str, Result<(), SentOnce>), &'static str>;
        let rows: [(&str, &str, &str, Declared<'_>, Unrouted, Want); 16] = [
            (
                "GET",
                "/leads/7",
                "a read route",
                Declared::ByMethod(None),
                Unrouted::Refuse,
                Ok(("read", Ok(()))),
            ),
            (
                "POST",
                "/search",
                "a read route, any method",
                Declared::ByMethod(None),
                Unrouted::Refuse,
                Ok(("read", Ok(()))),
            ),
            (
                "POST",
                "/payments",
                "keyed_write with a key",
                Declared::ByMethod(Some(&key)),
                Unrouted::Refuse,
                Ok(("keyed_write", Ok(()))),
            ),
            (
                "POST",
                "/payments",
                "keyed_write without one",
                Declared::ByMethod(None),
                Unrouted::Refuse,
                Err("key_required"),
            ),
            (
                "POST",
                "/notes",
                "write_once, with a key",
                Declared::ByMethod(Some(&key)),
                Unrouted::Refuse,
                Ok(("write_once", Err(SentOnce::WriteOnce))),
            ),
            (
                "HEAD",
                "/other",
                "no route, a safe method",
                Declared::ByMethod(None),
                Unrouted::Refuse,
                Ok(("read", Ok(()))),
            ),
            (
                "PUT",
                "/other",
                "no route, refused",
                Declared::ByMethod(Some(&key)),
                Unrouted::Refuse,
                Err("unrouted"),
            ),
            (
                "PUT",
                "/other",
                "no route, written once",
                Declared::ByMethod(Some(&key)),
                Unrouted::Once,
                Ok(("write_once", Err(SentOnce::WriteOnce))),
            ),
            (
                "PUT",
                "/other",
                "no route, by method, a key",
                Declared::ByMethod(Some(&key)),
                Unrouted::ByMethod,
                Ok(("keyed_write", Ok(()))),
            ),
            (
                "PUT",
                "/other",
                "no route, by method, no key",
                Declared::ByMethod(None),
                Unrouted::ByMethod,
                Ok(("write_once", Err(SentOnce::WriteOnce))),
            ),
            (
                "GET",
                "/leads/7",
                "read declared, read route",
                Declared::As(Operation::Read),
                Unrouted::Refuse,
                Ok(("read", Ok(()))),
            ),
            (
                "POST",
                "/payments",
                "read declared on a write route",
                Declared::As(Operation::Read),
                Unrouted::Refuse,
                Err("not_a_read"),
            ),
            (
                "POST",
                "/other",
                "read declared, a POST",
                Declared::As(Operation::Read),
                Unrouted::ByMethod,
                Err("not_a_read"),
            ),
            (
                "POST",
                "/payments",
                "write_once declared on keyed_write",
                Declared::As(Operation::WriteOnce),
                Unrouted::Refuse,
                Err("key_required"),
            ),
            (
                "POST",
                "/notes",
                "keyed write declared on write_once",
                Declared::As(Operation::KeyedWrite(&key)),
                Unrouted::Refuse,
                Ok(("write_once", Err(SentOnce::WriteOnce))),
            ),
            (
                "POST",
                "/payments",
                "keyed write declared",
                Declared::As(Operation::KeyedWrite(&key)),
                Unrouted::Refuse,
                Ok(("keyed_write", Ok(()))),
            ),
        ];
        for dedupes_by_key in [true, false] {
            for (method, path, row, declared, unrouted, want) in rows {
                let planner = Planner { routes: &routes, unrouted, dedupes_by_key };
                let method = Method::from_bytes(method.as_bytes()).unwrap();
                let line = Line {
                    method: &method,
                    path,
                    headers: &headers,
                    is_read: crate::routes::is_safe(&method),
                };
                let got = match planner.plan(line, declared) {
                    Ok(plan) => Ok((plan.operation().kind().as_str(), plan.retried())),
                    Err(refused) => Err(name(&refused.error)),
                };
                let want = want.map(|(kind, retried)| match retried {
                    Ok(()) if kind == "keyed_write" && !dedupes_by_key => {
                        (kind, Err(SentOnce::NotDeduplicated))
                    }
                    retried => (kind, retried),
                });
                assert_eq!(got, want, "{row} (dedupes_by_key = {dedupes_by_key})");
            }
        }
    }

    #[test]
    fn a_stream_is_sent_once_whatever_the_operation_and_says_why() {
        let planner = Planner { routes: &NO_ROUTES, unrouted: Unrouted::ByMethod, dedupes_by_key: true };
        let line = Line { method: &Method::GET, path: "/", headers: &HeaderMap::new(), is_read: true };
        let plan = planner.plan(line, Declared::ByMethod(None)).unwrap().streamed();
        assert_eq!(plan.retried(), Err(SentOnce::Stream));
        assert_eq!(
            (SentOnce::Stream.rule(), SentOnce::Stream.stop_reason()),
            (Rule::ReX1, StopReason::NotRetryable)
        );
        assert_eq!(SentOnce::NotDeduplicated.stop_reason(), StopReason::NotDeduplicated);
    }

    #[test]
    fn a_refused_plan_names_the_route_it_reached() {
        let routes = Routes::new().route("POST", "/payments", RouteKind::KeyedWrite).unwrap();
        let planner = Planner { routes: &routes, unrouted: Unrouted::Refuse, dedupes_by_key: true };
        let line =
            Line { method: &Method::POST, path: "/payments", headers: &HeaderMap::new(), is_read: false };
        let refused = planner.plan(line, Declared::ByMethod(None)).unwrap_err();
        assert_eq!((name(&refused.error), refused.route), ("key_required", Some(0)));
    }
}
