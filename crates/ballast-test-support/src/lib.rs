//! # ballast-test-support — what ballast's tests share
//!
//! A local HTTP/1.1 upstream on hyper whose every answer a test scripts —
//! an answer, a lost answer (the request read and applied, the connection
//! closed without a reply), a reset, a late answer, an answer that drips in
//! a byte at a time — and that keeps a ledger of every request it read, so a
//! test can count what reached the external system and what took effect
//! (tower-test and linkerd's `app/test` play this part for their projects);
//! an OTLP/HTTP trace receiver ([`otlp`]); a loopback port that refuses
//! every connection ([`Refusing`]); a relay to a service a test can cut
//! ([`Relay`]); and [`send`], a request with its headers.
//!
//! For real providers' shapes: a CA made for the test ([`pki::Ca`]), an
//! HTTPS upstream that can require a client certificate and speak HTTP/2
//! ([`Upstream::start_tls`], [`ServerTls`]), an egress proxy
//! ([`ConnectProxy`]) and an OAuth 2.0 token endpoint whose tokens expire
//! in seconds ([`TokenServer`]).
//!
//! ```
//! use ballast_test_support::{Reply, Upstream};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! // 503 for the first request, then 201.
//! let upstream = Upstream::start(|_, n| if n == 1 { Reply::status(503) } else { Reply::status(201) }).await;
//! let url = upstream.url("/pay");
//! # let _ = url;
//! # }
//! ```

mod drip;
mod filler;
pub mod otlp;
pub mod pki;
mod proxy;
mod refusing;
mod relay;
mod reply;
mod seen;
mod tls;
mod token;
mod upstream;

pub use proxy::ConnectProxy;
pub use refusing::Refusing;
pub use relay::Relay;
pub use reply::Reply;
pub use seen::Seen;
pub use tls::ServerTls;
pub use token::{TokenServer, Tokens};
pub use upstream::Upstream;

/// Sends `request` with `headers` added in order (a name may come twice):
/// the answer, whatever its status.
///
/// # Panics
///
/// When no answer comes (the connection fails).
pub async fn send(mut request: reqwest::RequestBuilder, headers: &[(&str, &str)]) -> reqwest::Response {
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("an answer")
}

/// Polls `check` until it holds, for up to 20 s, with real time: for
/// processes and sockets, whose pace no paused clock sets.
///
/// # Panics
///
/// When 20 s pass first, naming `what`.
pub async fn eventually<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !check().await {
        assert!(std::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}
