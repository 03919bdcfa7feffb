//! Secrets out of messages: the one function every ballast crate uses before
//! it prints, logs or records a URL.
//!
//! Database and gateway URLs carry credentials — `user:password@`, a token
//! as the user name, `?password=`, `?api_key=` — and end up in startup
//! lines, error messages, spans and metrics. [`redact_url`] keeps what an
//! operator needs to recognise the target (scheme, user name, host, port,
//! path, which parameters are set) and masks everything that can be secret.

/// The mask put in place of a secret.
const MASK: &str = "***";

/// `url` with its secrets masked: the password of the userinfo (and, for
/// `http`/`https`, a lone user name, the usual place of a token), and the
/// value of every query parameter and the fragment. Text that is not a URL
/// comes back as it is, apart from a query string, which is masked wherever
/// it appears.
///
/// ```
/// use ballast_vocab::redact_url;
///
/// assert_eq!(redact_url("postgres://app:s3cret@db:5432/q?sslmode=require"), "postgres://app:***@db:5432/q?sslmode=***");
/// assert_eq!(redact_url("https://ghp_token@api.example/v1?key=abc&debug"), "https://***@api.example/v1?key=***&debug");
/// assert_eq!(redact_url("sqlite://tasks.db"), "sqlite://tasks.db");
/// ```
pub fn redact_url(url: &str) -> String {
    let (before_fragment, fragment) = match url.split_once('#') {
        Some((head, _)) => (head, Some(MASK)),
        None => (url, None),
    };
    let (target, query) = match before_fragment.split_once('?') {
        Some((target, query)) => (target, Some(query)),
        None => (before_fragment, None),
    };
    let mut out = redact_authority(target);
    if let Some(query) = query {
        out.push('?');
        let pairs = query.split('&').map(|pair| match pair.split_once('=') {
            Some((name, _)) => format!("{name}={MASK}"),
            None => pair.to_owned(),
        });
        out.push_str(&pairs.collect::<Vec<_>>().join("&"));
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// Masks the userinfo's secret in `scheme://userinfo@host…` (no query).
fn redact_authority(target: &str) -> String {
    let Some((scheme, rest)) = target.split_once("://") else { return target.to_owned() };
    let end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else { return target.to_owned() };
    let userinfo = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:{MASK}"),
        None if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") => {
            MASK.to_owned()
        }
        None => userinfo.to_owned(),
    };
    format!("{scheme}://{userinfo}@{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_tokens_and_query_values_are_masked() {
        assert_eq!(redact_url("postgres://app:s3cret@db:5432/q"), "postgres://app:***@db:5432/q");
        assert_eq!(redact_url("postgres://app@db/q"), "postgres://app@db/q");
        assert_eq!(redact_url("sqlite://tasks.db"), "sqlite://tasks.db");
        assert_eq!(
            redact_url("postgres://db/q?user=app&password=s3cret"),
            "postgres://db/q?user=***&password=***"
        );
        assert_eq!(redact_url("sqlite:tasks.db?mode=rwc"), "sqlite:tasks.db?mode=***");
        assert_eq!(redact_url("https://u:p@host/x?token=t#frag"), "https://u:***@host/x?token=***#***");
        assert_eq!(redact_url("http://TOKEN@host"), "http://***@host");
        // An '@' in the path is not userinfo.
        assert_eq!(redact_url("https://host/users/@me"), "https://host/users/@me");
        assert_eq!(redact_url("not a url"), "not a url");
        assert_eq!(redact_url(""), "");
    }

    #[test]
    fn nothing_secret_survives_in_any_shape() {
        for url in [
            "postgres://app:s3cret@db/q",
            "postgresql://app:s3cret@[::1]:5432/q?sslmode=require&password=s3cret",
            "https://s3cret@h",
            "https://a:s3cret@h:1/p?q=s3cret#s3cret",
            "sqlite://x.db?key=s3cret",
            "postgres://app:s3cret@db/q?x=1#s3cret",
        ] {
            assert!(!redact_url(url).contains("s3cret"), "{url} → {}", redact_url(url));
        }
    }
}
