//! What a call is when no route says otherwise, and what a route can say it
//! is: the kind of a call (`read`, `keyed_write`, `write_once`), what a
//! write no route declares gets, and the method a request's headers may
//! override its own with.

use std::str::FromStr;

use http::Method;

use crate::OpKind;

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

/// What a call to a route is: the one [`OpKind`] — `read` (a read,
/// retried on transient failures, whatever its method, R-RES-RE-1 a),
/// `keyed_write` (a write that must carry an idempotency key: one without
/// is refused unsent, R-RES-RE-1 b), `write_once` (sent once, key or not,
/// R-RES-RE-X1).
pub type RouteKind = OpKind;

/// What becomes of a write that matches none of a system's routes
/// (`[systems.NAME] unrouted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Unrouted {
    /// Refused unsent, naming the routes (`ballast_http::Refused::Unrouted`):
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
/// named method reaches allows them ([`Route::method_override`](super::Route::method_override)): an
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
