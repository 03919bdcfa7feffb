//! The text of a configuration file and where things are in it: byte spans
//! to `line:column` (codespan-reporting's line index, the one the report is
//! drawn with), and from a key path (`systems.sber.retry.max_attempts`) to
//! the span of its value, so every finding points at what to change.

use std::collections::BTreeMap;
use std::ops::Range;

use codespan_reporting::files::{self, Files as _, SimpleFile};

use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// A 1-based line and column (the column counts characters, not bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1, in characters.
    pub column: usize,
}

/// A configuration file's name and text.
///
/// ```
/// use ballast_config::{Location, Source};
///
/// let source = Source::new("ballast.toml", "[queue]\nurl = 1\n");
/// assert_eq!(source.location(14), Location { line: 2, column: 7 });
/// assert_eq!(source.line(2), "url = 1");
/// ```
#[derive(Debug, Clone)]
pub struct Source {
    file: SimpleFile<String, String>,
}

impl Source {
    /// A file named `name` (as it should appear in messages) holding `text`.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        Self { file: SimpleFile::new(name.into(), text.into()) }
    }

    /// The file name, as given.
    pub fn name(&self) -> &str {
        self.file.name()
    }

    /// The whole text.
    pub fn text(&self) -> &str {
        self.file.source()
    }

    /// The line and column of byte `offset` (clamped to the text).
    pub fn location(&self, offset: usize) -> Location {
        // A single file always has the line of an offset; the fallback is never taken.
        let at = self
            .file
            .location((), offset.min(self.text().len()))
            .unwrap_or(files::Location { line_number: 1, column_number: 1 });
        Location { line: at.line_number, column: at.column_number }
    }

    /// The text of 1-based `line`, without its line ending (empty past the end).
    pub fn line(&self, line: usize) -> &str {
        let range = line.checked_sub(1).and_then(|index| self.file.line_range((), index).ok());
        let text = range.and_then(|range| self.text().get(range)).unwrap_or("");
        text.strip_suffix('\n').unwrap_or(text).trim_end_matches('\r')
    }
}

impl PartialEq for Source {
    fn eq(&self, other: &Self) -> bool {
        (self.name(), self.text()) == (other.name(), other.text())
    }
}

impl Eq for Source {}

/// Where one key and its value are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub key: Range<usize>,
    pub value: Range<usize>,
    pub table: bool,
}

/// Every key path of a file and its spans.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SpanIndex {
    entries: BTreeMap<Vec<String>, Entry>,
}

impl SpanIndex {
    pub(crate) fn insert(&mut self, path: &[String], key: Range<usize>, value: &Spanned<DeValue<'_>>) {
        let table = matches!(value.get_ref(), DeValue::Table(_));
        self.entries.insert(path.to_vec(), Entry { key, value: value.span(), table });
        if let DeValue::Array(items) = value.get_ref() {
            for (i, item) in items.into_iter().enumerate() {
                let mut item_path = path.to_vec();
                item_path.push(i.to_string());
                self.insert(&item_path, item.span(), item);
                if let DeValue::Table(inner) = item.get_ref() {
                    self.index_table(&mut item_path, inner);
                }
            }
        }
    }

    /// Indexes every key of `table` under `prefix`.
    pub(crate) fn index_table(&mut self, prefix: &mut Vec<String>, table: &DeTable<'_>) {
        for (key, value) in table {
            prefix.push(key.get_ref().to_string());
            self.insert(prefix, key.span(), value);
            if let DeValue::Table(inner) = value.get_ref() {
                self.index_table(prefix, inner);
            }
            prefix.pop();
        }
    }

    /// The span to point at for `path`: the value of a plain key, the key
    /// (header) of a table, or — for a key left out — the nearest enclosing
    /// table that is written.
    pub(crate) fn span(&self, path: &[String]) -> Option<Range<usize>> {
        (1..=path.len()).rev().find_map(|n| {
            self.entries.get(&path[..n]).map(|e| {
                if e.table || n < path.len() {
                    e.key.clone()
                } else {
                    e.value.clone()
                }
            })
        })
    }

    /// The key path whose value sits exactly at `span`, if any.
    pub(crate) fn path_at(&self, span: &Range<usize>) -> Option<&[String]> {
        self.entries.iter().find(|(_, e)| e.value == *span).map(|(p, _)| p.as_slice())
    }
}
