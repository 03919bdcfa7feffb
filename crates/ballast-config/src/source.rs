//! The text of a configuration file and where things are in it: byte spans
//! to `line:column`, and from a key path (`systems.sber.retry.max_attempts`)
//! to the span of its value, so every finding points at what to change.

use std::collections::BTreeMap;
use std::ops::Range;

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    name: String,
    text: String,
    line_starts: Vec<usize>,
}

impl Source {
    /// A file named `name` (as it should appear in messages) holding `text`.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        let text = text.into();
        let line_starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        Self { name: name.into(), text, line_starts }
    }

    /// The file name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The whole text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The line and column of byte `offset` (clamped to the text).
    pub fn location(&self, offset: usize) -> Location {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&start| start <= offset).max(1);
        let start = self.line_starts[line - 1];
        // A span never starts inside a character, but be safe: count what can be counted.
        let column = self.text.get(start..offset).map_or(offset - start, |s| s.chars().count()) + 1;
        Location { line, column }
    }

    /// The text of 1-based `line`, without its line ending (empty past the end).
    pub fn line(&self, line: usize) -> &str {
        let Some(&start) = line.checked_sub(1).and_then(|i| self.line_starts.get(i)) else {
            return "";
        };
        let end = self.line_starts.get(line).map_or(self.text.len(), |&next| next.saturating_sub(1));
        self.text.get(start..end.max(start)).unwrap_or("").trim_end_matches('\r')
    }
}

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
