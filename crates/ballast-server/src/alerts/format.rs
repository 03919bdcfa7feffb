//! The bodies alert webhooks expect: ballast's own JSON document, a Slack
//! incoming webhook's message, and Alertmanager's `POST /api/v2/alerts`.

use std::time::SystemTime;

use ballast::Rule;
use ballast_config::AlertFormat;
use ballast_queue::FailedTask;
use serde_json::{json, Value};

/// The `alertname` label of the alerts sent to Alertmanager.
pub const ALERTNAME: &str = "BallastTaskFailed";

/// The `alertname` of a client certificate about to expire.
pub const CERT_ALERTNAME: &str = "BallastClientCertExpiring";

/// A client certificate a system presents that ends soon.
#[derive(Debug, Clone)]
pub struct CertExpiring {
    /// The system.
    pub system: String,
    /// The certificate's subject and serial.
    pub subject: String,
    /// Its serial number, in hex.
    pub serial: String,
    /// When it expires.
    pub not_after: SystemTime,
    /// When this was noticed.
    pub at: SystemTime,
}

impl CertExpiring {
    /// One line for a person: which certificate, when, what to do.
    pub fn summary(&self) -> String {
        let left = self.not_after.duration_since(self.at).map_or(0, |d| d.as_secs() / 86_400);
        format!(
            "ballast: the client certificate of {} ({}, serial {}) expires on {} (in {left} day(s)); after that {} \
             refuses every call. Renew it and replace its file: ballast serve takes the new one without a restart.",
            self.system,
            self.subject,
            self.serial,
            rfc3339(self.not_after),
            self.system,
        )
    }
}

/// The body to post for `expiring` in `format`.
pub fn cert_body(format: AlertFormat, expiring: &CertExpiring) -> Value {
    match format {
        AlertFormat::Json => json!({
            "alert": "tls_client_cert_expiring",
            "summary": expiring.summary(),
            "system": expiring.system,
            "subject": expiring.subject,
            "serial": expiring.serial,
            "not_after": rfc3339(expiring.not_after),
        }),
        AlertFormat::Slack => json!({ "text": slack_escape(&expiring.summary()) }),
        AlertFormat::Alertmanager => json!([{
            "labels": {
                "alertname": CERT_ALERTNAME,
                "severity": "warning",
                "system": expiring.system,
                "serial": expiring.serial,
            },
            "annotations": { "summary": expiring.summary(), "subject": expiring.subject },
            "startsAt": rfc3339(expiring.at),
            "endsAt": rfc3339(expiring.not_after + std::time::Duration::from_secs(7 * 86_400)),
        }]),
    }
}

/// The body to post for `task` in `format`.
///
/// ```
/// use ballast_config::AlertFormat;
/// # fn body(task: &ballast_queue::FailedTask) {
/// let slack = ballast_server::alerts::body(AlertFormat::Slack, task);
/// assert!(slack["text"].as_str().unwrap().contains("R-RES-RE-5"));
/// # }
/// ```
pub fn body(format: AlertFormat, task: &FailedTask) -> Value {
    match format {
        AlertFormat::Json => own(task),
        AlertFormat::Slack => json!({ "text": slack_escape(&summary(task)) }),
        AlertFormat::Alertmanager => alertmanager(task),
    }
}

/// One line for a person: which task, why, what to do.
pub fn summary(task: &FailedTask) -> String {
    let why = match task.reason {
        ballast_queue::FailReason::Exhausted => "every attempt failed",
        ballast_queue::FailReason::Permanent => "a permanent error (never retried)",
        ballast_queue::FailReason::Panicked => "its handler panicked",
        ballast_queue::FailReason::BadPayload => "its payload does not fit its handler",
        ballast_queue::FailReason::LeaseExpired => "the worker of its last attempt died or hung",
    };
    let held = match &task.sequence {
        Some(sequence) => format!(
            " It holds sequence {sequence}: the writes behind it wait until it is retried, or released \
             from the sequence with `ballast queue release {}` or the dashboard's \"Release its sequence\" \
             (they then go on without it).",
            task.id
        ),
        None => String::new(),
    };
    format!(
        "ballast: task {} ({}) failed for good after attempt {} of {}: {why}: {} ({}). \
         Fix the cause, then retry it from the dashboard or with `ballast queue retry {}`.{held}",
        task.id,
        task.kind,
        task.attempt,
        task.max_attempts,
        task.error,
        Rule::Re5.id(),
        task.id,
    )
}

