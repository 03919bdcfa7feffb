//! A system's base URL, taken apart once, and each request's URI made from
//! it and the request's path and query.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use http::header::HeaderValue;
use http::HeaderMap;
use url::Url;

use crate::request::Head;
use crate::{HttpError, SystemBuildError};

/// A system's base URL, taken apart once: a request's URI is its scheme and
/// authority, the base path, then the request's path and query — no URL is
/// parsed per request.
#[derive(Debug)]
pub(super) struct Base {
    pub(super) url: Url,
    pub(super) scheme: http::uri::Scheme,
    pub(super) authority: http::uri::Authority,
    /// Without its trailing `/`.
    path: String,
}

/// What a path may hold unencoded: the URL standard's path set (controls,
/// space, `"`, `#`, `<`, `>`, `?`, `` ` ``, `{`, `}` are encoded; `%` is
/// left as it is, a path may already be encoded).
const PATH: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

impl Base {
    /// The base of `url`; its userinfo, if any, becomes `Authorization:
    /// Basic` in `headers` (as browsers and reqwest do), never part of the URI.
    pub(super) fn new(url: &Url, headers: &mut HeaderMap) -> Result<Self, SystemBuildError> {
        let invalid = |reason: String| SystemBuildError::InvalidBaseUrl {
            url: ballast::redact_url(url.as_str()),
            reason,
        };
        if !url.username().is_empty() && !headers.contains_key(http::header::AUTHORIZATION) {
            let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned();
            let pair =
                format!("{}:{}", decode(url.username()), url.password().map(decode).unwrap_or_default());
            let mut value = HeaderValue::try_from(format!("Basic {}", BASE64.encode(pair)))
                .map_err(|e| invalid(format!("its userinfo: {e}")))?;
            value.set_sensitive(true);
            headers.insert(http::header::AUTHORIZATION, value);
        }
        let host = url.host_str().ok_or_else(|| invalid("it has no host".into()))?;
        let authority = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        Ok(Self {
            scheme: url.scheme().parse().map_err(|e: http::uri::InvalidUri| invalid(e.to_string()))?,
            authority: authority.parse().map_err(|e: http::uri::InvalidUri| invalid(e.to_string()))?,
            path: url.path().trim_end_matches('/').to_owned(),
            url: url.clone(),
        })
    }

    /// `location` (absolute, or relative to the URL of a request to
    /// `request_path`) as a path relative to the base URL and its query,
    /// if it is under the base URL: same scheme, host and port, and the
    /// base path.
    #[cfg(feature = "queue")]
    pub(super) fn under(&self, request_path: &str, location: &str) -> Option<(String, Option<String>)> {
        let request =
            self.url.join(&format!("{}/{}", self.path, request_path.trim_start_matches('/'))).ok()?;
        let target = request.join(location).ok()?;
        let same_origin = target.scheme() == self.url.scheme()
            && target.host_str() == self.url.host_str()
            && target.port_or_known_default() == self.url.port_or_known_default();
        if !same_origin {
            return None;
        }
        let rest = target.path().strip_prefix(&self.path)?;
        let rest = if rest.is_empty() { rest } else { rest.strip_prefix('/')? };
        Some((rest.to_owned(), target.query().map(str::to_owned)))
    }

    /// The URI of `head`: the base path and the request's path (an empty
    /// path is the base URL itself, as given), then its query.
    pub(super) fn uri(&self, head: &Head) -> Result<http::Uri, HttpError> {
        let mut target = String::with_capacity(self.path.len() + head.path.len() + 16);
        if head.path.is_empty() {
            target.push_str(self.url.path());
        } else {
            target.push_str(&self.path);
            target.push('/');
            target.extend(percent_encoding::utf8_percent_encode(head.path.trim_start_matches('/'), PATH));
        }
        let mut separator = '?';
        if let Some(raw) = &head.raw_query {
            target.push(separator);
            target.push_str(raw);
            separator = '&';
        }
        if !head.query.is_empty() {
            target.push(separator);
            let mut query = form_urlencoded::Serializer::new(String::new());
            query.extend_pairs(&head.query);
            target.push_str(&query.finish());
        }
        let path_and_query = http::uri::PathAndQuery::try_from(target)
            .map_err(|e| HttpError::invalid(format!("path or query: {e}")))?;
        http::Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path_and_query)
            .build()
            .map_err(|e| HttpError::invalid(format!("URI: {e}")))
    }
}
