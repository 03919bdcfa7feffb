//! A partner API that allows 50 requests a second and answers `429 Too
//! Many Requests` with `Retry-After: 1` beyond that (a fixed window per
//! second, as most API gateways count), called through an [`HttpSystem`] at
//! 200 calls a second for 30 s: without a rate limit, with a fixed one, and
//! with an adaptive one. On tokio's paused clock, with the upstream in the
//! process as the system's transport, so the run is exact and takes a
//! fraction of a second.
//!
//! Shared by the `throttling` bin (BENCHMARKS.md, "Rate limits") and a
//! test that holds the adaptive limiter to its targets.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ballast::{RateLimit, Retry};
use ballast_http::transport::{OutBody, TransportError};
use ballast_http::HttpSystem;
use bytes::Bytes;
use tokio::time::Instant;

/// What the scenario runs.
#[derive(Debug, Clone, Copy)]
pub struct ThrottlingRun {
    /// Requests a second the upstream accepts.
    pub allowed: u32,
    /// Calls a second the caller makes.
    pub offered: u32,
    /// How long it runs.
    pub seconds: u64,
    /// The first seconds, left out of the figures (the limiter learning).
    pub warm_up: u64,
}

impl Default for ThrottlingRun {
    fn default() -> Self {
        Self { allowed: 50, offered: 200, seconds: 30, warm_up: 5 }
    }
}

/// What a run counts, after the warm-up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// Requests that reached the upstream.
    pub sent: u64,
    /// Of them, answered 429.
    pub throttled: u64,
    /// Calls the limiter refused unsent.
    pub refused: u64,
    /// Requests the upstream accepted, per second.
    pub accepted_per_second: f64,
}

impl Figures {
    /// The share of requests sent that were answered 429.
    pub fn throttled_share(&self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        self.throttled as f64 / self.sent as f64
    }

    /// The share of the allowed rate used.
    pub fn used_share(&self, allowed: u32) -> f64 {
        self.accepted_per_second / f64::from(allowed)
    }
}

/// The upstream's count: requests per one-second window.
struct Window {
    start: Instant,
    index: u64,
    count: u32,
    /// (sent at, throttled) of every request.
    log: Vec<(Duration, bool)>,
}

/// Runs `scenario` with `limit` (none: every call goes out) on a paused clock.
pub fn run(scenario: ThrottlingRun, limit: Option<RateLimit>) -> Figures {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(drive(scenario, limit))
}

async fn drive(scenario: ThrottlingRun, limit: Option<RateLimit>) -> Figures {
    let window = Arc::new(Mutex::new(Window { start: Instant::now(), index: 0, count: 0, log: Vec::new() }));
    let upstream = {
        let window = Arc::clone(&window);
        let allowed = scenario.allowed;
        tower::service_fn(move |_: http::Request<OutBody>| {
            let mut w = window.lock().expect("the window");
            let at = w.start.elapsed();
            if at.as_secs() != w.index {
                (w.index, w.count) = (at.as_secs(), 0);
            }
            w.count += 1;
            let throttled = w.count > allowed;
            w.log.push((at, throttled));
            let mut response = http::Response::new(Bytes::from_static(b"{}"));
            if throttled {
                *response.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
                response.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("1"));
            }
            std::future::ready(Ok::<_, TransportError>(response))
        })
    };
    let system = HttpSystem::builder("partner", "http://partner.test/")
        .transport(upstream)
        .policy(|p| {
            let p = p.retry(Retry::attempts(1));
            match limit {
                Some(limit) => p.rate_limit(limit),
                None => p,
            }
        })
        .build()
        .expect("the partner's system");
    let refused = Arc::new(Mutex::new(0u64));
    let start = Instant::now();
    let gap = Duration::from_secs(1) / scenario.offered;
    let mut calls = Vec::new();
    let mut next = start;
    while next < start + Duration::from_secs(scenario.seconds) {
        tokio::time::sleep_until(next).await;
        let (system, refused) = (system.clone(), Arc::clone(&refused));
        let warm = next.duration_since(start) < Duration::from_secs(scenario.warm_up);
        calls.push(tokio::spawn(async move {
            let answer = system.read(ballast_http::Request::get("orders")).await;
            if answer.is_err_and(|failure| failure.is_unavailable()) && !warm {
                *refused.lock().expect("the count") += 1;
            }
        }));
        next += gap;
    }
    for call in calls {
        let _ = call.await;
    }
    let w = window.lock().expect("the window");
    let warm_up = Duration::from_secs(scenario.warm_up);
    let counted: Vec<_> = w.log.iter().filter(|(at, _)| *at >= warm_up).collect();
    let throttled = counted.iter().filter(|(_, t)| *t).count() as u64;
    let sent = counted.len() as u64;
    let seconds = (scenario.seconds - scenario.warm_up) as f64;
    let refused = *refused.lock().expect("the count");
    Figures { sent, throttled, refused, accepted_per_second: (sent - throttled) as f64 / seconds }
}
