//! An `HttpSystem` on the reqwest client a service already has: its default
//! headers (auth, user agent) go out on every attempt, and ballast adds the
//! policy, the key header and the classification.
//!
//! Run: `cargo run -p ballast-http --example own_client`

#[path = "support/flaky.rs"]
mod flaky;

use ballast::{IdempotencyKey, Retry};
use ballast_http::{HttpSystem, Request};
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = flaky::start().await?;

    let mut headers = HeaderMap::new();
    headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer service-token"));
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .user_agent("billing/1.4")
        // What ballast cannot change on a client it did not build (R-RES-RE-X4):
        .retry(reqwest::retry::never())
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let crm = HttpSystem::builder("crm", &base)
        .client(client)
        .policy(|p| p.retry(Retry::attempts(3)))
        .dedupes_by_key(true)
        .build()?;

    let order = crm.read(Request::get("orders/7")).await?;
    println!("read: {} after {} attempt(s)", order.status(), order.attempts());
    let key = IdempotencyKey::v5("order-7", "pay");
    let paid = crm.write(&key, Request::post("payments").body("100")).await?;
    println!("keyed write: {} after {} attempt(s)", paid.status(), paid.attempts());
    Ok(())
}
