//! A policy around a bare `reqwest::Client`: `reqwest::Error`, turned into
//! [`Reqwest`] by `?`, is classified as `ballast-http` classifies its
//! systems' outcomes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ballast::{Backoff, Class, Classify, Policy, Retry, StopReason};
use ballast_http::Reqwest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Answers `statuses` in turn (then the last one forever); counts requests.
async fn upstream(statuses: &'static [u16]) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let n = seen.fetch_add(1, Ordering::SeqCst);
            let status = statuses[n.min(statuses.len() - 1)];
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let reply =
                    format!("HTTP/1.1 {status} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
                let _ = socket.write_all(reply.as_bytes()).await;
            });
        }
    });
    (url, count)
}

fn policy() -> Policy {
    let backoff = Backoff::exponential(Duration::from_millis(100)).max_delay(Duration::from_millis(200));
    Policy::builder("crm").retry(Retry::attempts(3).backoff(backoff).without_budget()).build().unwrap()
}

#[tokio::test]
async fn five_hundreds_are_retried_and_four_hundreds_are_not() {
    let client = reqwest::Client::new();
    let (url, count) = upstream(&[503, 502, 200]).await;
    let text = policy()
        .read(|_| async {
            Ok::<_, Reqwest>(client.get(&url).send().await?.error_for_status()?.text().await?)
        })
        .await
        .unwrap();
    assert_eq!((text.as_str(), count.load(Ordering::SeqCst)), ("ok", 3));

    let (url, count) = upstream(&[404]).await;
    let failure = policy()
        .read(|_| async { Ok::<_, Reqwest>(client.get(&url).send().await?.error_for_status()?) })
        .await
        .unwrap_err();
    assert_eq!((failure.stop_reason(), count.load(Ordering::SeqCst)), (StopReason::Permanent, 1));
}

#[tokio::test]
async fn a_refused_connection_is_transient() {
    let refusing = ballast_test_support::Refusing::new();
    let closed = refusing.addr;
    let client = reqwest::Client::new();
    let failure = policy()
        .read(|_| async { Ok::<_, Reqwest>(client.get(format!("http://{closed}/")).send().await?) })
        .await
        .unwrap_err();
    assert_eq!((failure.stop_reason(), failure.attempts()), (StopReason::Exhausted, 3));
    assert_eq!(failure.error().map(|e| e.classify().class), Some(Class::Transient));
}
