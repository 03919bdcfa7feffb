//! Printing findings: like a compiler for people (the source line with a
//! caret under the offending value, drawn by codespan-reporting), or as JSON
//! for CI.

use std::fmt::Write as _;
use std::ops::Range;

use ballast::Severity;
use codespan_reporting::diagnostic::{self, Diagnostic, Label};
use codespan_reporting::files::{self, Files};
use codespan_reporting::term;

use crate::finding::Finding;
use crate::source::{Location, Source};

/// Findings for people, each as
///
/// ```text
/// error[R-RES-RE-3]: max_attempts is 8, over the in-memory limit of 5 (it counts the first attempt)
///   --> ballast.toml:2:16
///   |
/// 2 | max_attempts = 8
///   |                ^
///   |
///   = help: use 3 (typical) to 5 attempts and hand longer outages to the durable task queue
/// ```
///
/// and a blank line. `source` gives the lines to quote; without it only the
/// location is printed.
///
/// Control characters from the file (names, values, messages quoting them)
/// are shown escaped ([`printable`]), so a configuration cannot drive the
/// terminal that prints its findings.
pub fn human(findings: &[Finding], source: Option<&Source>) -> String {
    let mut out = String::new();
    for finding in findings {
        render_one(&mut out, finding, source);
    }
    out
}

/// `text` safe to print on a terminal: every control character but newline
/// and tab — ESC, BEL, carriage return, DEL, the C1 controls — and every
/// bidirectional-override character is shown as an escape such as `\u{1b}`.
///
/// ```
/// use ballast_config::report::printable;
///
/// assert_eq!(printable("sber\x1b]0;pwned\x07"), "sber\\u{1b}]0;pwned\\u{7}");
/// assert_eq!(printable("line\n\tindented"), "line\n\tindented");
/// ```
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            let _ = write!(out, "{}", c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

fn render_one(out: &mut String, f: &Finding, source: Option<&Source>) {
    let (message, help, file) = (printable(&f.message), printable(&f.help), printable(&f.file));
    let (Some(at), Some(source)) = (f.location, source) else {
        // No line to quote, so nothing for the renderer to draw around: the
        // file, and the place when there is one.
        let rule = f.rule.map(|r| format!("[{r}]")).unwrap_or_default();
        let place = f.location.map(|at| format!(":{}:{}", at.line, at.column)).unwrap_or_default();
        let _ = write!(out, "{}{rule}: {message}\n --> {file}{place}\n  = help: {help}\n\n", f.severity);
        return;
    };
    let quoted = Quoted::new(&file, at, source, f.span.as_ref());
    let severity = match f.severity {
        Severity::Error => diagnostic::Severity::Error,
        Severity::Warning => diagnostic::Severity::Warning,
        Severity::Note => diagnostic::Severity::Note,
    };
    let mut diagnostic = Diagnostic::new(severity)
        .with_message(message)
        .with_labels(vec![Label::primary((), quoted.caret.clone())])
        .with_notes(vec![format!("help: {help}")]);
    if let Some(rule) = f.rule {
        diagnostic = diagnostic.with_code(rule.id());
    }
    let config = term::Config { chars: term::Chars::ascii(), ..term::Config::default() };
    // Rendering fails only when the file database lacks a line it is asked
    // for; `Quoted` has the one line the label is on.
    let _ = term::emit_to_string(out, &config, &quoted, &diagnostic);
}

/// The one line a finding quotes, as printed ([`shown`]), for the renderer:
/// numbered and located as in the file, the caret range measured on the
/// printed text so it stays under the value.
struct Quoted<'a> {
    file: &'a str,
    at: Location,
    line: String,
    caret: Range<usize>,
}

