//! The same `reqwest_middleware` client, with `reqwest-retry`'s place taken
//! by ballast: a read is retried, a POST without a key is sent once, a POST
//! with a key is retried with the same key. The upstream answers 503 to the
//! first request to each path.
//!
//! Run: `cargo run -p ballast-http --features middleware --example from_reqwest_retry`

#[path = "support/flaky.rs"]
mod flaky;

use ballast::{IdempotencyKey, Policy, Retry};
use ballast_http::PolicyMiddleware;
use reqwest_middleware::ClientBuilder;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = flaky::start().await?;

    // Before: ClientBuilder::new(reqwest::Client::new())
    //     .with(RetryTransientMiddleware::new_with_policy(ExponentialBackoff::builder().build_with_max_retries(3)))
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(
            PolicyMiddleware::new(Policy::builder("crm").retry(Retry::attempts(3)).build()?)
                .dedupes_by_key(true),
        )
        .build();

    println!("GET (a read: retried):");
    let order = client.get(format!("{base}orders/7")).send().await?;
    println!("  -> {}", order.status());

    println!("POST without a key (sent once, whatever the answer):");
    let note = client.post(format!("{base}notes")).body("hi").send().await?;
    println!("  -> {}", note.status());

    println!("POST with an Idempotency-Key (retried, the same key every time):");
    let key = IdempotencyKey::v5("order-7", "pay");
    let paid = client
        .post(format!("{base}payments"))
        .header("Idempotency-Key", key.as_str())
        .body("100")
        .send()
        .await?;
    println!("  -> {}", paid.status());
    Ok(())
}
