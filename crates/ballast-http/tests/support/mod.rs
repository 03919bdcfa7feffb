//! A real local HTTP/1.1 server for the tests: it can apply a write then
//! answer 500, reset the connection, answer late, answer 4xx or 429 with
//! Retry-After — recording what it saw of every request.

// Each test binary uses a different part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What the test server saw of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub key: Option<String>,
    pub body: String,
    /// Every header, names lower-cased.
    pub headers: HashMap<String, String>,
}

/// What the test server does with one request.
pub enum Action {
    Reply(u16, &'static str),
    ReplyWith(u16, Vec<(&'static str, String)>, &'static str),
    Reset,
    Late(Duration, Box<Action>),
    /// Headers at once, then one body byte per interval: never silent long
    /// enough for a read timeout, but slower than any attempt timeout.
    Drip(Duration),
}

pub type Handler = dyn Fn(&Seen, usize) -> Action + Send + Sync;

/// An HTTP/1.1 server on 127.0.0.1:0, one request per connection.
pub struct Server {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    /// `handler` gets each request and how many came before it, plus one.
    pub async fn start(handler: impl Fn(&Seen, usize) -> Action + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, log.clone(), handler.clone()));
            }
        });
        Server { addr, seen }
    }

    pub fn url(&self) -> String {
        format!("http://{}/api/", self.addr)
    }

    pub fn sent(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve(mut socket: TcpStream, log: Arc<Mutex<Vec<Seen>>>, handler: Arc<Handler>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.lines();
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let path = request_line.next().unwrap_or_default().to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    while buf.len() < head_end + length {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
    let seen = Seen { method, path, key: headers.get("idempotency-key").cloned(), body, headers };
    let n = {
        let mut log = log.lock().unwrap();
        log.push(seen.clone());
        log.len()
    };
    let mut action = handler(&seen, n);
    loop {
        match action {
            Action::Late(wait, then) => {
                tokio::time::sleep(wait).await;
                action = *then;
            }
            Action::Reset => {
                socket.set_zero_linger().unwrap();
                return drop(socket);
            }
            Action::Drip(every) => {
                let _ = socket.write_all(b"HTTP/1.1 200 X\r\ncontent-length: 50\r\n\r\n").await;
                for _ in 0..50 {
                    tokio::time::sleep(every).await;
                    if socket.write_all(b".").await.is_err() {
                        return;
                    }
                }
                return;
            }
            Action::Reply(status, body) => return reply(&mut socket, status, &[], body).await,
            Action::ReplyWith(status, headers, body) => {
                return reply(&mut socket, status, &headers, body).await
            }
        }
    }
}

async fn reply(socket: &mut TcpStream, status: u16, headers: &[(&str, String)], body: &str) {
    let mut out = format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(body);
    let _ = socket.write_all(out.as_bytes()).await;
    let _ = socket.shutdown().await;
}
