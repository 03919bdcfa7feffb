//! Who may talk to `ballast serve` from a browser. A web page on
//! `attacker.example` can make a browser send requests to 127.0.0.1 — by
//! DNS rebinding its own name to it, or by posting a form there — and a
//! listener that answers any `Host` gives that page the dashboard, task
//! payloads and the Cancel button. So:
//!
//! - the admin listener answers only its own names ([`Hosts`]): `localhost`,
//!   the loopback addresses, its listen address (any IP address when it
//!   listens on all of them) and `[serve] allowed_hosts`; any other `Host` is
//!   answered 421 (a rebound name is never one of them);
//! - its state-changing requests (every POST of the dashboard) must also come
//!   from its own origin when a browser says where they come from
//!   (`Sec-Fetch-Site`, `Origin`): 403 otherwise;
//! - the gateway answers only its own names too (`[gateway] allowed_hosts`
//!   adds some), so a rebound page cannot call the systems with their
//!   credentials; and it serves services, not pages: a request a browser
//!   marks as coming from another site is refused with 403
//!   ([`from_another_site`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{HOST, ORIGIN};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::gateway::problem::{Problem, Reason};

/// The names a listener answers to.
#[derive(Debug, Clone)]
pub struct Hosts {
    listen: SocketAddr,
    allowed: Arc<[String]>,
    /// The section whose `allowed_hosts` adds names, for the 421's advice.
    section: &'static str,
}

impl Hosts {
    /// The names of the admin listener on `listen`, plus `allowed` (host
    /// names, with or without a port).
    pub fn new(listen: SocketAddr, allowed: &[String]) -> Self {
        Self { listen, allowed: allowed.iter().map(|h| h.to_ascii_lowercase()).collect(), section: "serve" }
    }

    /// The names of the gateway on `listen`, plus `allowed`.
    pub fn gateway(listen: SocketAddr, allowed: &[String]) -> Self {
        Self { section: "gateway", ..Self::new(listen, allowed) }
    }

    /// Whether a request whose `Host` is `host` is for this listener.
    ///
    /// ```
    /// use ballast_server::origin::Hosts;
    ///
    /// let hosts = Hosts::new("127.0.0.1:9464".parse().unwrap(), &["ballast.internal".to_owned()]);
    /// for ours in ["localhost:9464", "127.0.0.1:9464", "[::1]:9464", "ballast.internal", "BALLAST.internal:9464"] {
    ///     assert!(hosts.admits(ours), "{ours}");
    /// }
    /// for theirs in ["attacker.example", "attacker.example:9464", "10.0.0.5:9464", "localhost.attacker.example"] {
    ///     assert!(!hosts.admits(theirs), "{theirs}");
    /// }
    /// ```
    pub fn admits(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let name = strip_port(&host).trim_end_matches('.');
        if name == "localhost" {
            return true;
        }
        if let Ok(ip) = name.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            // A rebound name is a name: an address literal cannot be one.
            return ip.is_loopback() || ip == self.listen.ip() || self.listen.ip().is_unspecified();
        }
        self.allowed
            .iter()
            .any(|allowed| *allowed == host || strip_port(allowed) == name && !allowed.contains(':'))
    }
}

/// `host` without a `:port` (keeping an IPv6 literal's brackets).
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Answers 421 to a request whose `Host` is not one of the listener's names.
pub async fn admit_host(State(hosts): State<Hosts>, request: Request, next: Next) -> Response {
    match misdirected(&hosts, &request) {
        Some(refused) => refused,
        None => next.run(request).await,
    }
}

/// The 421 for a request whose `Host` is not one of `hosts`, if it is not.
pub(crate) fn misdirected(hosts: &Hosts, request: &Request) -> Option<Response> {
    let host = request.headers().get(HOST).and_then(|v| v.to_str().ok())?;
    if hosts.admits(host) {
        return None;
    }
    tracing::debug!(%host, "request for another host refused");
    let section = hosts.section;
    let detail = format!(
        "this listener answers to localhost, its loopback and listen addresses and [{section}] allowed_hosts, \
         not to {host:?}; if you reach it by that name (a proxy, a DNS name of this host), add it to \
         [{section}] allowed_hosts"
    );
    Some(Problem::new(Reason::UnknownHost, detail).into_response())
}

