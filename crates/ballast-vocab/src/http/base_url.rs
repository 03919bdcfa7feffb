//! A system's base URL, parsed one way for the client and for `ballast lint`,
//! so a URL that lints clean is one `ballast serve` accepts.

use url::Url;

/// A base URL the client cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid base URL {url:?}: {reason}; use an absolute http:// or https:// URL")]
pub struct InvalidBaseUrl {
    /// The URL given, its secrets masked ([`crate::redact_url`]).
    pub url: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Parses a system's base URL as the HTTP client does: an absolute
/// `http://` or `https://` URL that can be a base, without query or
/// fragment.
///
/// ```
/// use ballast_vocab::http::parse_base_url;
///
/// assert!(parse_base_url("http://x").is_ok());
/// for bad in ["http://[::1", "http://host:99999", "http://a b", "https://h/?q=1", "ftp://h", "h.example"] {
///     assert!(parse_base_url(bad).is_err(), "{bad}");
/// }
/// ```
pub fn parse_base_url(url: &str) -> Result<Url, InvalidBaseUrl> {
    let invalid = |reason: String| InvalidBaseUrl { url: crate::redact_url(url), reason };
    let base = Url::parse(url).map_err(|e| invalid(e.to_string()))?;
    if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
        return Err(invalid(format!("scheme {:?} is not http or https", base.scheme())));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(invalid("a base URL takes no query or fragment".into()));
    }
    Ok(base)
}
