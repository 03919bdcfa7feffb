//! Paths that could leave the base URL: a `.` or `..` segment in any
//! spelling some server resolves, looked for through every decoding a
//! server or a proxy in front of it may apply. A request with one is
//! refused before it is sent.

/// How many rounds of percent-decoding a path is looked through: a server
/// (or each proxy and framework in front of it) may decode once more than
/// we do. A path still changing after this many is refused: no honest path
/// is encoded that deep.
const DECODINGS: usize = 8;

/// Whether `path`, or any of its decodings, has a `.` or `..` segment in a
/// spelling some server resolves: raw or percent-encoded in any case and at
/// any depth (`%2e%2E`, `%252e`, `%2525252e`), mixed (`.%2e`), as IIS's
/// `%u002e` or overlong UTF-8 (`%c0%ae`), separated by `/` or `\` (also
/// encoded), followed by `;params`, padded with what servers trim (`..%00`,
/// `..%09`, `%2e%2e%20`), or more dots than two (`...`, which Windows
/// trims to `..`). Any of them may make the system resolve the path above
/// the base URL's.
///
/// ```text
/// orders/7            fine
/// pay/%2e%2e/admin    refused (and ../, .%2e, %2E%2E, ..\, ..;/, %252e%252e, %c0%ae%c0%ae, ..%00, ...)
/// ```
pub(crate) fn has_dot_segment(path: &str) -> bool {
    let mut text = std::borrow::Cow::Borrowed(path.as_bytes());
    for _ in 0..=DECODINGS {
        if dotted(&text) {
            return true;
        }
        // Nothing left to decode: most paths never get past the first round.
        if !text.contains(&b'%') {
            return false;
        }
        let decoded = decode(&text);
        if decoded == *text {
            return false;
        }
        text = std::borrow::Cow::Owned(decoded);
    }
    true
}

/// Whether a segment of `path` is dots alone, once what servers trim
/// (spaces, controls, `;params`) is trimmed.
fn dotted(path: &[u8]) -> bool {
    path.split(|b| *b == b'/' || *b == b'\\').any(|segment| {
        let segment = segment.split(|b| *b == b';').next().unwrap_or_default();
        let trimmed = |b: &u8| b.is_ascii_whitespace() || b.is_ascii_control();
        let start = segment.iter().position(|b| !trimmed(b)).unwrap_or(segment.len());
        let end = segment.iter().rposition(|b| !trimmed(b)).map_or(start, |i| i + 1);
        let core = &segment[start..end];
        core.contains(&b'.') && core.iter().all(|b| *b == b'.' || *b == b' ')
    })
}

/// One round of decoding as servers have done it: `%XX`, IIS's `%uXXXX`,
/// and overlong UTF-8 forms of ASCII (`%c0%ae` is `.` to a decoder that
/// does not refuse them) folded to the character.
fn decode(text: &[u8]) -> Vec<u8> {
    let hex = |digits: &[u8]| std::str::from_utf8(digits).ok().and_then(|d| u32::from_str_radix(d, 16).ok());
    let mut bytes = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let escape = (text[i] == b'%').then(|| &text[i + 1..]);
        match escape {
            Some([b'u' | b'U', rest @ ..])
                if rest.len() >= 4 && hex(&rest[..4]).is_some_and(|c| c < 0x80) =>
            {
                bytes.push(hex(&rest[..4]).unwrap_or_default() as u8);
                i += 6;
            }
            Some(rest) if rest.len() >= 2 && hex(&rest[..2]).is_some() => {
                bytes.push(hex(&rest[..2]).unwrap_or_default() as u8);
                i += 3;
            }
            _ => {
                bytes.push(text[i]);
                i += 1;
            }
        }
    }
    fold_overlong(bytes)
}

/// `bytes` with each overlong UTF-8 encoding of an ASCII character (two to
/// four bytes for what one says) replaced by the character.
fn fold_overlong(bytes: Vec<u8>) -> Vec<u8> {
    if !bytes.iter().any(|b| matches!(b, 0xC0 | 0xC1 | 0xE0 | 0xF0)) {
        return bytes;
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let len = match bytes[i] {
            0xC0 | 0xC1 => 2,
            0xE0 => 3,
            0xF0 => 4,
            _ => 1,
        };
        let tail = bytes.get(i + 1..i + len).filter(|t| t.iter().all(|b| b & 0xC0 == 0x80));
        let code = tail.map(|tail| {
            let lead = u32::from(bytes[i]) & (0x7F >> len);
            tail.iter().fold(lead, |code, b| code << 6 | u32::from(b & 0x3F))
        });
        match code {
            Some(code) if len > 1 && code < 0x80 => {
                out.push(code as u8);
                i += len;
            }
            _ => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::has_dot_segment;

    #[test]
    fn dot_segments_are_found_in_every_spelling() {
        for bad in [
            "..",
            "../admin",
            "pay/../../admin/refund",
            "pay/%2e%2e/%2e%2e/admin/refund",
            "pay/%2E%2E/admin",
            "pay/.%2e/admin",
            "pay/%2e./admin",
            "pay/..\\admin",
            "pay\\..\\admin",
            "pay/..%5cadmin",
            "pay/..%2fadmin",
            "pay/..;/admin",
            "pay/%252e%252e/admin",
            "pay/./admin",
            "pay/%2e/admin",
            "/pay/..",
            // F1: deeper encodings, overlong UTF-8, IIS's %u, what servers trim.
            "pay/%2525252e%2525252e/admin",
            "pay/%c0%ae%c0%ae/admin",
            "pay/%C0%AE%C0%AE%c0%afadmin",
            "pay/%e0%80%ae%e0%80%ae/admin",
            "pay/%u002e%u002e/admin",
            "pay/..%00/admin",
            "pay/..%09/admin",
            "pay/%2e%2e%20/admin",
            "pay/.../admin",
            "pay/. ./admin",
            &format!("pay/%{}2e/admin", "25".repeat(12)),
        ] {
            assert!(has_dot_segment(bad), "{bad}");
        }
        for good in [
            "",
            "/",
            "payments",
            "orders/7",
            "a..b/c",
            ".well-known/x",
            "v1.2/items",
            "%2e%2ex",
            "a%20b",
            "caf%C3%A9",
            "%c0x",
        ] {
            assert!(!has_dot_segment(good), "{good}");
        }
    }
}
