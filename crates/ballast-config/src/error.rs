//! Why a configuration's policy or settings were refused.

use crate::finding::Finding;

/// Why a system's policy or settings, or the queue's, were refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No system of that name is declared.
    #[error("no system `{name}` in {file}{}", suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default())]
    UnknownSystem {
        /// The name asked for.
        name: String,
        /// The file.
        file: String,
        /// The closest declared name.
        suggestion: Option<String>,
    },
    /// The section has lint errors; the first one is in the message.
    #[error("[{section}] in {file} breaks the rules ({}); run `ballast lint {file}` for all of them", findings.first().map(ToString::to_string).unwrap_or_default())]
    Refused {
        /// `systems.NAME` or `queue`.
        section: String,
        /// The file.
        file: String,
        /// Every error found in the section.
        findings: Vec<Finding>,
    },
    /// An HTTP system needs a `base_url`.
    #[error(
        "[systems.{system}] in {file} has no base_url; add e.g. `base_url = \"https://gateway.example\"`"
    )]
    NoBaseUrl {
        /// The system.
        system: String,
        /// The file.
        file: String,
    },
    /// A `retry_on` name is not an outcome class the HTTP client knows.
    #[error("[systems.{system}] in {file}: {source}")]
    RetryOn {
        /// The system.
        system: String,
        /// The file.
        file: String,
        /// The name refused.
        source: ballast_vocab::http::UnknownClass,
    },
    /// The file has no `[queue]` section.
    #[error("{file} has no [queue] section; add one with at least `url`")]
    NoQueue {
        /// The file.
        file: String,
    },
}
