//! `[alerts]`: where a task that failed for good is reported (R-RES-RE-5)
//! — `[[alerts.webhook]]` sinks, their rules, and the settings `ballast
//! serve` posts with.

use std::time::Duration;

use ballast::{Rule, Severity};
use serde::Deserialize;

use crate::duration::ConfigDuration;
use crate::finding::KeyFinding;
use crate::schema::Schema::{self, Value};
use crate::suggest::did_you_mean;

/// `[alerts]`: the sinks every task that fails for good is reported to
/// (R-RES-RE-5: "a human is alerted"), besides the log.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct AlertsSection {
    /// `[[alerts.webhook]]`: HTTP endpoints that receive each alert.
    pub webhook: Option<Vec<WebhookSection>>,
}

/// `[[alerts.webhook]]`: one HTTP endpoint alerts are posted to.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct WebhookSection {
    /// `url_env`: the environment variable holding the endpoint's URL
    /// (webhook URLs carry secrets; the file names only the variable).
    pub url_env: Option<String>,
    /// `format`: `"json"` (ballast's own document), `"slack"` (an incoming
    /// webhook's `text`) or `"alertmanager"` (the body of Alertmanager's
    /// `POST /api/v2/alerts`).
    pub format: Option<String>,
    /// `dedupes_by_key`: whether the endpoint deduplicates posts by their
    /// `Idempotency-Key`, so a post may be retried (R-RES-RE-1). Default:
    /// true for `alertmanager` (an alert is identified by its labels), false
    /// otherwise.
    pub dedupes_by_key: Option<bool>,
    /// `timeout`: how long one post may take (default 5 s).
    pub timeout: Option<ConfigDuration>,
}

pub(crate) const WEBHOOK_KEYS: &[(&str, Schema)] =
    &[("url_env", Value), ("format", Value), ("dedupes_by_key", Value), ("timeout", Value)];

/// The alert formats that exist.
pub const ALERT_FORMATS: [&str; 3] = ["json", "slack", "alertmanager"];

/// The `[alerts]` section's sinks.
pub(crate) fn rules(a: &AlertsSection) -> Vec<KeyFinding> {
    let mut out = Vec::new();
    for (i, hook) in a.webhook.iter().flatten().enumerate() {
        let at = |key: &str| vec!["alerts".to_owned(), "webhook".to_owned(), i.to_string(), key.to_owned()];
        match hook.url_env.as_deref() {
            None => out.push(KeyFinding::error(
                None,
                at("url_env"),
                "`url_env` is missing from this [[alerts.webhook]]".into(),
                "name the environment variable holding the webhook's URL, e.g. `url_env = \"BALLAST_ALERT_URL\"`",
            )),
            Some(name) if !is_env_name(name) => out.push(KeyFinding::error(
                None,
                at("url_env"),
                format!("url_env \"{name}\" is not an environment variable name"),
                "name the variable that holds the URL (never the URL itself: it carries a secret)",
            )),
            Some(_) => {}
        }
        match hook.format.as_deref() {
            None => out.push(KeyFinding::error(
                None,
                at("format"),
                "`format` is missing from this [[alerts.webhook]]".into(),
                "add `format = \"json\"`, `\"slack\"` or `\"alertmanager\"`",
            )),
            Some(format) if !ALERT_FORMATS.contains(&format) => {
                let help = match did_you_mean(format, ALERT_FORMATS) {
                    Some(s) => format!("did you mean \"{s}\"?"),
                    None => "use \"json\", \"slack\" or \"alertmanager\"".to_owned(),
                };
                out.push(KeyFinding::error(
                    None,
                    at("format"),
                    format!("alert format \"{format}\" does not exist"),
                    help,
                ));
            }
            Some("slack") if hook.dedupes_by_key == Some(true) => out.push(KeyFinding::at(
                Some(Rule::Re1),
                Severity::Warning,
                at("dedupes_by_key"),
                "Slack's incoming webhooks do not deduplicate by key: a retried alert may be posted twice"
                    .into(),
                "leave `dedupes_by_key` out for Slack: each alert is then posted once",
            )),
            Some(_) => {}
        }
        if hook.timeout.is_some_and(|d| d.get().is_zero()) {
            out.push(KeyFinding::error(
                None,
                at("timeout"),
                "`timeout` is zero: no alert could be posted".into(),
                "use a few seconds, e.g. \"5s\"",
            ));
        }
    }
    out
}

/// Whether `name` can name an environment variable.
pub(crate) fn is_env_name(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What an alert webhook expects to receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertFormat {
    /// ballast's own JSON document: the failed task's fields and the rule.
    Json,
    /// A Slack incoming webhook's `{"text": …}`.
    Slack,
    /// The body of Alertmanager's `POST /api/v2/alerts`.
    Alertmanager,
}

/// One `[[alerts.webhook]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// The environment variable holding its URL.
    pub url_env: String,
    /// What it expects.
    pub format: AlertFormat,
    /// Whether it deduplicates by `Idempotency-Key`, so a post may be retried.
    pub dedupes_by_key: bool,
    /// How long one post may take.
    pub timeout: Duration,
}
