//! What an upstream's answers tell an adaptive rate limit, through a real
//! `HttpSystem` with the upstream in the process (its transport), on the
//! paused clock: the rate its `RateLimit-Policy` announces, a quota spent
//! until its reset, a 503 with a long `Retry-After`; a fixed limit listens
//! to none of it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ballast::{Failure, RateLimit, Rejection};
use ballast_http::transport::{OutBody, TransportError};
use ballast_http::{HttpSystem, Request};
use bytes::Bytes;

/// The status and headers the upstream answers with, changed as the test goes.
type Answer = Arc<Mutex<(u16, Vec<(&'static str, &'static str)>)>>;

/// A system whose upstream answers with the status and headers set in `answer`.
fn system(limit: RateLimit, answer: Answer) -> HttpSystem {
    let upstream = tower::service_fn(move |_: http::Request<OutBody>| {
        let (status, headers) = answer.lock().unwrap().clone();
        let mut response = http::Response::new(Bytes::new());
        *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
        for (name, value) in headers {
            response.headers_mut().insert(name, http::HeaderValue::from_static(value));
        }
        std::future::ready(Ok::<_, TransportError>(response))
    });
    HttpSystem::builder("partner", "http://partner.test/")
        .transport(upstream)
        .policy(|p| p.retry(ballast::Retry::attempts(1)).rate_limit(limit))
        .build()
        .unwrap()
}

fn refused_for(failure: Failure<ballast_http::HttpError>) -> Duration {
    match failure.rejection() {
        Some(Rejection::RateLimited { retry_in }) => retry_in,
        other => panic!("not refused by the rate limit: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_limit_takes_the_rate_and_the_holds_the_system_announces() {
    let answer = Arc::new(Mutex::new((200, vec![("ratelimit-policy", "\"burst\";q=100;w=10")])));
    let partner = system(RateLimit::per_second(1000).burst(1).adaptive(), Arc::clone(&answer));
    let limiter = partner.policy().rate_limiter().unwrap();
    partner.read(Request::get("a")).await.unwrap();
    assert_eq!((limiter.rate(), limiter.snapshot().ceiling), (10.0, 10.0), "100 per 10 s");

    *answer.lock().unwrap() = (200, vec![("ratelimit", "\"burst\";r=0;t=30")]);
    tokio::time::advance(Duration::from_millis(100)).await;
    partner.read(Request::get("b")).await.unwrap();
    let wait = refused_for(partner.read(Request::get("c")).await.unwrap_err());
    assert!(
        wait > Duration::from_secs(29) && wait <= Duration::from_secs(30),
        "held until the reset: {wait:?}"
    );

    tokio::time::advance(Duration::from_secs(31)).await;
    *answer.lock().unwrap() = (503, vec![("retry-after", "5")]);
    let busy = partner.read(Request::get("d")).await.unwrap_err();
    assert!(busy.error().is_some(), "the 503 itself comes back: {busy:?}");
    let wait = refused_for(partner.read(Request::get("e")).await.unwrap_err());
    assert!(
        wait > Duration::from_secs(4) && wait <= Duration::from_secs(5),
        "a long Retry-After holds: {wait:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_fixed_limit_listens_to_none_of_it() {
    let answer = Arc::new(Mutex::new((429, vec![("retry-after", "60"), ("ratelimit", "r=0;t=60")])));
    let partner = system(RateLimit::per_second(1000).burst(1), answer);
    let limiter = partner.policy().rate_limiter().unwrap();
    for _ in 0..3 {
        let _ = partner.read(Request::get("a")).await;
        tokio::time::advance(Duration::from_millis(1)).await;
    }
    assert_eq!(limiter.rate(), 1000.0);
    assert_eq!(limiter.snapshot().limited, 0);
}
