//! What a call to a system is, decided once: the [`Plan`] every entry point
//! makes before anything is sent — [`HttpSystem::read`](crate::HttpSystem::read),
//! `write`, `write_once`, `send`, `write_or_defer`, and the gateway through
//! [`HttpSystem::plan_by_method`](crate::HttpSystem::plan_by_method) — and
//! that the call carries to its attempts, so no layer works it out again.
//!
//! A request no caller has declared (a gateway's, a proxy's) is planned by
//! its route, else its method and key (R-RES-RE-1):
//!
//! | request | operation |
//! |---|---|
//! | a route declared `read` (any method) | read: retried on transient failures |
//! | a route declared `keyed_write`, with a key | keyed write |
//! | a route declared `keyed_write`, without one | refused unsent: [`HttpError::KeyRequired`] (R-RES-RE-1) |
//! | a route declared `write_once` | write once, key or not |
//! | no route: GET, HEAD, OPTIONS | read |
//! | no route, another method, on a system with routes | what [`Unrouted`] says: refused unsent by default ([`HttpError::Unrouted`]), or written once |
//! | no route: any other method with a key | keyed write |
//! | no route: any other method without one | write once: exactly one attempt (R-RES-RE-X1) |
//!
//! A keyed write makes one attempt, too, when the system does not
//! deduplicate by its key ([`Plan::retried`] says why): the key is still
//! sent, but a retry needs the system's guarantee, not just the header.
//!
//! A route is found as [`routes`](crate::routes) says: by the method in any
//! case, a path in any spelling, and through a method-override header only
//! where the route allows one (otherwise the header is dropped).

use ballast::{IdempotencyKey, Operation, Rule};

use crate::request::Head;
use crate::routes::{Reached, Route, RouteKind, Unrouted};
use crate::HttpError;

/// What a call is: see the module docs.
#[derive(Debug, Clone, Copy)]
pub struct Plan<'a> {
    pub(crate) operation: Operation<'a>,
    pub(crate) reached: Reached<'a>,
    pub(crate) dedupes_by_key: bool,
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
}

impl SentOnce {
    /// The rule that stops the retry.
    pub fn rule(self) -> Rule {
        match self {
            SentOnce::WriteOnce => Rule::ReX1,
            SentOnce::NotDeduplicated => Rule::Re1,
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

    /// `Ok` if the call is retried on transient failures, else why it makes
    /// one attempt.
    pub fn retried(&self) -> Result<(), SentOnce> {
        match self.operation {
            Operation::Read => Ok(()),
            Operation::Write(_) if self.dedupes_by_key => Ok(()),
            Operation::Write(_) => Err(SentOnce::NotDeduplicated),
            Operation::WriteOnce => Err(SentOnce::WriteOnce),
        }
    }

    /// Whether the call is a keyed write to a system that deduplicates by
    /// its key: the one kind of call a durable queue may finish later, and
    /// the one whose 409 may mean "the original is still in flight".
    pub fn is_deduplicated_write(&self) -> bool {
        matches!(self.operation, Operation::Write(_)) && self.dedupes_by_key
    }

    pub(crate) fn index(&self) -> Option<usize> {
        self.reached.found.map(|(index, _)| index)
    }
}

/// The system's side of planning: its routes, what becomes of an unrouted
/// write, and whether it deduplicates by key.
pub(crate) struct Planner<'a> {
    pub routes: &'a crate::routes::Routes,
    pub unrouted: Unrouted,
    pub dedupes_by_key: bool,
}

impl<'a> Planner<'a> {
    /// The plan of a call its caller declared as `operation`, with the
    /// route's word over the caller's where the contract says more: a
    /// read of a route declared `read` may use any method; a route
    /// declared `keyed_write` takes no call without a key (R-RES-RE-1); a
    /// route declared `write_once` is sent once, key or not; a write no
    /// route matches is what the system's [`Unrouted`] says.
    pub fn declared<'k: 'a>(
        &self,
        operation: Operation<'k>,
        head: &Head,
        is_read: bool,
    ) -> Result<Plan<'a>, HttpError> {
        let reached = self.routes.reach(&head.method, &head.path, &head.headers);
        let route = reached.route();
        let not_a_read = || HttpError::NotARead { method: head.method.clone() };
        let operation = match (operation, route.map(Route::kind)) {
            (Operation::Read, Some(RouteKind::Read)) => Operation::Read,
            (Operation::Read, Some(_)) => return Err(not_a_read()),
            (Operation::Read, None) if is_read => Operation::Read,
            (Operation::Read, None) => return Err(not_a_read()),
            (Operation::Write(_) | Operation::WriteOnce, Some(RouteKind::WriteOnce)) => Operation::WriteOnce,
            (Operation::WriteOnce, Some(RouteKind::KeyedWrite)) => {
                return Err(HttpError::KeyRequired { route: route.map(Route::name).unwrap_or_default().to_owned() })
            }
            (operation, Some(_)) => operation,
            (operation, None) => self.unrouted(operation, head)?,
        };
        Ok(Plan { operation, reached, dedupes_by_key: self.dedupes_by_key })
    }

    /// The plan of a request nobody declared: the module docs' table.
    pub fn by_method<'k: 'a>(&self, head: &Head, key: Option<&'k IdempotencyKey>) -> Result<Plan<'a>, HttpError> {
        let reached = self.routes.reach(&head.method, &head.path, &head.headers);
        let operation = match (reached.route().map(Route::kind), key) {
            (Some(RouteKind::Read), _) => Operation::Read,
            (Some(RouteKind::WriteOnce), _) => Operation::WriteOnce,
            (Some(RouteKind::KeyedWrite), Some(key)) => Operation::Write(key),
            (Some(RouteKind::KeyedWrite), None) => {
                let route = reached.route().map(Route::name).unwrap_or_default().to_owned();
                return Err(HttpError::KeyRequired { route });
            }
            (None, _) if crate::routes::is_safe(&head.method) => Operation::Read,
            (None, Some(key)) => self.unrouted(Operation::Write(key), head)?,
            (None, None) => self.unrouted(Operation::WriteOnce, head)?,
        };
        Ok(Plan { operation, reached, dedupes_by_key: self.dedupes_by_key })
    }

    fn unrouted<'k>(&self, operation: Operation<'k>, head: &Head) -> Result<Operation<'k>, HttpError> {
        match self.unrouted {
            Unrouted::ByMethod => Ok(operation),
            Unrouted::Once => Ok(Operation::WriteOnce),
            Unrouted::Refuse => Err(HttpError::Unrouted {
                method: head.method.clone(),
                path: head.path.chars().take(200).collect(),
                routes: self.routes.iter().map(Route::name).collect::<Vec<_>>().join(", "),
            }),
        }
    }
}
