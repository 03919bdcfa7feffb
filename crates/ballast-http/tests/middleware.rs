//! `PolicyMiddleware` in a reqwest-middleware chain against a real local
//! server: reads and keyed writes retried, everything else sent once, and the
//! other middlewares of the chain seeing the call or each attempt depending
//! on where they sit.
#![cfg(feature = "middleware")]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ballast::{Backoff, Breaker, Failure, IdempotencyKey, Policy, Retry, Timeout};
use ballast_http::middleware::AttemptError;
use ballast_http::{CallFailed, PolicyMiddleware};
use ballast_test_support::{Reply, Upstream};
use http::Extensions;
use reqwest::Request;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use support::ms;

/// What a middleware gives back.
type Answer = reqwest_middleware::Result<reqwest::Response>;

fn policy(name: &str) -> Policy {
    Policy::builder(name)
        .retry(Retry::attempts(3).backoff(Backoff::exponential(ms(100)).max_delay(ms(200))).without_budget())
        .timeout(Timeout::aggressive(ms(400)))
        .seed(7)
        .build()
        .unwrap()
}

fn client(middleware: PolicyMiddleware) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new()).with(middleware).build()
}

/// 503 to every request.
async fn down() -> Upstream {
    Upstream::start(|_, _| Reply::body(503, "down")).await
}

/// Counts the requests that pass it.
#[derive(Clone, Default)]
struct Counting(Arc<AtomicUsize>);

#[async_trait::async_trait]
impl Middleware for Counting {
    async fn handle(&self, request: Request, extensions: &mut Extensions, next: Next<'_>) -> Answer {
        self.0.fetch_add(1, Ordering::SeqCst);
        next.run(request, extensions).await
    }
}

/// Adds `x-trace: on` to every request that passes it.
struct Tagging;

#[async_trait::async_trait]
impl Middleware for Tagging {
    async fn handle(&self, mut request: Request, extensions: &mut Extensions, next: Next<'_>) -> Answer {
        request.headers_mut().insert("x-trace", http::HeaderValue::from_static("on"));
        next.run(request, extensions).await
    }
}

#[tokio::test]
async fn reads_are_retried_and_the_last_answer_is_returned() {
    let server = down().await;
    let response =
        client(PolicyMiddleware::new(policy("crm"))).get(server.url("/api/")).send().await.unwrap();
    assert_eq!((response.status().as_u16(), server.count()), (503, 3));
}

#[tokio::test]
async fn a_post_without_a_key_is_sent_exactly_once() {
    let server = down().await;
    let middleware = PolicyMiddleware::new(policy("crm")).dedupes_by_key(true);
    let response = client(middleware).post(server.url("/api/")).body("pay 100").send().await.unwrap();
    assert_eq!((response.status().as_u16(), server.count()), (503, 1));
}

#[tokio::test]
async fn a_keyed_post_is_retried_with_its_key_only_when_the_system_dedupes() {
    let key = IdempotencyKey::v5("order-9", "pay");
    for (dedupes, sent) in [(true, 3), (false, 1)] {
        let server = down().await;
        let middleware = PolicyMiddleware::new(policy("pay")).dedupes_by_key(dedupes);
        let response = client(middleware)
            .post(server.url("/api/"))
            .header("Idempotency-Key", key.as_str())
            .body("pay 100")
            .send()
            .await
            .unwrap();
        assert_eq!((response.status().as_u16(), server.count()), (503, sent), "dedupes {dedupes}");
        assert!(server.requests().iter().all(|s| s.key() == Some(key.as_str())));
    }
    let server = down().await;
    let bad = client(PolicyMiddleware::new(policy("pay")))
        .post(server.url("/api/"))
        .header("Idempotency-Key", "two words")
        .send()
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("not a valid idempotency key"), "{bad}");
    assert_eq!(server.count(), 0, "a bad key sends nothing");
}

#[tokio::test]
async fn a_body_that_cannot_be_cloned_gets_one_attempt_and_the_failure_says_so() {
    let server = Upstream::start(|_, _| Reply::Reset).await;
    let key = IdempotencyKey::v5("upload-1", "put");
    let stream = futures_stream(b"chunk".to_vec());
    let failed = client(PolicyMiddleware::new(policy("files")).dedupes_by_key(true))
        .put(server.url("/api/"))
        .header("Idempotency-Key", key.as_str())
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap_err();
    assert_eq!(server.count(), 1);
    assert!(failed.to_string().contains("sent once: its body is a stream"), "{failed}");
}

fn futures_stream(
    bytes: Vec<u8>,
) -> impl futures_util::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send + Sync + 'static {
    futures_util::stream::iter([Ok(bytes)])
}

#[tokio::test]
async fn middlewares_before_it_see_the_call_and_after_it_every_attempt() {
    let server = down().await;
    let (before, after) = (Counting::default(), Counting::default());
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(before.clone())
        .with(PolicyMiddleware::new(policy("crm")))
        .with(Tagging)
        .with(after.clone())
        .build();
    let response = client.get(server.url("/api/")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!((before.0.load(Ordering::SeqCst), after.0.load(Ordering::SeqCst)), (1, 3));
    let seen = server.requests();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|s| s.header("x-trace") == Some("on")), "{seen:?}");
}

#[tokio::test]
async fn an_open_breaker_fails_fast_without_sending() {
    let server = down().await;
    let policy = Policy::builder("crm")
        .retry(Retry::never())
        .breaker(Breaker::consecutive(1).half_open_after(std::time::Duration::from_secs(600)))
        .build()
        .unwrap();
    let client = client(PolicyMiddleware::new(policy));
    assert_eq!(client.get(server.url("/api/")).send().await.unwrap().status().as_u16(), 503);
    let refused = client.get(server.url("/api/")).send().await.unwrap_err();
    assert_eq!(server.count(), 1, "the open breaker sent nothing");
    let reqwest_middleware::Error::Middleware(error) = refused else { panic!("{refused:?}") };
    let failed = error.downcast_ref::<CallFailed>().expect("a CallFailed");
    assert!(matches!(failed.failure, Failure::Rejected { .. }), "{failed}");
    let _: Option<&AttemptError> = failed.failure.error();
}
