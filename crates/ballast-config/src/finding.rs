//! One finding about a configuration file: which rule (if any), how serious,
//! where, what is wrong and what to do. Load errors and lint findings share
//! this shape so they print the same way.

use std::ops::Range;

use ballast::{Rule, Severity};

use crate::source::{Location, Source, SpanIndex};

/// A located finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The rule broken, or `None` for a plain out-of-range or malformed value.
    pub rule: Option<Rule>,
    /// Error, warning or note.
    pub severity: Severity,
    /// The file, as named when it was loaded.
    pub file: String,
    /// Where in the file, when the finding is about a place in it.
    pub location: Option<Location>,
    /// The byte range at fault, for underlining.
    pub span: Option<Range<usize>>,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub help: String,
}

impl Finding {
    /// An error about the file at `path` as a whole, at no place in it.
    pub(crate) fn about_file(path: &std::path::Path, message: String, help: &str) -> Self {
        Finding {
            rule: None,
            severity: Severity::Error,
            file: path.display().to_string(),
            location: None,
            span: None,
            message,
            help: help.to_owned(),
        }
    }

    /// Whether this finding is an error.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl std::fmt::Display for Finding {
    /// One line: `file:line:col: severity[RULE]: message (help: …)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(at) = self.location {
            write!(f, ":{}:{}", at.line, at.column)?;
        }
        write!(f, ": {}", self.severity)?;
        if let Some(rule) = self.rule {
            write!(f, "[{rule}]")?;
        }
        write!(f, ": {} (help: {})", self.message, self.help)
    }
}

/// A finding not yet located: the key path it is about.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeyFinding {
    pub rule: Option<Rule>,
    pub severity: Severity,
    pub path: Vec<String>,
    pub message: String,
    pub help: String,
}

impl KeyFinding {
    pub(crate) fn error(
        rule: Option<Rule>,
        path: Vec<String>,
        message: String,
        help: impl Into<String>,
    ) -> Self {
        Self { rule, severity: Severity::Error, path, message, help: help.into() }
    }

    pub(crate) fn at(
        rule: Option<Rule>,
        severity: Severity,
        path: Vec<String>,
        message: String,
        help: impl Into<String>,
    ) -> Self {
        Self { rule, severity, path, message, help: help.into() }
    }

    /// Points the problem at its key's span in `source`.
    pub(crate) fn locate(self, source: &Source, index: &SpanIndex) -> Finding {
        let span = index.span(&self.path);
        spanned(source, self.rule, self.severity, span, self.message, self.help)
    }
}

/// A finding at `span` of `source`.
pub(crate) fn spanned(
    source: &Source,
    rule: Option<Rule>,
    severity: Severity,
    span: Option<Range<usize>>,
    message: String,
    help: String,
) -> Finding {
    Finding {
        rule,
        severity,
        file: source.name().to_owned(),
        location: Some(source.location(span.as_ref().map_or(0, |s| s.start))),
        span,
        message,
        help,
    }
}

/// `["systems", name, rest…]`.
pub(crate) fn system_path(name: &str, rest: &[&str]) -> Vec<String> {
    let mut path = vec!["systems".to_owned(), name.to_owned()];
    path.extend(rest.iter().map(|s| (*s).to_owned()));
    path
}
