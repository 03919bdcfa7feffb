//! Which headers cross the gateway: end-to-end ones pass, hop-by-hop ones
//! (RFC 9110 §7.6.1) stop here, and the few the gateway itself answers to —
//! its token, the key, the async preference — are taken out of the request.

use axum::http::header::{self, HeaderName};
use axum::http::HeaderMap;

use super::names::{IDEMPOTENCY_KEY, PREFER};

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    super::names::KEEP_ALIVE,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    super::names::PROXY_CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// The preference a client states to have a keyed write deferred (RFC 7240).
pub(super) const RESPOND_ASYNC: &str = "respond-async";

/// `headers` without the hop-by-hop ones, including any the `Connection`
/// header names, and without `Upgrade`: filtered in place.
pub(super) fn end_to_end(mut headers: HeaderMap) -> HeaderMap {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in HOP_BY_HOP.iter().chain(&named).chain([&header::UPGRADE]) {
        headers.remove(name);
    }
    headers
}

/// Headers in which a caller could speak for another client or rewrite
/// the request's target at a proxy behind the gateway (besides
/// `X-Forwarded-*`): dropped unless `[gateway] trust_forwarded`.
const SPOOFABLE: [&str; 8] = [
    "forwarded",
    "x-real-ip",
    "true-client-ip",
    "x-client-ip",
    "cf-connecting-ip",
    "x-cluster-client-ip",
    "x-original-url",
    "x-rewrite-url",
];

/// The `Via` pseudonym (RFC 9110 §7.6.3) the gateway adds to every request
/// it forwards, and finds again in a request that has come round to it.
pub(super) const VIA_NAME: &str = "ballast";

/// Whether a proxy calling itself [`VIA_NAME`] already forwarded the
/// request: the gateway is calling itself (a `base_url` pointing back at it).
pub(super) fn came_through_us(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::VIA)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|entry| entry.split_whitespace().nth(1).is_some_and(|by| by.eq_ignore_ascii_case(VIA_NAME)))
}

/// The headers of a request as forwarded upstream: end to end, without
/// `Host` (the upstream's own is set), `Content-Length` (recomputed), the
/// client's `Idempotency-Key` (the system adds the key under its own header
/// name), the gateway's token when it asks for one, and the
/// `respond-async` preference, which is addressed to the gateway, and —
/// unless `trust_forwarded` — the caller's `Forwarded`, `X-Forwarded-*`,
/// `X-Real-IP` and the others of [`SPOOFABLE`], which would let any caller
/// speak for another; with
/// `Via: 1.1 ballast` added after any `Via` it came with.
pub(super) fn forwarded(
    headers: HeaderMap,
    token_in_authorization: bool,
    trust_forwarded: bool,
) -> HeaderMap {
    let mut out = end_to_end(headers);
    if !trust_forwarded {
        let spoofable: Vec<HeaderName> = out
            .keys()
            .filter(|name| {
                let name = name.as_str();
                SPOOFABLE.contains(&name) || name.starts_with("x-forwarded-")
            })
            .cloned()
            .collect();
        for name in spoofable {
            out.remove(name);
        }
    }
    out.remove(header::HOST);
    out.remove(header::CONTENT_LENGTH);
    out.remove(IDEMPOTENCY_KEY);
    if token_in_authorization {
        out.remove(header::AUTHORIZATION);
    }
    if !out.contains_key(PREFER) {
        out.append(header::VIA, header::HeaderValue::from_static("1.1 ballast"));
        return out;
    }
    let prefer: Vec<String> = out
        .get_all(PREFER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty() && !is_respond_async(p))
        .map(str::to_owned)
        .collect();
    out.remove(PREFER);
    if !prefer.is_empty() {
        if let Ok(value) = prefer.join(", ").parse() {
            out.insert(PREFER, value);
        }
    }
    out.append(header::VIA, header::HeaderValue::from_static("1.1 ballast"));
    out
}

/// Whether the request states `Prefer: respond-async`.
pub(super) fn wants_async(headers: &HeaderMap) -> bool {
    headers
        .get_all(PREFER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(is_respond_async)
}

fn is_respond_async(preference: &str) -> bool {
    let token = preference.split(';').next().unwrap_or_default().trim();
    token.eq_ignore_ascii_case(RESPOND_ASYNC)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        m
    }

    #[test]
    fn hop_by_hop_and_gateway_headers_stay_behind() {
        let incoming = map(&[
            ("host", "127.0.0.1:9465"),
            ("connection", "keep-alive, x-hop"),
            ("keep-alive", "timeout=5"),
            ("x-hop", "1"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("content-length", "3"),
            ("idempotency-key", "k1"),
            ("authorization", "Bearer gateway-token"),
            ("prefer", "respond-async, wait=5"),
            ("x-request-id", "r-1"),
            ("accept", "application/json"),
            ("accept", "text/plain"),
        ]);
        let out = forwarded(incoming.clone(), true, false);
        // The order of different field names carries no meaning (RFC 9110 §5.3),
        // and HeaderMap does not keep it across removals.
        let mut names: Vec<&str> = out.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["accept", "prefer", "via", "x-request-id"]);
        assert_eq!(out["via"], "1.1 ballast");
        assert_eq!(out.get_all("accept").iter().count(), 2, "repeated headers stay repeated");
        assert_eq!(out["prefer"], "wait=5");
        assert!(wants_async(&incoming));
        assert!(!wants_async(&map(&[("prefer", "return=minimal")])));
        assert_eq!(forwarded(incoming, false, false)["authorization"], "Bearer gateway-token");
    }

    #[test]
    fn forwarded_headers_are_dropped_unless_trusted() {
        let incoming = map(&[
            ("forwarded", "for=10.0.0.9"),
            ("x-forwarded-for", "10.0.0.9"),
            ("x-forwarded-host", "admin.internal"),
            ("x-real-ip", "10.0.0.9"),
            ("true-client-ip", "10.0.0.9"),
            ("x-client-ip", "10.0.0.9"),
            ("cf-connecting-ip", "10.0.0.9"),
            ("x-original-url", "/admin"),
            ("x-request-id", "r-1"),
        ]);
        let mut dropped: Vec<&str> = Vec::new();
        let out = forwarded(incoming.clone(), false, false);
        for name in [
            "forwarded",
            "x-forwarded-for",
            "x-forwarded-host",
            "x-real-ip",
            "true-client-ip",
            "x-client-ip",
            "cf-connecting-ip",
            "x-original-url",
        ] {
            assert!(!out.contains_key(name), "{name} dropped");
            dropped.push(name);
        }
        assert_eq!(out["x-request-id"], "r-1");
        let trusted = forwarded(incoming, false, true);
        assert!(dropped.iter().all(|name| trusted.contains_key(*name)), "kept when trusted");
    }

    #[test]
    fn a_request_that_came_through_the_gateway_is_recognised() {
        let through = forwarded(map(&[("via", "1.0 fred, 1.1 p.example (Apache/1.1)")]), false, false);
        let vias: Vec<_> = through.get_all("via").iter().collect();
        assert_eq!(vias, ["1.0 fred, 1.1 p.example (Apache/1.1)", "1.1 ballast"]);
        assert!(came_through_us(&through));
        assert!(came_through_us(&map(&[("via", "HTTP/1.1 Ballast (x)")])));
        assert!(!came_through_us(&map(&[("via", "1.1 ballast-edge, 2 ballastx")])));
        assert!(!came_through_us(&HeaderMap::new()));
    }
}
