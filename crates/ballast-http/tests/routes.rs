//! Routes on the library side: an `HttpSystem` built with the routes a
//! configuration (or `ballast openapi import`) declares holds its callers to
//! them — on tokio's paused clock, the upstream in the process.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ballast::{IdempotencyKey, Retry};
use ballast_http::routes::{Route, RouteKind, Routes};
use ballast_http::transport::{OutBody, TransportError};
use ballast_http::{HttpError, HttpSystem, Refused, Request};
use bytes::Bytes;

/// A payment API that is busy (503) for every request but the second
/// search, and slow to answer `GET /slow`; it keeps `METHOD path` of each.
fn system(seen: Arc<Mutex<Vec<String>>>) -> HttpSystem {
    let upstream = tower::service_fn(move |request: http::Request<OutBody>| {
        let line = format!("{} {}", request.method(), request.uri().path());
        let n = {
            let mut seen = seen.lock().unwrap();
            seen.push(line.clone());
            seen.iter().filter(|l| **l == line).count()
        };
        async move {
            if line.ends_with("/slow") {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            let status = if line.ends_with("/search") && n == 2 { 200 } else { 503 };
            let mut response = http::Response::new(Bytes::new());
            *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
            Ok::<_, TransportError>(response)
        }
    });
    let routes = Routes::new()
        .route("POST", "/payments", RouteKind::KeyedWrite)
        .and_then(|r| r.route("POST", "/orders/search", RouteKind::Read))
        .and_then(|r| r.route("PATCH", "/orders/{id}", RouteKind::WriteOnce))
        .and_then(|r| {
            r.with(Route::new("GET", "/slow", RouteKind::Read)?.timeout(Duration::from_millis(200)))
        })
        .unwrap();
    HttpSystem::builder("pay", "http://pay.test/v2/")
        .transport(upstream)
        .dedupes_by_key(true)
        .routes(routes)
        .policy(|p| p.retry(Retry::attempts(2)))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_system_holds_its_callers_to_its_routes() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let pay = system(Arc::clone(&seen));

    let refused = pay.write_once(Request::post("payments").json(&1)).await.unwrap_err();
    assert!(
        matches!(refused.error(), Some(HttpError::Refused(Refused::KeyRequired { route })) if route == "POST /payments"),
        "{refused:?}"
    );
    assert_eq!(refused.attempts(), 0);
    assert!(refused.to_string().contains("R-RES-RE-1"), "{refused}");

    let found = pay.read(Request::post("orders/search").json(&"query")).await.unwrap();
    assert_eq!((found.status().as_u16(), found.attempts()), (200, 2), "a POST declared read is retried");

    let key = IdempotencyKey::v5("order-1", "describe");
    let once = pay.write(&key, Request::new(http::Method::PATCH, "orders/1")).await.unwrap_err();
    assert_eq!(once.attempts(), 1, "declared write_once: sent once, key or not");

    let late = pay.read(Request::get("slow")).await.unwrap_err();
    assert!(late.to_string().contains("route's attempt timeout of 200ms"), "{late}");

    let not_a_read = pay.read(Request::post("payments")).await.unwrap_err();
    assert!(matches!(not_a_read.error(), Some(HttpError::Refused(Refused::NotARead { .. }))));

    let sent = seen.lock().unwrap().clone();
    assert_eq!(
        sent,
        [
            "POST /v2/orders/search",
            "POST /v2/orders/search",
            "PATCH /v2/orders/1",
            "GET /v2/slow",
            "GET /v2/slow"
        ],
        "nothing to /payments"
    );
}
