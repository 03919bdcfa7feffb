//! A local upstream for the examples: the first request to each path gets
//! 503, the next ones 200, and it prints what it received.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Starts it on a free port; returns its base URL.
pub async fn start() -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    let seen = Arc::new(Mutex::new(HashSet::new()));
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                let Ok(read) = socket.read(&mut buf).await else { return };
                let head = String::from_utf8_lossy(&buf[..read]);
                let line = head.lines().next().unwrap_or_default().to_owned();
                let key = head.lines().find_map(|l| {
                    l.to_ascii_lowercase().strip_prefix("idempotency-key:").map(|k| k.trim().to_owned())
                });
                let first = seen.lock().map(|mut s| s.insert(line.clone())).unwrap_or(false);
                let status = if first { "503 Service Unavailable" } else { "200 OK" };
                println!("    upstream got {line} key={key:?} -> {status}");
                let reply = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                let _ = socket.write_all(reply.as_bytes()).await;
            });
        }
    });
    Ok(url)
}
