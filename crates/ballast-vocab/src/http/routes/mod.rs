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

mod follow;
mod kind;
mod route;
mod sequence;
mod spelling;
mod template;

use http::Method;

pub use follow::{Follow, DEFAULT_FOLLOW_DEADLINE};
pub use kind::{canonical_method, is_safe, RouteKind, Unrouted, METHOD_OVERRIDE_HEADERS};
pub use route::{Route, RouteError};

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
        assert_eq!("keyed".parse::<RouteKind>(), Err(crate::UnknownKind("keyed".into())));
        let twice = routes().route("POST", "/orders/{number}", RouteKind::Read);
        assert_eq!(twice, Err(RouteError::Duplicate("POST /orders/{number}".into())));
    }
}
