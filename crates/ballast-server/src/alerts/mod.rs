//! Alerts that reach a person (R-RES-RE-5: "the task is marked failed and a
//! human is alerted").
//!
//! Each `[[alerts.webhook]]` is an external system of its own, with a ballast
//! policy of its own. When a task fails for good, the worker stores one
//! alert task per webhook ([`ALERT_KIND`]) in the same transaction that marks
//! the task failed, keyed by the failure ([`FailedTask::failure_key`]): no
//! crash between the two can lose the alert, and the alert path obeys the
//! rules it reports on. Each alert task is a [`Delivery`] of a `POST` to the
//! webhook, run by a [`DeliveryHandler`], with the key in `Idempotency-Key`:
//!
//! - a webhook that deduplicates by that key (`dedupes_by_key = true`; the
//!   default for `alertmanager`, which identifies an alert by its labels)
//!   gets each alert exactly once, through crashes and retries;
//! - any other gets it at most once: a post is repeated only when it was
//!   certainly not sent (a refused connection), never after a timeout
//!   (R-RES-RE-X1).
//!
//! An alert that cannot be delivered fails like any task and is logged; it
//! raises no alert of its own.
//!
//! ```no_run
//! # fn f(config: &ballast_config::Config, queue: ballast_queue::Queue) -> Result<(), Box<dyn std::error::Error>> {
//! use ballast_server::alerts::{Webhooks, ALERT_KIND};
//!
//! let webhooks = Webhooks::from_settings(&config.alerts()?)?;
//! let worker = ballast_queue::Worker::builder(queue)
//!     .handler(ALERT_KIND, webhooks.handler())
//!     .alert(webhooks)
//!     .build()?;
//! # let _ = worker; Ok(()) }
//! ```

mod format;

use ballast::{Policy, Timeout};
use ballast_config::{AlertFormat, WebhookSettings};
use ballast_http::{Delivery, DeliveryHandler, HttpSystem, Request, SystemBuildError, Systems};
use ballast_queue::{Alert, FailedTask, LogAlert, NewTask};

pub use format::{body, cert_body, summary, CertExpiring, ALERTNAME, CERT_ALERTNAME};

/// The task kind of an alert's delivery to one webhook.
pub const ALERT_KIND: &str = "ballast.alert";

/// Why the alert webhooks could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AlertsError {
    /// The variable that should hold a webhook's URL is not set.
    #[error(
        "[[alerts.webhook]] #{index}: the environment variable {var} is not set; \
         set it to the webhook's URL (alerts would otherwise reach no one, R-RES-RE-5)"
    )]
    UrlUnset {
        /// The webhook's position in the file, from 1.
        index: usize,
        /// The variable's name.
        var: String,
    },
    /// The URL is not one a webhook can be posted to.
    #[error("[[alerts.webhook]] #{index}: the URL in {var} cannot be used: {reason}")]
    Url {
        /// The webhook's position in the file, from 1.
        index: usize,
        /// The variable's name.
        var: String,
        /// Why, without the URL (it is a secret).
        reason: String,
    },
}

/// Why a webhook URL was refused, without quoting the URL.
fn url_refused(error: &SystemBuildError) -> String {
    match error {
        SystemBuildError::InvalidBaseUrl { reason, .. } => {
            format!("{reason}; use an absolute http:// or https:// URL without query or fragment")
        }
        other => other.to_string(),
    }
}

/// The alert webhooks: an [`Alert`] that stores one delivery per webhook for
/// every failed task, and the [`DeliveryHandler`] that sends them.
#[derive(Debug, Clone, Default)]
pub struct Webhooks {
    sinks: Vec<(String, AlertFormat)>,
    systems: Systems,
}

impl Webhooks {
    /// The webhooks of `[alerts]`, each URL read from its variable now.
    pub fn from_settings(settings: &[WebhookSettings]) -> Result<Webhooks, AlertsError> {
        let mut sinks = Vec::with_capacity(settings.len());
        for (at, hook) in settings.iter().enumerate() {
            let index = at + 1;
            let var = hook.url_env.clone();
            let url = std::env::var(&var)
                .ok()
                .filter(|url| !url.trim().is_empty())
                .ok_or_else(|| AlertsError::UrlUnset { index, var: var.clone() })?;
            let name = format!("alerts.webhook.{index}");
            let policy = Policy::builder(name.clone()).timeout(Timeout::aggressive(hook.timeout));
            // A webhook's URL is a secret as a whole (Slack's path is the token).
            let system = HttpSystem::builder(name, &url)
                .policy(|_| policy)
                .dedupes_by_key(hook.dedupes_by_key)
                .secret_url(true)
                .build()
                .map_err(|source| AlertsError::Url { index, var, reason: url_refused(&source) })?;
            sinks.push((system, hook.format));
        }
        Ok(Webhooks::new(sinks))
    }

    /// Webhooks of your own: alerts are posted in each one's format to its
    /// system's base URL, under the system's policy.
    pub fn new(sinks: impl IntoIterator<Item = (HttpSystem, AlertFormat)>) -> Webhooks {
        let (systems, sinks): (Vec<_>, Vec<_>) = sinks
            .into_iter()
            .map(|(system, format)| (system.clone(), (system.name().to_owned(), format)))
            .unzip();
        Webhooks { sinks, systems: Systems::new(systems) }
    }

    /// Whether there is no webhook: alerts are only logged.
    pub fn is_empty(&self) -> bool {
        self.sinks.is_empty()
    }

    /// The alert tasks of `expiring`, one per webhook, keyed by `key`: a
    /// fleet's replicas (and a restart) enqueue the same keys, so each
    /// webhook hears of it once.
    pub fn cert_expiring(&self, expiring: &CertExpiring, key: &str) -> Vec<NewTask> {
        self.sinks
            .iter()
            .filter_map(|(sink, format)| {
                let request = Request::post("").json(&cert_body(*format, expiring));
                match Delivery::from_request(sink.as_str(), &request) {
                    Ok(delivery) => {
                        Some(NewTask::new(ALERT_KIND, &delivery).key(ballast::IdempotencyKey::v5(key, sink)))
                    }
                    Err(e) => {
                        tracing::error!(sink = %sink, error = %e, "cannot build the alert");
                        None
                    }
                }
            })
            .collect()
    }

    /// The handler of [`ALERT_KIND`] tasks.
    pub fn handler(&self) -> DeliveryHandler {
        DeliveryHandler::shared(self.systems.clone())
    }
}

impl Alert for Webhooks {
    fn task_failed(&self, task: &FailedTask) {
        LogAlert.task_failed(task);
    }

    fn enqueue(&self, task: &FailedTask) -> Vec<NewTask> {
        if task.kind == ALERT_KIND {
            return Vec::new();
        }
        self.sinks
            .iter()
            .filter_map(|(sink, format)| {
                let request = Request::post("").json(&body(*format, task));
                match Delivery::from_request(sink.as_str(), &request) {
                    Ok(delivery) => Some(NewTask::new(ALERT_KIND, &delivery).key(task.failure_key(sink))),
                    Err(e) => {
                        tracing::error!(task_id = task.id, sink = %sink, error = %e, "cannot build the alert");
                        None
                    }
                }
            })
            .collect()
    }
}
