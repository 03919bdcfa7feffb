//! What the upstream's replies are on the wire, seen by a raw client: a lost
//! answer is a close after the request was read, a reset is a TCP RST, a
//! dripped answer sends its head at once and its body a byte at a time.

use std::time::{Duration, Instant};

use ballast_test_support::{Reply, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const REQUEST: &[u8] =
    b"POST /pay HTTP/1.1\r\nHost: up\r\nIdempotency-Key: k-1\r\nContent-Length: 2\r\n\r\n{}";

/// Sends one request and reads until the connection ends: what arrived, and how it ended.
async fn exchange(upstream: &Upstream) -> (Vec<u8>, std::io::Result<()>) {
    let mut socket = TcpStream::connect(upstream.addr).await.unwrap();
    socket.write_all(REQUEST).await.unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        match socket.read(&mut chunk).await {
            Ok(0) => return (got, Ok(())),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) => return (got, Err(e)),
        }
    }
}

#[tokio::test]
async fn a_lost_answer_is_a_close_after_the_request_was_read() {
    let upstream = Upstream::start(|_, _| Reply::Lost).await;
    let (got, end) = exchange(&upstream).await;
    assert!(got.is_empty() && end.is_ok(), "{got:?} {end:?}");
    let seen = upstream.requests();
    assert_eq!((seen.len(), seen[0].key(), seen[0].text().as_str()), (1, Some("k-1"), "{}"));
}

#[tokio::test]
async fn a_reset_is_a_tcp_rst() {
    let upstream = Upstream::start(|_, _| Reply::Reset).await;
    let (got, end) = exchange(&upstream).await;
    assert!(got.is_empty(), "{got:?}");
    assert_eq!(end.unwrap_err().kind(), std::io::ErrorKind::ConnectionReset);
    assert_eq!(upstream.count(), 1);
}

#[tokio::test]
async fn a_dripped_answer_sends_its_head_at_once_and_its_body_a_byte_at_a_time() {
    let every = Duration::from_millis(100);
    let upstream =
        Upstream::start(move |_, _| Reply::body(200, "abc").header("connection", "close").dripped(every))
            .await;
    let mut socket = TcpStream::connect(upstream.addr).await.unwrap();
    let started = Instant::now();
    socket.write_all(REQUEST).await.unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 1024];
    let head_end = loop {
        let n = socket.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the head: {got:?}");
        got.extend_from_slice(&chunk[..n]);
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    assert!(got.len() - head_end < 3, "the head came before the whole body");
    while let Ok(n @ 1..) = socket.read(&mut chunk).await {
        got.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&got[..head_end]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200") && head.contains("content-length: 3\r\n"), "{head:?}");
    assert_eq!(&got[head_end..], b"abc");
    assert!(started.elapsed() >= every * 3, "a byte every {every:?}: {:?}", started.elapsed());
}