/// Refuses a state-changing request that a browser says comes from another
/// origin than the listener's own.
pub async fn same_origin_actions(request: Request, next: Next) -> Response {
    if matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(request).await;
    }
    match foreign(request.headers(), &["same-origin", "none"]) {
        Some(why) => {
            let detail = format!("{why}: the dashboard's actions are taken only from its own pages");
            Problem::new(Reason::CrossSite, detail).into_response()
        }
        None => next.run(request).await,
    }
}

/// The gateway's answer to a request a browser marks as sent from another
/// site (it serves services, not web pages), if it is one.
pub fn from_another_site(headers: &HeaderMap) -> Option<Response> {
    let why = foreign(headers, &["same-origin", "none"])?;
    let detail =
        format!("{why}: the gateway serves services, not web pages; call it from your service's code");
    Some(Problem::new(Reason::CrossSite, detail).into_response())
}

/// Why `headers` say the request comes from another origin, if they do:
/// a `Sec-Fetch-Site` other than `accepted`, or, from a browser that sends
/// none, an `Origin` whose host is not the request's `Host`. Requests that
/// say neither (curl, services) pass.
fn foreign(headers: &HeaderMap, accepted: &[&str]) -> Option<String> {
    // A browser that says Sec-Fetch-Site says it best (its Origin is `null`
    // under `Referrer-Policy: no-referrer`, which the dashboard sends).
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if accepted.iter().any(|a| site.eq_ignore_ascii_case(a)) {
            return None;
        }
        return Some(format!("the browser marked this request Sec-Fetch-Site: {site}"));
    }
    let origin = headers.get(ORIGIN).and_then(|v| v.to_str().ok())?;
    let host = headers.get(HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let authority = origin.split_once("://").map(|(_, rest)| rest.trim_end_matches('/'));
    match authority {
        Some(authority) if authority.eq_ignore_ascii_case(host) => None,
        _ => Some(format!("the request comes from {origin}, not from this host ({host})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, v.parse().unwrap());
        }
        map
    }

    #[test]
    fn only_the_listener_s_own_origin_may_act() {
        let ok = [
            headers(&[("host", "127.0.0.1:9464")]),
            headers(&[
                ("host", "127.0.0.1:9464"),
                ("origin", "http://127.0.0.1:9464"),
                ("sec-fetch-site", "same-origin"),
            ]),
            headers(&[("host", "localhost:9464"), ("sec-fetch-site", "none")]),
            headers(&[("host", "127.0.0.1:9464"), ("origin", "null"), ("sec-fetch-site", "same-origin")]),
        ];
        for h in &ok {
            assert_eq!(foreign(h, &["same-origin", "none"]), None, "{h:?}");
        }
        let refused = [
            headers(&[("host", "127.0.0.1:9464"), ("sec-fetch-site", "cross-site")]),
            headers(&[("host", "127.0.0.1:9464"), ("sec-fetch-site", "same-site")]),
            headers(&[("host", "127.0.0.1:9464"), ("origin", "http://attacker.example")]),
            headers(&[("host", "127.0.0.1:9464"), ("origin", "null")]),
        ];
        for h in &refused {
            assert!(foreign(h, &["same-origin", "none"]).is_some(), "{h:?}");
        }
    }

    #[test]
    fn a_listener_on_every_address_answers_any_address_but_no_foreign_name() {
        let hosts = Hosts::new("0.0.0.0:9464".parse().unwrap(), &["ops.example:8443".to_owned()]);
        assert!(hosts.admits("10.1.2.3:9464") && hosts.admits("[fe80::1]:9464"));
        assert!(hosts.admits("ops.example:8443") && !hosts.admits("ops.example"));
        assert!(!hosts.admits("rebound.attacker.example:9464"));
    }
}
