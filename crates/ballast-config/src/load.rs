//! Reading a file into a [`Config`]: TOML syntax, unknown keys (with a
//! "did you mean"), and value types — each failure located at `line:col`.

use std::path::{Path, PathBuf};

use ballast::Severity;
use toml::de::{DeTable, DeValue};

use crate::config::Config;
use crate::finding::{spanned, Finding};
use crate::model::{File, Schema, ROOT};
use crate::source::{Source, SpanIndex};
use crate::suggest::did_you_mean;

/// Why a file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {}: {source}; check the path and its permissions", path.display())]
    Read {
        /// The path given.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML, has unknown keys, or a value of the wrong type.
    #[error("{file} is not a valid ballast configuration: {}", first_message(findings))]
    Invalid {
        /// The file, as named.
        file: String,
        /// Every problem found, each located.
        findings: Vec<Finding>,
        /// The text, for quoting the lines at fault.
        input: Box<Source>,
    },
}

fn first_message(findings: &[Finding]) -> String {
    match findings {
        [] => "no details".to_owned(),
        [one] => one.to_string(),
        [first, rest @ ..] => format!("{first} (and {} more)", rest.len()),
    }
}

impl LoadError {
    /// The problems as findings (a read error becomes one finding without a location).
    pub fn findings(&self) -> Vec<Finding> {
        match self {
            LoadError::Read { path, source } => vec![Finding {
                rule: None,
                severity: Severity::Error,
                file: path.display().to_string(),
                location: None,
                span: None,
                message: format!("cannot read the file: {source}"),
                help: "check the path and its permissions".to_owned(),
            }],
            LoadError::Invalid { findings, .. } => findings.clone(),
        }
    }

    /// The text that failed to load, when it could be read.
    pub fn input(&self) -> Option<&Source> {
        match self {
            LoadError::Read { .. } => None,
            LoadError::Invalid { input, .. } => Some(input),
        }
    }
}

impl Config {
    /// Reads and parses the file at `path`; messages name it as given.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, LoadError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|source| LoadError::Read { path: path.to_path_buf(), source })?;
        Config::parse(path.display().to_string(), text)
    }

    /// Parses `text`, naming it `name` in messages.
    ///
    /// ```
    /// use ballast_config::Config;
    ///
    /// let err = Config::parse("inline.toml", "[systems.sber.retry]\nmax_atempts = 3\n").unwrap_err();
    /// let finding = &err.findings()[0];
    /// assert_eq!((finding.location.unwrap().line, finding.location.unwrap().column), (2, 1));
    /// assert!(finding.help.contains("did you mean `max_attempts`"));
    /// ```
    pub fn parse(name: impl Into<String>, text: impl Into<String>) -> Result<Config, LoadError> {
        let source = Source::new(name, text);
        let invalid = |findings| LoadError::Invalid {
            file: source.name().to_owned(),
            findings,
            input: Box::new(source.clone()),
        };
        let root = match DeTable::parse(source.text()) {
            Ok(root) => root,
            Err(e) => {
                let finding = spanned(
                    &source,
                    None,
                    Severity::Error,
                    e.span(),
                    format!("invalid TOML: {}", e.message().trim_end()),
                    "fix the syntax here; strings need quotes, e.g. first_delay = \"500ms\"".into(),
                );
                return Err(invalid(vec![finding]));
            }
        };
        let mut index = SpanIndex::default();
        index.index_table(&mut Vec::new(), root.get_ref());
        let mut unknown = Vec::new();
        if let Schema::Table(keys) = ROOT {
            check_keys(&source, root.get_ref(), keys, &mut Vec::new(), &mut unknown);
        }
        if !unknown.is_empty() {
            return Err(invalid(unknown));
        }
        let file: File = match serde::Deserialize::deserialize(toml::de::Deserializer::from(root)) {
            Ok(file) => file,
            Err(e) => return Err(invalid(vec![type_error(&source, &index, &e)])),
        };
        Ok(Config { source, index, file })
    }
}

/// Refuses keys the schema does not know, suggesting the closest known one.
fn check_keys(
    source: &Source,
    table: &DeTable<'_>,
    keys: &[(&str, Schema)],
    path: &mut Vec<String>,
    out: &mut Vec<Finding>,
) {
    for (key, value) in table {
        let name = key.get_ref().as_ref();
        path.push(name.to_owned());
        match keys.iter().find(|(k, _)| *k == name) {
            Some((_, schema)) => descend(source, value.get_ref(), *schema, path, out),
            None => out.push(unknown_key(source, key.span(), name, keys, &path[..path.len() - 1])),
        }
        path.pop();
    }
}

fn descend(
    source: &Source,
    value: &DeValue<'_>,
    schema: Schema,
    path: &mut Vec<String>,
    out: &mut Vec<Finding>,
) {
    // A value of the wrong shape (a string where a table belongs) is the
    // type check's business; here only the keys of real tables are checked.
    let DeValue::Table(table) = value else { return };
    match schema {
        Schema::Table(keys) => check_keys(source, table, keys, path, out),
        Schema::Named(keys) => {
            for (name, entry) in table {
                path.push(name.get_ref().to_string());
                if let DeValue::Table(inner) = entry.get_ref() {
                    check_keys(source, inner, keys, path, out);
                }
                path.pop();
            }
        }
        Schema::Value => {}
    }
}

fn unknown_key(
    source: &Source,
    span: std::ops::Range<usize>,
    name: &str,
    keys: &[(&str, Schema)],
    section: &[String],
) -> Finding {
    let known = keys.iter().map(|(k, _)| *k);
    let place = if section.is_empty() {
        "at the top level".to_owned()
    } else {
        format!("in [{}]", section.join("."))
    };
    let list = known.clone().collect::<Vec<_>>().join(", ");
    let help = match did_you_mean(name, known) {
        Some(k) => format!("did you mean `{k}`? The keys {place} are: {list}"),
        None => format!("remove it; the keys {place} are: {list}"),
    };
    spanned(source, None, Severity::Error, Some(span), format!("unknown key `{name}` {place}"), help)
}

fn type_error(source: &Source, index: &SpanIndex, e: &toml::de::Error) -> Finding {
    let span = e.span();
    let key = span.as_ref().and_then(|s| index.path_at(s)).map(|p| p.join("."));
    let message = match &key {
        Some(k) => format!("`{k}`: {}", e.message().trim_end()),
        None => e.message().trim_end().to_owned(),
    };
    let help = key
        .as_deref()
        .and_then(|k| k.rsplit('.').next())
        .map_or("see examples/ballast.toml for the form of each key", expected);
    spanned(source, None, Severity::Error, span, message, help.to_owned())
}

/// What a key's value looks like, for type errors.
fn expected(key: &str) -> &'static str {
    match key {
        "poll_interval" | "key_ttl" | "first_delay" | "max_delay" | "duration" | "half_open_after"
        | "attempt" | "total" | "connect" | "read" => {
            "write a duration string, e.g. \"500ms\", \"5s\" or \"24h\""
        }
        "max_attempts" | "size" | "min_calls" | "min_throughput" | "limit" | "queue" | "retries" => {
            "write a whole number that is 0 or more, e.g. 3"
        }
        "critical" | "dedupes_by_key" => "write true or false",
        "threshold" | "budget_ratio" => "write a number, e.g. 0.5",
        "retry_on" | "order" => "write a list of strings, e.g. [\"5xx\", \"timeout\"]",
        _ => "write a string, e.g. \"exponential\"",
    }
}