impl<'a> Quoted<'a> {
    fn new(file: &'a str, at: Location, source: &Source, span: Option<&Range<usize>>) -> Self {
        let raw = source.line(at.line);
        let line = shown(raw);
        let before: String = raw.chars().take(at.column.saturating_sub(1)).collect();
        let value = span.and_then(|s| source.text().get(s.clone())).and_then(|v| v.lines().next());
        // Masking a URL cut short can differ from masking it whole: keep the
        // range inside the printed line and on its character boundaries.
        let start = floor_boundary(&line, shown(&before).len());
        let end = floor_boundary(&line, start + value.map_or(0, |v| shown(v).len()));
        Self { file, at, line, caret: start..end }
    }
}

/// The largest character boundary of `text` at or before `index`.
fn floor_boundary(text: &str, index: usize) -> usize {
    (0..=index.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0)
}

impl<'a> Files<'a> for Quoted<'_> {
    type FileId = ();
    type Name = &'a str;
    type Source = &'a str;

    fn name(&'a self, (): ()) -> Result<&'a str, files::Error> {
        Ok(self.file)
    }

    fn source(&'a self, (): ()) -> Result<&'a str, files::Error> {
        Ok(&self.line)
    }

    fn line_index(&'a self, (): (), _: usize) -> Result<usize, files::Error> {
        Ok(0)
    }

    fn line_number(&'a self, (): (), _: usize) -> Result<usize, files::Error> {
        Ok(self.at.line)
    }

    fn column_number(&'a self, (): (), _: usize, _: usize) -> Result<usize, files::Error> {
        Ok(self.at.column)
    }

    fn line_range(&'a self, (): (), line: usize) -> Result<Range<usize>, files::Error> {
        match line {
            0 => Ok(0..self.line.len()),
            given => Err(files::Error::LineTooLarge { given, max: 0 }),
        }
    }
}

/// A line of the file as quoted under a finding: every URL in it with its
/// secrets masked ([`ballast::redact_url`]) — findings end up in logs, the
/// file's credentials must not — and control characters escaped.
fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        // The scheme: the letters, digits, `+`, `-` and `.` right before `://`.
        let scheme_start = rest[..at]
            .char_indices()
            .rfind(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let end = rest[at..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`'))
            .map_or(rest.len(), |i| at + i);
        out.push_str(&rest[..scheme_start]);
        out.push_str(&ballast::redact_url(&rest[scheme_start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    printable(&out).into_owned()
}

/// One line that counts the findings: `ballast.toml: 1 error, 2 warnings, 0 notes`.
pub fn summary(file: &str, findings: &[Finding]) -> String {
    let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    format!(
        "{file}: {}, {}, {}",
        plural(count(Severity::Error), "error"),
        plural(count(Severity::Warning), "warning"),
        plural(count(Severity::Note), "note")
    )
}

/// One finding as a JSON object: `{rule, severity, file, line, column, message, help}`;
/// `rule` is `null` for a plain range error, `line`/`column` `null` when the
/// file could not be read.
pub fn json_value(f: &Finding) -> serde_json::Value {
    serde_json::to_value(JsonFinding::from(f)).unwrap_or(serde_json::Value::Null)
}

/// Findings as a pretty-printed JSON array, fields in the documented order.
pub fn json(findings: &[Finding]) -> String {
    let array: Vec<JsonFinding<'_>> = findings.iter().map(JsonFinding::from).collect();
    serde_json::to_string_pretty(&array).unwrap_or_else(|_| "[]".to_owned())
}

/// The JSON shape of a finding; a struct so the fields keep their order.
#[derive(serde::Serialize)]
struct JsonFinding<'a> {
    rule: Option<&'static str>,
    severity: String,
    file: &'a str,
    line: Option<usize>,
    column: Option<usize>,
    message: &'a str,
    help: &'a str,
}

impl<'a> From<&'a Finding> for JsonFinding<'a> {
    fn from(f: &'a Finding) -> Self {
        Self {
            rule: f.rule.map(|r| r.id()),
            severity: f.severity.to_string(),
            file: &f.file,
            line: f.location.map(|l| l.line),
            column: f.location.map(|l| l.column),
            message: &f.message,
            help: &f.help,
        }
    }
}
