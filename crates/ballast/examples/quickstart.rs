//! A flaky read is retried; an unkeyed write runs once; a keyed write is
//! retried with the same key. Every attempt is printed on a timeline.
//!
//! Run: `cargo run -p ballast --example quickstart`

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast::{Backoff, Breaker, Bulkhead, Event, IdempotencyKey, Policy, Retry, Timeout};

fn flaky(calls: &AtomicU32, failures: u32) -> io::Result<()> {
    if calls.fetch_add(1, Ordering::SeqCst) < failures {
        Err(io::Error::from(io::ErrorKind::ConnectionReset))
    } else {
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let start = Arc::new(Instant::now());
    let clock = start.clone();
    let policy = Policy::builder("payment-gateway")
        .retry(
            Retry::attempts(3)
                .backoff(Backoff::exponential(Duration::from_millis(200)).max_delay(Duration::from_secs(1))),
        )
        .breaker(Breaker::count(0.5, 50).half_open_after(Duration::from_secs(30)))
        // 8 calls at once and 16 waiting; without `.queue(16)` the 9th
        // concurrent call would be rejected at once (BulkheadFull).
        .bulkhead(Bulkhead::new(8).queue(16))
        .timeout(Timeout::aggressive(Duration::from_secs(1)))
        .listener(move |e: &Event<'_>| println!("  {:>6.3}s  {e}", clock.elapsed().as_secs_f64()))
        .seed(7)
        .build()?;
    println!("policy '{}': worst-case in-memory window {:.2?}", policy.name(), policy.worst_case());

    println!("\n1. a read that fails twice with a connection reset (transient), then answers:");
    let calls = AtomicU32::new(0);
    policy.read(|_| async { flaky(&calls, 2) }).await?;
    println!("   → read succeeded after {} attempts", calls.load(Ordering::SeqCst));

    println!("\n2. a keyed write: retried, the same Idempotency-Key on every attempt (R-RES-RE-1):");
    let key = IdempotencyKey::v5("order-42", "register-payment");
    let calls = AtomicU32::new(0);
    policy
        .write(&key, |ctx| {
            println!(
                "           attempt {} sends Idempotency-Key: {}",
                ctx.attempt(),
                ctx.key().map_or("-", |k| k.as_str())
            );
            async { flaky(&calls, 1) }
        })
        .await?;

    println!("\n3. an unkeyed write (profile update) meets the same reset: it runs once (R-RES-RE-X1):");
    let calls = AtomicU32::new(0);
    let failure = policy.write_once(|_| async { flaky(&calls, 1) }).await.unwrap_err();
    println!("   → {} attempt(s): {failure}", calls.load(Ordering::SeqCst));

    println!("\n4. more than 5 attempts is refused when the policy is built:");
    let refused = Policy::builder("sms").retry(Retry::attempts(10)).build().unwrap_err();
    println!("   → {refused}");
    println!("\ndone in {:.2?}", start.elapsed());
    Ok(())
}
