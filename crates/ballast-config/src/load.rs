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

/// The largest configuration file read, in bytes (1 MiB). A real file is a
/// few kilobytes; the cap keeps `ballast lint /dev/zero` or a runaway
/// generated file from taking the machine's memory.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

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
    /// The file is larger than [`MAX_CONFIG_BYTES`]: not a configuration.
    #[error("{} is larger than {limit} bytes, which no ballast configuration needs; check the path", path.display())]
    TooLarge {
        /// The path given.
        path: PathBuf,
        /// The limit, [`MAX_CONFIG_BYTES`].
        limit: u64,
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
            LoadError::Read { path, source } => vec![Finding::about_file(
                path,
                format!("cannot read the file: {source}"),
                "check the path and its permissions",
            )],
            LoadError::TooLarge { path, limit } => vec![Finding::about_file(
                path,
                format!("the file is larger than {limit} bytes, which no ballast configuration needs"),
                "check the path: a configuration file is a few kilobytes",
            )],
            LoadError::Invalid { findings, .. } => findings.clone(),
        }
    }

    /// The text that failed to load, when it could be read.
    pub fn input(&self) -> Option<&Source> {
        match self {
            LoadError::Read { .. } | LoadError::TooLarge { .. } => None,
            LoadError::Invalid { input, .. } => Some(input),
        }
    }
}

impl Config {
    /// Reads and parses the file at `path`; messages name it as given.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, LoadError> {
        let path = path.as_ref();
        Config::parse(path.display().to_string(), read_text(path)?)
    }

    /// Parses `text`, naming it `name` in messages. Refused when the text is
    /// not TOML, has unknown keys or a value of the wrong type; the error
    /// holds every such problem.
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
        let read = read(Source::new(name, text))?;
        match (read.invalid.is_empty(), read.file) {
            (true, Some(file)) => {
                Ok(Config { source: read.source, index: read.index, file, dropped: Vec::new() })
            }
            (_, _) => Err(LoadError::Invalid {
                file: read.source.name().to_owned(),
                findings: read.invalid,
                input: Box::new(read.source),
            }),
        }
    }

    /// Checks the file at `path` as far as it can be checked: what `ballast
    /// lint` reports. Only a file that cannot be read or is not TOML is an
    /// error; unknown keys and values of the wrong type become error findings,
    /// reported together with the rule findings of the rest of the file.
    pub fn check_file(path: impl AsRef<Path>) -> Result<Checked, LoadError> {
        let path = path.as_ref();
        Config::check(path.display().to_string(), read_text(path)?)
    }

    /// [`check_file`](Self::check_file) on `text`, naming it `name` in messages.
    ///
    /// ```
    /// use ballast_config::Config;
    ///
    /// let checked = Config::check("inline.toml", "[systems.sber.retry]\nmax_atempts = 3\nmax_attempts = 8\n").unwrap();
    /// let unknown = checked.findings.iter().find(|f| f.rule.is_none()).unwrap();
    /// assert!(unknown.message.contains("unknown key `max_atempts`"));
    /// assert!(checked.findings.iter().any(|f| f.rule.map(|r| r.id()) == Some("R-RES-RE-3")));
    /// assert!(Config::check("inline.toml", "[systems.sber").is_err());
    /// ```
    pub fn check(name: impl Into<String>, text: impl Into<String>) -> Result<Checked, LoadError> {
        let read = read(Source::new(name, text))?;
        let Partial { source, index, file, invalid, dropped } = read;
        let mut findings = invalid;
        if let Some(file) = file {
            let config = Config { source, index, file, dropped };
            findings.extend(config.lint());
            findings.sort_by(|a, b| a.location.cmp(&b.location).then(b.severity.cmp(&a.severity)));
            return Ok(Checked { source: config.source, findings });
        }
        Ok(Checked { source, findings })
    }
}

/// The text of the file at `path`, refused past [`MAX_CONFIG_BYTES`] without
/// reading further (a device such as `/dev/zero` never ends).
fn read_text(path: &Path) -> Result<String, LoadError> {
    use std::io::Read as _;
    let read_error = |source| LoadError::Read { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1).read_to_string(&mut text).map_err(read_error)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(LoadError::TooLarge { path: path.to_path_buf(), limit: MAX_CONFIG_BYTES });
    }
    Ok(text)
}

/// Everything found in one file by [`Config::check`]: unknown keys and wrong
/// types, then the rules on the rest, in file order.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The file's name and text, for quoting the lines at fault.
    pub source: Source,
    /// Every finding, in file order.
    pub findings: Vec<Finding>,
}

/// A file read as far as it could be: the model without the keys at fault.
struct Partial {
    source: Source,
    index: SpanIndex,
    /// `None` when a value of the wrong type could not be set aside.
    file: Option<File>,
    /// Unknown keys and values of the wrong type.
    invalid: Vec<Finding>,
    /// The key paths of values set aside for having the wrong type.
    dropped: Vec<Vec<String>>,
}

