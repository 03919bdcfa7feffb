//! A route's path template, parsed once: literal segments, `{name}`
//! segments and a last `*`, each with the weight that ranks routes.

use super::spelling::decode_unreserved;
use super::RouteError;

/// One part of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Segment {
    Literal(String),
    /// `{name}`: any one segment.
    Param(String),
    /// A last `*`: any rest of the path, none included.
    Rest,
}

impl Segment {
    /// How much a segment narrows what matches: a literal most.
    pub(super) fn weight(&self) -> u8 {
        match self {
            Segment::Literal(_) => 2,
            Segment::Param(_) => 1,
            Segment::Rest => 0,
        }
    }
}

fn split(path: &str) -> impl Iterator<Item = &str> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let trimmed = path.trim_start_matches('/');
    trimmed.split('/').filter(move |_| !trimmed.is_empty())
}

/// `template` as segments, or why it is not a template.
pub(super) fn parse(template: &str) -> Result<Vec<Segment>, RouteError> {
    let bad = |why| RouteError::Template { template: template.to_owned(), why };
    let parts: Vec<&str> = split(template).collect();
    let mut segments = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let segment = if *part == "*" {
            if i + 1 != parts.len() {
                return Err(bad("`*` may only end a template"));
            }
            Segment::Rest
        } else if let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            if name.is_empty() || name.contains(['{', '}']) {
                return Err(bad("a parameter is a whole segment with a name, like {id}"));
            }
            Segment::Param(name.to_owned())
        } else if part.contains(['{', '}', '*']) || part.is_empty() || *part == "." || *part == ".." {
            return Err(bad("a segment is a literal, a whole {name}, or a last *"));
        } else {
            Segment::Literal(decode_unreserved(part).into_owned())
        };
        segments.push(segment);
    }
    if template.contains(['?', '#']) {
        return Err(bad("a template is a path: no query, no fragment"));
    }
    Ok(segments)
}