fn own(task: &FailedTask) -> Value {
    json!({
        "alert": "task_failed",
        "rule": Rule::Re5.id(),
        "summary": summary(task),
        "task": {
            "id": task.id,
            "kind": task.kind,
            "key": task.key,
            "attempt": task.attempt,
            "max_attempts": task.max_attempts,
            "sequence": task.sequence,
        },
        "reason": task.reason.as_str(),
        "error": task.error,
        "failed_at": rfc3339(task.failed_at),
    })
}

/// Alertmanager identifies an alert by its labels: one task's failure is one
/// alert, and posting it again only refreshes it.
fn alertmanager(task: &FailedTask) -> Value {
    json!([{
        "labels": {
            "alertname": ALERTNAME,
            "severity": "critical",
            "rule": Rule::Re5.id(),
            "kind": task.kind,
            "task_id": task.id.to_string(),
            "reason": task.reason.as_str(),
        },
        "annotations": {
            "sequence": task.sequence.clone().unwrap_or_default(),
            "summary": summary(task),
            "error": task.error,
            "key": task.key.clone().unwrap_or_default(),
        },
        "startsAt": rfc3339(task.failed_at),
    }])
}

fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// Slack reads `&`, `<` and `>` as markup; an error message must not become
/// a mention or a link.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ballast_queue::FailReason;

    use super::*;

    fn failed() -> FailedTask {
        FailedTask {
            id: 42,
            kind: "ballast.http.delivery".into(),
            key: Some("3f1c".into()),
            attempt: 10,
            max_attempts: 10,
            reason: FailReason::Exhausted,
            error: "delivery to pay failed: 503 <@channel> & co".into(),
            failed_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_000_000),
            failure_id: uuid::Uuid::nil(),
            sequence: None,
        }
    }

    #[test]
    fn own_document_names_the_task_the_reason_and_the_rule() {
        let body = body(AlertFormat::Json, &failed());
        assert_eq!(body["rule"], "R-RES-RE-5");
        assert_eq!(body["task"]["id"], 42);
        assert_eq!(body["task"]["key"], "3f1c");
        assert_eq!(body["reason"], "exhausted");
        assert_eq!(body["failed_at"], "2026-11-30T00:53:20Z");
        assert!(body["summary"].as_str().unwrap().contains("ballast queue retry 42"));
    }

    #[test]
    fn slack_text_cannot_mention_or_link() {
        let text = body(AlertFormat::Slack, &failed())["text"].as_str().unwrap().to_owned();
        assert!(text.contains("&lt;@channel&gt; &amp; co"), "{text}");
        assert!(!text.contains('<') && !text.contains('>'), "{text}");
    }

    #[test]
    fn alertmanager_gets_a_list_of_one_alert_with_string_labels() {
        let body = body(AlertFormat::Alertmanager, &failed());
        let alerts = body.as_array().unwrap();
        assert_eq!(alerts.len(), 1);
        let labels = alerts[0]["labels"].as_object().unwrap();
        assert_eq!(labels["alertname"], ALERTNAME);
        assert_eq!(labels["task_id"], "42");
        assert!(labels.values().all(serde_json::Value::is_string), "Alertmanager labels are strings");
        assert_eq!(alerts[0]["startsAt"], "2026-11-30T00:53:20Z");
    }
}
