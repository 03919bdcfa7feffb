//! The rules of the Resilience Style Guide that a policy enforces, by id.
//!
//! Rule ids are part of the public surface: every refusal names the rule, so
//! a user can grep the guide, the code and the logs for it.

use std::fmt;

/// A rule of the Resilience Style Guide, section 5 ("Retry").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Rule {
    /// Retry only reads and writes keyed by an Idempotency-Key the system dedupes on.
    #[serde(rename = "R-RES-RE-1")]
    Re1,
    /// One composition, retry → breaker → bulkhead → timeout.
    #[serde(rename = "R-RES-RE-2")]
    Re2,
    /// `max_attempts` counts the first attempt; 5 is the upper limit in memory.
    #[serde(rename = "R-RES-RE-3")]
    Re3,
    /// In-memory retry for failures under ~5 s; over 30 s always the durable queue.
    #[serde(rename = "R-RES-RE-4")]
    Re4,
    /// Durable retry through a database table polled on an interval.
    #[serde(rename = "R-RES-RE-5")]
    Re5,
    /// Never retry a write without an Idempotency-Key.
    #[serde(rename = "R-RES-RE-X1")]
    ReX1,
    /// Never retry contract errors (4xx); only transient errors.
    #[serde(rename = "R-RES-RE-X2")]
    ReX2,
    /// Never retry without backoff or with a constant delay.
    #[serde(rename = "R-RES-RE-X3")]
    ReX3,
    /// No side retry mechanisms outside the one composition.
    #[serde(rename = "R-RES-RE-X4")]
    ReX4,
    /// Retry inside the circuit breaker is forbidden.
    #[serde(rename = "R-RES-CB-1")]
    Cb1,
}

impl Rule {
    /// Every rule, in the guide's order.
    pub const ALL: [Rule; 10] = [
        Rule::Re1,
        Rule::Re2,
        Rule::Re3,
        Rule::Re4,
        Rule::Re5,
        Rule::ReX1,
        Rule::ReX2,
        Rule::ReX3,
        Rule::ReX4,
        Rule::Cb1,
    ];

    /// The rule id, e.g. `"R-RES-RE-3"`.
    pub const fn id(self) -> &'static str {
        match self {
            Rule::Re1 => "R-RES-RE-1",
            Rule::Re2 => "R-RES-RE-2",
            Rule::Re3 => "R-RES-RE-3",
            Rule::Re4 => "R-RES-RE-4",
            Rule::Re5 => "R-RES-RE-5",
            Rule::ReX1 => "R-RES-RE-X1",
            Rule::ReX2 => "R-RES-RE-X2",
            Rule::ReX3 => "R-RES-RE-X3",
            Rule::ReX4 => "R-RES-RE-X4",
            Rule::Cb1 => "R-RES-CB-1",
        }
    }

    /// The rule in one line.
    pub const fn summary(self) -> &'static str {
        match self {
            Rule::Re1 => "retry only reads and writes carrying an Idempotency-Key the system deduplicates by",
            Rule::Re2 => "one composition per system: retry → circuit breaker → bulkhead → timeout",
            Rule::Re3 => "max_attempts counts the first attempt; 3 is typical, 5 is the limit in memory",
            Rule::Re4 => "in-memory retry for failures under ~5 s; 5–30 s normally, over 30 s always, the durable task queue",
            Rule::Re5 => "durable retry through a polled database table, 2^n s backoff, failed + alert after 10",
            Rule::ReX1 => "never retry a write without an Idempotency-Key",
            Rule::ReX2 => "never retry contract errors (4xx); only transient errors",
            Rule::ReX3 => "never retry without backoff or with a constant delay; jittered exponential only",
            Rule::ReX4 => "no side retry mechanisms (client retries, ad-hoc loops) outside the composition",
            Rule::Cb1 => "retry inside the circuit breaker is forbidden",
        }
    }

    /// Looks a rule up by its id.
    pub fn from_id(id: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.id() == id)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// How serious a [`Violation`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; nothing is wrong.
    Note,
    /// Allowed, but the guide advises otherwise.
    Warning,
    /// Refused.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Note => "note",
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// One finding about a policy: which rule (if any), what is wrong, what to do.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Violation {
    /// The rule broken, or `None` for a plain out-of-range value.
    pub rule: Option<Rule>,
    /// Error, warning or note.
    pub severity: Severity,
    /// The setting at fault, e.g. `"retry.max_attempts"`.
    pub setting: &'static str,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub help: String,
}

impl Violation {
    pub(crate) fn error(
        rule: Option<Rule>,
        setting: &'static str,
        message: String,
        help: impl Into<String>,
    ) -> Self {
        Self { rule, severity: Severity::Error, setting, message, help: help.into() }
    }

    pub(crate) fn warning(
        rule: Rule,
        setting: &'static str,
        message: String,
        help: impl Into<String>,
    ) -> Self {
        Self { rule: Some(rule), severity: Severity::Warning, setting, message, help: help.into() }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rule {
            Some(rule) => write!(
                f,
                "{}[{}] {}: {} (help: {})",
                self.severity, rule, self.setting, self.message, self.help
            ),
            None => write!(f, "{}: {}: {} (help: {})", self.severity, self.setting, self.message, self.help),
        }
    }
}

/// `build()` refused the policy: every error found, each naming its rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct BuildError {
    /// Every violation of severity [`Severity::Error`].
    pub violations: Vec<Violation>,
}

impl BuildError {
    /// Whether any violation names `rule`.
    pub fn breaks(&self, rule: Rule) -> bool {
        self.violations.iter().any(|v| v.rule == Some(rule))
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "policy refused ({} problem{})",
            self.violations.len(),
            if self.violations.len() == 1 { "" } else { "s" }
        )?;
        for v in &self.violations {
            write!(f, "\n  {v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for rule in Rule::ALL {
            assert_eq!(Rule::from_id(rule.id()), Some(rule));
            let json = serde_json::to_string(&rule).unwrap();
            assert_eq!(json, format!("\"{}\"", rule.id()));
        }
        assert_eq!(Rule::from_id("R-RES-RE-9"), None);
    }
}
