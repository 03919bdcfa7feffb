//! Answers streamed past a buffer: a large body comes through whole and in
//! parts, a small one is read within the attempt as before, and a body that
//! breaks after streaming began ends the stream instead of being retried.

use std::time::Duration;

use ballast::{Backoff, Retry, Timeout};
use ballast_http::{HttpSystem, Request};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const MIB: usize = 1 << 20;

/// A server that answers every request on a connection with `head` and
/// then `body`, then, unless `whole`, closes the connection early.
async fn server(
    head: String,
    body: Vec<u8>,
    whole: bool,
) -> (String, tokio::sync::mpsc::UnboundedReceiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let (seen, requests) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let (head, body, seen) = (head.clone(), body.clone(), seen.clone());
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                if socket.read(&mut request).await.unwrap_or(0) == 0 {
                    return;
                }
                let _ = seen.send(());
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body).await;
                if whole {
                    // Keep-alive: wait for the client to close.
                    let _ = socket.read(&mut request).await;
                }
            });
        }
    });
    (url, requests)
}

fn system(url: &str) -> HttpSystem {
    HttpSystem::builder("reports", url)
        .policy(|p| {
            p.retry(
                Retry::attempts(3)
                    .backoff(
                        Backoff::exponential(Duration::from_millis(100))
                            .max_delay(Duration::from_millis(200)),
                    )
                    .without_budget(),
            )
            .timeout(Timeout::aggressive(Duration::from_secs(5)))
            .seed(7)
        })
        .build()
        .unwrap()
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[tokio::test]
async fn a_large_answer_is_streamed_whole_and_a_small_one_is_read_within_the_attempt() {
    let body = pattern(3 * MIB);
    let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\ncontent-type: text/csv\r\n\r\n", body.len());
    let (url, _requests) = server(head, body.clone(), true).await;
    let reports = system(&url);

    let answer = reports.read(Request::get("big.csv").stream_answer_past(64 * 1024)).await.unwrap();
    assert!(answer.is_streamed(), "3 MiB past a 64 KiB buffer streams");
    assert!(answer.body().len() < MIB, "only the first part is read within the attempt");
    assert_eq!(answer.headers()["content-type"], "text/csv");
    let mut stream = answer.into_stream();
    assert_eq!(http_body::Body::size_hint(&stream).exact(), Some(body.len() as u64));
    let (mut got, mut parts) = (Vec::new(), 0);
    while let Some(frame) = stream.frame().await {
        got.extend_from_slice(&frame.unwrap().into_data().unwrap());
        parts += 1;
    }
    assert!(parts > 1, "the body came in parts");
    assert!(got == body, "the streamed body is the upstream's, byte for byte");

    // Asked for whole (no buffer given), the same answer is read within the attempt.
    let whole = reports.read(Request::get("big.csv")).await.unwrap();
    assert!(!whole.is_streamed());
    assert_eq!(whole.body().len(), body.len());

    // Within the buffer, a streaming request's answer is whole too.
    let small = reports.read(Request::get("big.csv").stream_answer_past(8 * MIB)).await.unwrap();
    assert!(!small.is_streamed());
    assert!(small.into_stream().collect().await.unwrap().to_bytes() == body);
}

#[tokio::test]
async fn a_body_that_breaks_after_streaming_began_ends_the_stream_and_is_not_retried() {
    let sent = pattern(MIB);
    // It promises 4 MiB and sends one, then closes.
    let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", 4 * MIB);
    let (url, mut requests) = server(head, sent, false).await;
    let reports = system(&url);

    let answer = reports.read(Request::get("big.csv").stream_answer_past(64 * 1024)).await.unwrap();
    assert_eq!(answer.attempts(), 1);
    let mut stream = answer.into_stream();
    let mut got = 0;
    let error = loop {
        match stream.frame().await {
            Some(Ok(frame)) => got += frame.into_data().map_or(0, |d| d.len()),
            Some(Err(e)) => break e,
            None => panic!("a body cut short must not end as if it were whole ({got} bytes)"),
        }
    };
    assert!(matches!(error, ballast_http::stream::StreamError::Broken(_)), "{error:?}");
    assert!(got <= MIB);
    assert_eq!(requests.recv().await, Some(()));
    assert!(requests.try_recv().is_err(), "once streaming began, the read is not sent again");

    // Read whole, the same break is an attempt failure, and a read is retried.
    let failure = reports.read(Request::get("big.csv")).await.unwrap_err();
    assert_eq!(failure.attempts(), 3, "{failure}");
}
