//! A route's sequence: the template its writes are ordered under, its
//! `{name}`s filled from the path as routing reads it.

use std::borrow::Cow;

use super::spelling::segments;
use super::template::Segment;
use super::{Route, RouteError};

impl Route {
    /// Writes through this route belong to `sequence`, a template whose
    /// `{name}`s are the route's parameters: `customer/{id}` on `PUT
    /// /customers/{id}` puts `PUT /customers/42` in sequence `customer/42`,
    /// so that writes to one customer are applied in the order they were
    /// accepted (see the README's "Order").
    ///
    /// A value is compared as text: `042` and `42` are two sequences. Where
    /// the system reads the id as a number, `{id:int}` writes an integer
    /// value in one spelling — `042`, `+42`, `42.0` and `42` are all `42` —
    /// and any other value as it is.
    ///
    /// ```
    /// use ballast_vocab::http::routes::{Route, RouteKind};
    ///
    /// let route = Route::new("PUT", "/customers/{id}", RouteKind::KeyedWrite)?
    ///     .sequence("customer/{id}")?;
    /// assert_eq!(route.sequence_of("customers/42").as_deref(), Some("customer/42"));
    /// assert_eq!(route.sequence_of("customers/042").as_deref(), Some("customer/042"));
    /// let numeric = Route::new("PUT", "/customers/{id}", RouteKind::KeyedWrite)?
    ///     .sequence("customer/{id:int}")?;
    /// assert_eq!(numeric.sequence_of("customers/0042").as_deref(), Some("customer/42"));
    /// assert_eq!(numeric.sequence_of("customers/42.0").as_deref(), Some("customer/42"));
    /// assert!(Route::new("PUT", "/customers/{id}", RouteKind::KeyedWrite)?.sequence("customer/{cid}").is_err());
    /// # Ok::<(), ballast_vocab::http::routes::RouteError>(())
    /// ```
    pub fn sequence(mut self, sequence: &str) -> Result<Route, RouteError> {
        let bad = |why: String| RouteError::Sequence {
            route: self.name.clone(),
            sequence: sequence.to_owned(),
            why,
        };
        let mut rest = sequence;
        while let Some(open) = rest.find('{') {
            let after = &rest[open + 1..];
            let Some(close) = after.find('}') else {
                return Err(bad("a `{` without its `}`".into()));
            };
            let (name, filter) = placeholder(&after[..close]);
            if !self.segments.iter().any(|s| matches!(s, Segment::Param(p) if p == name)) {
                return Err(bad(format!("the template {} has no parameter {{{name}}}", self.template)));
            }
            if filter.is_some_and(|f| f != "int") {
                return Err(bad(format!(
                    "{{{}}}: the only spelling a sequence can normalise is `int` ({{{name}:int}})",
                    &after[..close]
                )));
            }
            rest = &after[close + 1..];
        }
        if rest.contains('}') || sequence.trim().is_empty() {
            return Err(bad(
                "a sequence is a name with `{param}`s of the route's template, like customer/{id}".into(),
            ));
        }
        self.sequence = Some(sequence.to_owned());
        Ok(self)
    }

    /// The sequence template, if the route has one.
    pub fn sequence_template(&self) -> Option<&str> {
        self.sequence.as_deref()
    }

    /// The sequence a write to `path` through this route belongs to: the
    /// template with each `{name}` replaced by that segment of the path
    /// (escapes of unreserved characters decoded, as routing reads them).
    /// `None` without a sequence, or when `path` does not match.
    pub fn sequence_of(&self, path: &str) -> Option<String> {
        let template = self.sequence.as_deref()?;
        let mut values: Vec<(&str, Cow<'_, str>)> = Vec::new();
        let mut parts = segments(path);
        for segment in &self.segments {
            match segment {
                Segment::Rest => break,
                Segment::Literal(_) => {
                    parts.next()?;
                }
                Segment::Param(name) => values.push((name, parts.next()?)),
            }
        }
        // One pass: a value with braces in it is not read as a template.
        let mut filled = String::with_capacity(template.len() + 16);
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            filled.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let close = after.find('}')?;
            let (name, filter) = placeholder(&after[..close]);
            let (_, value) = values.iter().find(|(param, _)| *param == name)?;
            match filter.and_then(|_| canonical_integer(value)) {
                Some(number) => filled.push_str(&number),
                None => filled.push_str(value),
            }
            rest = &after[close + 1..];
        }
        filled.push_str(rest);
        Some(filled)
    }
}

/// A sequence template's `{name}` or `{name:filter}`.
fn placeholder(inside: &str) -> (&str, Option<&str>) {
    match inside.split_once(':') {
        Some((name, filter)) => (name, Some(filter)),
        None => (inside, None),
    }
}

/// `value` in one spelling if it reads as an integer — an optional sign,
/// digits, and a fraction of zeros (`+042.00` is `42`) — else `None`.
fn canonical_integer(value: &str) -> Option<String> {
    let (negative, digits) = match value.as_bytes().first()? {
        b'-' => (true, &value[1..]),
        b'+' => (false, &value[1..]),
        _ => (false, value),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) || !fraction.bytes().all(|b| b == b'0')
    {
        return None;
    }
    let trimmed = whole.trim_start_matches('0');
    Some(match (trimmed.is_empty(), negative) {
        (true, _) => "0".to_owned(),
        (false, true) => format!("-{trimmed}"),
        (false, false) => trimmed.to_owned(),
    })
}