/// Parses `source`: only a TOML syntax error is refused outright. Unknown
/// keys are reported (serde ignores them); a value of the wrong type is
/// reported and left out, and the rest deserialized again, so every such
/// problem is found and the remaining keys can still be checked.
fn read(source: Source) -> Result<Partial, LoadError> {
    let mut root = match DeTable::parse(source.text()) {
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
            return Err(LoadError::Invalid {
                file: source.name().to_owned(),
                findings: vec![finding],
                input: Box::new(source),
            });
        }
    };
    let mut index = SpanIndex::default();
    index.index_table(&mut Vec::new(), root.get_ref());
    let mut invalid = Vec::new();
    if let Schema::Table(keys) = ROOT {
        check_keys(&source, root.get_ref(), keys, &mut Vec::new(), &mut invalid);
    }
    let mut dropped = Vec::new();
    let file = loop {
        match serde::Deserialize::deserialize(toml::de::Deserializer::from(root.clone())) {
            Ok(file) => break Some(file),
            Err(e) => {
                invalid.push(type_error(&source, &index, &e));
                let at = e.span().and_then(|s| index.path_at(&s)).map(<[String]>::to_vec);
                // Without a key to set aside the rest cannot be read; each
                // round removes one key, so this ends.
                match at.and_then(|path| remove(root.get_mut(), &path)) {
                    Some(path) => dropped.push(path),
                    None => break None,
                }
            }
        }
    };
    Ok(Partial { source, index, file, invalid, dropped })
}

/// Removes the key at `path` (or the key holding the array element `path`
/// names) from `table`; the path removed.
fn remove(table: &mut DeTable<'_>, path: &[String]) -> Option<Vec<String>> {
    let (key, rest) = path.split_first()?;
    let nested = match table.get_mut(key.as_str())?.get_mut() {
        DeValue::Table(inner) if !rest.is_empty() => remove(inner, rest),
        _ => None,
    };
    match nested {
        Some(mut inner) => {
            inner.insert(0, key.clone());
            Some(inner)
        }
        None => table.remove(key.as_str()).map(|_| vec![key.clone()]),
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
    if let (Schema::Tables(keys), DeValue::Array(items)) = (schema, value) {
        for (i, item) in items.iter().enumerate() {
            path.push(i.to_string());
            if let DeValue::Table(inner) = item.get_ref() {
                check_keys(source, inner, keys, path, out);
            }
            path.pop();
        }
        return;
    }
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
        Schema::Value | Schema::Tables(_) => {}
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
    let in_headers = key.as_deref().is_some_and(|k| k.split('.').nth(2) == Some("headers"));
    let help = if in_headers {
        "write `{ env = \"VARIABLE\" }`: a header's value comes from the environment, never the file"
    } else {
        key.as_deref()
            .and_then(|k| k.rsplit('.').next())
            .map_or("see examples/ballast.toml for the form of each key", expected)
    };
    spanned(source, None, Severity::Error, span, message, help.to_owned())
}

/// What a key's value looks like, for type errors.
fn expected(key: &str) -> &'static str {
    match key {
        "poll_interval"
        | "lease"
        | "key_ttl"
        | "first_delay"
        | "max_delay"
        | "duration"
        | "half_open_after"
        | "attempt"
        | "total"
        | "connect"
        | "read"
        | "stream"
        | "header_read_timeout"
        | "body_read_timeout"
        | "session_ttl"
        | "stats_interval" => "write a duration string, e.g. \"500ms\", \"5s\" or \"24h\"",
        "max_attempts" | "size" | "min_calls" | "min_throughput" | "limit" | "queue" | "retries"
        | "max_connections" => "write a whole number that is 0 or more, e.g. 3",
        "max_body" => "write a number of bytes or a size string, e.g. \"1MiB\"",
        "retain_completed" | "retain_failed" | "max_age" | "timeout" => {
            "write a duration string, e.g. \"7d\" or \"5s\""
        }
        "critical" | "dedupes_by_key" | "protect_metrics" | "trust_forwarded" | "seal_answers" => {
            "write true or false"
        }
        "webhook" => "write [[alerts.webhook]] tables, each with url_env and format",
        "retry" | "breaker" | "bulkhead" => {
            "write a table of its settings, or the string \"none\" to leave this part out"
        }
        "threshold" | "budget_ratio" | "reserve_live" => "write a number, e.g. 0.5",
        "retry_on" | "order" | "remove_systems" | "allowed_hosts" | "seal_headers" | "callback_hosts" => {
            "write a list of strings, e.g. [\"5xx\", \"timeout\"]"
        }
        _ => "write a string, e.g. \"exponential\"",
    }
}
