//! How a path is read before it is matched: the spellings a system routes
//! as one (escaped unreserved characters, empty segments, `;params`) read
//! as one, so no spelling changes what a call is.

use std::borrow::Cow;

/// The segments of a request's `path` as a route sees them: each without
/// its `;params`, escapes of unreserved characters decoded, empty ones
/// skipped. Borrowed unless a segment has an escape to decode.
pub(super) fn segments(path: &str) -> impl Iterator<Item = Cow<'_, str>> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    path.split('/').filter_map(|segment| {
        let segment = segment.split(';').next().unwrap_or_default();
        (!segment.is_empty()).then(|| decode_unreserved(segment))
    })
}

/// `segment` with `%XX` escapes of unreserved characters (RFC 3986 §2.3:
/// letters, digits, `-`, `.`, `_`, `~`) decoded: they mean the same
/// character, which servers decode before routing. Other escapes stay.
pub(super) fn decode_unreserved(segment: &str) -> Cow<'_, str> {
    if !segment.contains('%') {
        return Cow::Borrowed(segment);
    }
    let bytes = segment.as_bytes();
    let mut out = String::with_capacity(segment.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| segment.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            .filter(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'));
        match escaped {
            Some(byte) => {
                out.push(char::from(byte));
                i += 3;
            }
            None => {
                // `i` is on a char boundary: escapes and ASCII are one byte each.
                let ch = segment[i..].chars().next().unwrap_or_default();
                out.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    Cow::Owned(out)
}
