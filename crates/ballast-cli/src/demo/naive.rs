//! The client the guide forbids: plain reqwest in an ad-hoc loop that
//! retries every error — 4xx and timeouts included — a fixed number of times
//! with a constant delay, and sends no idempotency key (R-RES-RE-X1,
//! R-RES-RE-X2, R-RES-RE-X3, R-RES-RE-X4 all broken at once).

use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use super::workload::{Client, Workload};

/// Retries after the first attempt.
const RETRIES: u32 = 3;

/// The naive client of one run.
pub struct Naive {
    client: reqwest::Client,
    base: String,
    workload: Workload,
    delay: Duration,
}

impl Naive {
    /// A client of the gateway at `base` whose requests time out after
    /// `timeout` (the same attempt timeout ballast uses, to be fair) and that
    /// waits `delay` between attempts.
    pub fn new(
        base: String,
        workload: Workload,
        timeout: Duration,
        delay: Duration,
    ) -> reqwest::Result<Self> {
        let client = reqwest::Client::builder().timeout(timeout).build()?;
        Ok(Self { client, base, workload, delay })
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) {
        let url = format!("{}{path}", self.base);
        for attempt in 0..=RETRIES {
            if attempt > 0 {
                tokio::time::sleep(self.delay).await;
            }
            let mut request = self.client.request(method.clone(), &url);
            if let Some(body) = &body {
                request = request.json(body);
            }
            let ok = match request.send().await {
                Ok(response) => response.status().is_success() && response.bytes().await.is_ok(),
                Err(_) => false,
            };
            if ok {
                return;
            }
        }
    }
}

impl Client for Naive {
    /// One order: the payment, the read, the profile update, each retried
    /// blindly; failures are shrugged off, as such code usually does.
    async fn order(&self, order: u32) {
        let w = &self.workload;
        self.call(Method::POST, "payments", Some(w.payment(order))).await;
        self.call(Method::GET, &Workload::order_path(order), None).await;
        self.call(Method::PATCH, &Workload::customer_path(order), Some(w.profile(order))).await;
    }
}
