//! How a system is reached: `[systems.NAME.tls]` (roots, CA file, client
//! certificate, server name, versions), `proxy` and `proxy_auth_env`,
//! `http2`, and `[systems.NAME.auth]` (an OAuth 2.0 client credentials
//! grant) — their keys, their rules, and the settings the composition root
//! builds the transport from. The TLS files are read here with the same
//! code the client reads them with (`ballast-tls`), so lint refuses what
//! `ballast serve` would; secrets are named by their variables, never read
//! into a finding.

use std::path::Path;
use std::time::{Duration, SystemTime};

use ballast::Severity;
use ballast_tls::{IdentityFiles, Roots, Secret, TlsError, TlsSettings, TlsVersion, EXPIRY_WARNING};
use serde::Deserialize;

use super::System;
use crate::alerts::is_env_name;
use crate::duration::ConfigDuration;
use crate::finding::{system_path, KeyFinding};
use crate::schema::Schema::{self, Table, Value};

/// `[systems.NAME.tls]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct TlsSection {
    /// `ca_file`: a PEM bundle of CA certificates trusted besides `roots`
    /// (a path relative to the configuration file's directory).
    pub ca_file: Option<String>,
    /// `roots`: `"mozilla"` (default), `"system"` (the OS store) or
    /// `"none"` (only `ca_file`).
    pub roots: Option<String>,
    /// `cert_file`: the client certificate chain (PEM), with `key_file`.
    pub cert_file: Option<String>,
    /// `key_file`: the client certificate's private key (PEM; RSA, ECDSA or Ed25519).
    pub key_file: Option<String>,
    /// `pkcs12_file`: the client identity as a PKCS#12 bundle, instead of
    /// `cert_file` and `key_file`.
    pub pkcs12_file: Option<String>,
    /// `pkcs12_password_env`: the variable holding the bundle's password.
    pub pkcs12_password_env: Option<String>,
    /// `server_name`: the name sent as SNI and verified, when the URL gives an address.
    pub server_name: Option<String>,
    /// `min_version`: `"1.2"` (default) or `"1.3"`.
    pub min_version: Option<String>,
}

/// `[systems.NAME.auth]`: how the system's requests are authorized.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct AuthSection {
    /// `kind`: `"oauth2"` (client credentials grant).
    pub kind: Option<String>,
    /// `token_url`: the token endpoint.
    pub token_url: Option<String>,
    /// `client_id_env`: the variable holding the client id.
    pub client_id_env: Option<String>,
    /// `client_secret_env`: the variable holding the client secret (not
    /// with `client_auth = "tls"`).
    pub client_secret_env: Option<String>,
    /// `scope`: the scope asked for.
    pub scope: Option<String>,
    /// `audience`: the audience asked for.
    pub audience: Option<String>,
    /// `client_auth`: `"basic"` (default), `"body"` or `"tls"` (the
    /// system's client certificate, RFC 8705).
    pub client_auth: Option<String>,
    /// `timeout`: the token endpoint's timeout (default 5 s).
    pub timeout: Option<ConfigDuration>,
}

pub(crate) const TLS_KEYS: &[(&str, Schema)] = &[
    ("ca_file", Value),
    ("roots", Value),
    ("cert_file", Value),
    ("key_file", Value),
    ("pkcs12_file", Value),
    ("pkcs12_password_env", Value),
    ("server_name", Value),
    ("min_version", Value),
];

pub(crate) const AUTH_KEYS: &[(&str, Schema)] = &[
    ("kind", Value),
    ("token_url", Value),
    ("client_id_env", Value),
    ("client_secret_env", Value),
    ("scope", Value),
    ("audience", Value),
    ("client_auth", Value),
    ("timeout", Value),
];

/// The `[systems.NAME]` keys of this module, for the schema.
pub(crate) const KEYS: [(&str, Schema); 5] = [
    ("tls", Table(TLS_KEYS)),
    ("proxy", Value),
    ("proxy_auth_env", Value),
    ("http2", Value),
    ("auth", Table(AUTH_KEYS)),
];

/// Where a system's connections go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxySetting {
    /// No `proxy`: `HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY` decide.
    Environment,
    /// `proxy = "none"`.
    Direct,
    /// `proxy = "http://host:port"`.
    Url(String),
}

/// `[systems.NAME.auth]`, checked: an OAuth 2.0 client credentials grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthSettings {
    /// `token_url`.
    pub token_url: String,
    /// `client_id_env`.
    pub client_id_env: String,
    /// `client_secret_env` (none with `client_auth = "tls"`).
    pub client_secret_env: Option<String>,
    /// `scope`.
    pub scope: Option<String>,
    /// `audience`.
    pub audience: Option<String>,
    /// `client_auth`: `"basic"`, `"body"` or `"tls"`.
    pub client_auth: String,
    /// `timeout`, if given.
    pub timeout: Option<Duration>,
}

/// How a system is reached, as its section declares it; secrets named by
/// their variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// `[systems.NAME.tls]`, its paths taken from the configuration's
    /// directory; a PKCS#12 password is left empty, to be read from
    /// `pkcs12_password_env`.
    pub tls: Option<TlsSettings>,
    /// `tls.pkcs12_password_env`.
    pub pkcs12_password_env: Option<String>,
    /// `proxy`.
    pub proxy: ProxySetting,
    /// `proxy_auth_env`: the variable holding `user:password` for the proxy.
    pub proxy_auth_env: Option<String>,
    /// `http2`: whether HTTP/2 is offered by ALPN (`"auto"`, the default).
    pub http2: bool,
    /// `[systems.NAME.auth]`.
    pub oauth2: Option<OAuthSettings>,
}

/// `sys`'s connection settings (paths from `dir`); values lint refuses are
/// read as their defaults.
pub(crate) fn settings(dir: &Path, sys: &System) -> ConnectionSettings {
    let tls = sys.tls.as_ref().map(|t| tls_settings(t, &Secret::default()).relative_to(dir));
    ConnectionSettings {
        tls,
        pkcs12_password_env: sys.tls.as_ref().and_then(|t| t.pkcs12_password_env.clone()),
        proxy: match sys.proxy.as_deref() {
            None => ProxySetting::Environment,
            Some("none") => ProxySetting::Direct,
            Some(url) => ProxySetting::Url(url.to_owned()),
        },
        proxy_auth_env: sys.proxy_auth_env.clone(),
        http2: sys.http2.as_deref() != Some("never"),
        oauth2: sys.auth.as_ref().map(|a| OAuthSettings {
            token_url: a.token_url.clone().unwrap_or_default(),
            client_id_env: a.client_id_env.clone().unwrap_or_default(),
            client_secret_env: a.client_secret_env.clone(),
            scope: a.scope.clone(),
            audience: a.audience.clone(),
            client_auth: a.client_auth.clone().unwrap_or_else(|| "basic".to_owned()),
            timeout: a.timeout.map(ConfigDuration::get),
        }),
    }
}

fn tls_settings(t: &TlsSection, password: &Secret) -> TlsSettings {
    let identity = match (&t.cert_file, &t.key_file, &t.pkcs12_file) {
        (Some(cert), Some(key), _) => Some(IdentityFiles::pem(cert, key)),
        (_, _, Some(bundle)) => Some(IdentityFiles::pkcs12(bundle, password.clone())),
        _ => None,
    };
    TlsSettings {
        roots: t.roots.as_deref().and_then(|r| r.parse().ok()).unwrap_or_default(),
        ca_file: t.ca_file.as_ref().map(Into::into),
        identity,
        server_name: t.server_name.clone(),
        min_version: t.min_version.as_deref().and_then(|v| v.parse().ok()).unwrap_or_default(),
    }
}

/// How `sys` is reached, in one line for `ballast explain`, when its
/// section says anything of it: files and variables by name, no secret.
pub(crate) fn explain(sys: &System) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(t) = &sys.tls {
        let roots = t.roots.as_deref().unwrap_or("mozilla");
        let mut tls = match &t.ca_file {
            Some(ca) => format!("TLS trusting {roots} roots and {ca}"),
            None => format!("TLS trusting {roots} roots"),
        };
        match (&t.cert_file, &t.pkcs12_file) {
            (Some(cert), _) => tls.push_str(&format!(", client certificate {cert}")),
            (None, Some(bundle)) => tls.push_str(&format!(", client certificate in {bundle}")),
            _ => {}
        }
        if let Some(name) = &t.server_name {
            tls.push_str(&format!(", verified as {name}"));
        }
        if let Some(v) = &t.min_version {
            tls.push_str(&format!(", TLS {v} or newer"));
        }
        parts.push(tls);
    }
    match sys.proxy.as_deref() {
        Some("none") => parts.push("no proxy".to_owned()),
        Some(url) => {
            let auth =
                sys.proxy_auth_env.as_deref().map(|v| format!(" (credentials from {v})")).unwrap_or_default();
            parts.push(format!("through proxy {}{auth}", ballast::redact_url(url)));
        }
        None if sys.tls.is_some() || sys.auth.is_some() => {
            parts.push("the environment's proxy (HTTPS_PROXY, NO_PROXY)".to_owned());
        }
        None => {}
    }
    if sys.http2.as_deref() == Some("never") {
        parts.push("HTTP/1.1 only".to_owned());
    }
    if let Some(a) = &sys.auth {
        let how = a.client_auth.as_deref().unwrap_or("basic");
        let url = a.token_url.as_deref().map(ballast::redact_url).unwrap_or_default();
        parts.push(format!(
            "OAuth 2.0 token from {url} (client {how}), renewed before it expires, a 401 renewing it and resending once"
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Every finding about how `name` is reached.
pub(crate) fn rules(dir: &Path, name: &str, sys: &System) -> Vec<KeyFinding> {
    let mut out = Vec::new();
    if let Some(tls) = &sys.tls {
        out.extend(tls_rules(dir, name, sys, tls));
    }
    out.extend(proxy_rules(name, sys));
    if let Some(h2) = sys.http2.as_deref().filter(|h| !matches!(*h, "auto" | "never")) {
        out.push(KeyFinding::error(
            None,
            system_path(name, &["http2"]),
            format!("http2 = \"{h2}\" is not one of auto, never"),
            "leave it out (\"auto\": HTTP/2 when the server offers it by ALPN) or write \"never\"",
        ));
    }
    if let Some(auth) = &sys.auth {
        out.extend(auth_rules(name, sys, auth));
    }
    out
}

fn env_name(name: &str, key: &[&str], var: &str, holds: &str) -> Option<KeyFinding> {
    (!is_env_name(var)).then(|| {
        KeyFinding::error(
            None,
            system_path(name, key),
            format!("`{}` = \"{var}\" is not an environment variable name", key.join(".")),
            format!("name the variable that holds {holds} (never the value itself)"),
        )
    })
}

fn tls_rules(dir: &Path, name: &str, sys: &System, t: &TlsSection) -> Vec<KeyFinding> {
    let at = |key: &str| system_path(name, &["tls", key]);
    let mut out = Vec::new();
    let roots = match t.roots.as_deref().map(str::parse::<Roots>) {
        Some(Err(e)) => {
            out.push(KeyFinding::error(
                None,
                at("roots"),
                format!("roots: {e}"),
                "write \"mozilla\", \"system\" or \"none\"",
            ));
            None
        }
        Some(Ok(roots)) => Some(roots),
        None => None,
    };
    if roots == Some(Roots::None) && t.ca_file.is_none() {
        out.push(KeyFinding::error(
            None,
            at("roots"),
            "roots = \"none\" trusts only the ca_file, and there is none: no server could be trusted"
                .to_owned(),
            "add ca_file = \"…\" with the system's CA (PEM), or leave roots out",
        ));
    }
    if let Some(Err(e)) = t.min_version.as_deref().map(str::parse::<TlsVersion>) {
        out.push(KeyFinding::error(
            None,
            at("min_version"),
            format!("min_version: {e}"),
            "write \"1.2\" or \"1.3\"",
        ));
    }
    if let Some(server_name) = &t.server_name {
        let bare = server_name.trim_start_matches('[').trim_end_matches(']').to_owned();
        if ballast_tls::rustls::pki_types::ServerName::try_from(bare).is_err() {
            out.push(KeyFinding::error(
                None,
                at("server_name"),
                format!("server_name \"{server_name}\" is not a DNS name or an IP address"),
                "write the name the system's certificate is for, e.g. \"api.bank.example\"",
            ));
        }
    }
    match (&t.cert_file, &t.key_file, &t.pkcs12_file) {
        (Some(_), None, _) => out.push(KeyFinding::error(
            None,
            at("cert_file"),
            "cert_file without key_file: a client certificate is presented with its private key".to_owned(),
            "add key_file = \"…\" (PEM)",
        )),
        (None, Some(_), _) => out.push(KeyFinding::error(
            None,
            at("key_file"),
            "key_file without cert_file: a private key is presented with its certificate".to_owned(),
            "add cert_file = \"…\" (PEM)",
        )),
        (Some(_), Some(_), Some(_)) => out.push(KeyFinding::error(
            None,
            at("pkcs12_file"),
            "both cert_file/key_file and pkcs12_file: a system presents one client identity".to_owned(),
            "keep one: cert_file and key_file, or pkcs12_file",
        )),
        _ => {}
    }
    if t.pkcs12_password_env.is_some() && t.pkcs12_file.is_none() {
        out.push(KeyFinding::error(
            None,
            at("pkcs12_password_env"),
            "pkcs12_password_env without pkcs12_file".to_owned(),
            "add pkcs12_file = \"…\", or remove pkcs12_password_env",
        ));
    }
    if let Some(var) = &t.pkcs12_password_env {
        out.extend(env_name(name, &["tls", "pkcs12_password_env"], var, "the bundle's password"));
    }
    if sys.base_url.as_deref().is_some_and(|u| u.starts_with("http://")) && t.server_name.is_some() {
        out.push(KeyFinding::at(
            None,
            Severity::Warning,
            at("server_name"),
            format!("`{name}`'s base_url is http://: server_name is used only over TLS"),
            "write the base_url with https://, or remove server_name",
        ));
    }
    if out.iter().any(|f| f.severity == Severity::Error) {
        return out;
    }
    out.extend(files(dir, name, t));
    out
}

/// The files themselves, read as the client reads them.
fn files(dir: &Path, name: &str, t: &TlsSection) -> Vec<KeyFinding> {
    let at = |key: &str| system_path(name, &["tls", key]);
    let mut out = Vec::new();
    let password = match &t.pkcs12_password_env {
        None => Some(Secret::default()),
        Some(var) => std::env::var(var).ok().map(Secret::new),
    };
    let settings = tls_settings(t, password.as_ref().unwrap_or(&Secret::default())).relative_to(dir);
    if let Some(ca) = &settings.ca_file {
        if let Err(e) = ballast_tls::read_ca_file(ca) {
            out.push(KeyFinding::error(
                None,
                at("ca_file"),
                e.to_string(),
                "give a readable PEM bundle of the system's CA certificates",
            ));
        }
    }
    let Some(identity) = &settings.identity else { return out };
    if password.is_none() && t.pkcs12_file.is_some() {
        let var = t.pkcs12_password_env.as_deref().unwrap_or_default();
        out.push(KeyFinding::at(
            None,
            Severity::Warning,
            at("pkcs12_file"),
            format!("{var} is not set here, so the bundle could not be opened and checked"),
            format!("run `ballast lint` where {var} is set, as `ballast serve` will be"),
        ));
        return out;
    }
    let read = identity.read();
    let (key, help) = match &read {
        Ok(_) => ("cert_file", ""),
        Err(TlsError::KeyMismatch { .. } | TlsError::NoKey { .. } | TlsError::UnsupportedKey { .. }) => {
            ("key_file", "give the private key of cert_file's certificate (PEM: PKCS#8, PKCS#1 or SEC1)")
        }
        Err(TlsError::Pkcs12 { .. }) => {
            ("pkcs12_file", "check the bundle and the password pkcs12_password_env names")
        }
        Err(TlsError::Unreadable { path, .. })
            if Some(path.as_path()) != identity.files().first().copied() =>
        {
            ("key_file", "give a readable file")
        }
        Err(_) => ("cert_file", "give the client certificate chain (PEM), the client's certificate first"),
    };
    let key = if t.pkcs12_file.is_some() { "pkcs12_file" } else { key };
    match read {
        Err(e) => out.push(KeyFinding::error(None, at(key), e.to_string(), help)),
        Ok(identity) => {
            let secret = if t.pkcs12_file.is_some() { "pkcs12_file" } else { "key_file" };
            if let Some(file) = identity_secret_file(&settings).filter(|f| readable_by_others(f)) {
                out.push(KeyFinding::at(
                    None,
                    Severity::Warning,
                    at(secret),
                    format!("{} holds a private key and others on this machine can read it", file.display()),
                    format!("chmod 600 {}", file.display()),
                ));
            }
            let now = SystemTime::now();
            let end = humantime::format_rfc3339_seconds(identity.facts.not_after);
            if identity.facts.expired(now) {
                out.push(KeyFinding::error(
                    None,
                    at(key),
                    format!("the client certificate ({}) expired on {end}: the system will refuse it", identity.facts.subject),
                    "renew it with the system's CA and replace the file (ballast serve takes a new file without a restart)",
                ));
            } else if identity.facts.remaining(now) < EXPIRY_WARNING {
                let days = identity.facts.remaining(now).as_secs() / 86_400;
                out.push(KeyFinding::at(
                    None,
                    Severity::Warning,
                    at(key),
                    format!(
                        "the client certificate ({}) expires on {end}, in {days} day(s): after that the system refuses every call",
                        identity.facts.subject
                    ),
                    "renew it now and replace the file; ballast serve takes a new file without a restart",
                ));
            }
        }
    }
    out
}

/// The file the client's private key is in.
fn identity_secret_file(settings: &TlsSettings) -> Option<&Path> {
    match settings.identity.as_ref()? {
        IdentityFiles::Pem { key, .. } => Some(key),
        IdentityFiles::Pkcs12 { file, .. } => Some(file),
    }
}

/// Whether users other than the file's owner may read it.
#[cfg(unix)]
fn readable_by_others(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o044 != 0)
}

#[cfg(not(unix))]
fn readable_by_others(_: &Path) -> bool {
    false
}

fn proxy_rules(name: &str, sys: &System) -> Vec<KeyFinding> {
    let mut out = Vec::new();
    match sys.proxy.as_deref() {
        None | Some("none") => {}
        Some(url) => {
            let uri = url.parse::<http::Uri>().ok();
            let reason = match &uri {
                None => Some("it is not a URL"),
                Some(u) if u.scheme_str() != Some("http") => {
                    Some("only http:// proxies are spoken to (a tunnel to an https system is TLS end to end)")
                }
                Some(u) if u.authority().is_some_and(|a| a.as_str().contains('@')) => {
                    Some("credentials do not go in the file")
                }
                Some(u) if u.host().is_none_or(str::is_empty) => Some("it names no host"),
                Some(_) => None,
            };
            if let Some(reason) = reason {
                out.push(KeyFinding::error(
                    None,
                    system_path(name, &["proxy"]),
                    format!("proxy \"{}\": {reason}", ballast::redact_url(url)),
                    "write proxy = \"http://host:port\" (credentials in proxy_auth_env), or \"none\"",
                ));
            }
        }
    }
    if let Some(var) = &sys.proxy_auth_env {
        if sys.proxy.as_deref().is_none_or(|p| p == "none") {
            out.push(KeyFinding::error(
                None,
                system_path(name, &["proxy_auth_env"]),
                "proxy_auth_env without proxy = \"http://…\": the environment's proxy carries its own credentials (HTTPS_PROXY=http://user:password@host:port)".to_owned(),
                "add proxy = \"http://host:port\", or remove proxy_auth_env",
            ));
        }
        out.extend(env_name(name, &["proxy_auth_env"], var, "user:password for the proxy"));
    }
    out
}

fn auth_rules(name: &str, sys: &System, a: &AuthSection) -> Vec<KeyFinding> {
    let at = |key: &str| system_path(name, &["auth", key]);
    let mut out = Vec::new();
    match a.kind.as_deref() {
        Some("oauth2") => {}
        Some(other) => out.push(KeyFinding::error(
            None,
            at("kind"),
            format!("auth kind \"{other}\" is not one ballast speaks"),
            "write kind = \"oauth2\" (client credentials); a static credential goes in [systems.NAME.headers]",
        )),
        None => out.push(KeyFinding::error(
            None,
            system_path(name, &["auth"]),
            "[auth] names no kind".to_owned(),
            "write kind = \"oauth2\"",
        )),
    }
    match a.token_url.as_deref() {
        None => out.push(KeyFinding::error(
            None,
            system_path(name, &["auth"]),
            "[auth] has no token_url".to_owned(),
            "write token_url = \"https://…/oauth/token\"",
        )),
        Some(url) => {
            let uri = url.parse::<http::Uri>().ok().filter(|u| {
                matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some_and(|h| !h.is_empty())
            });
            match uri {
                None => out.push(KeyFinding::error(
                    None,
                    at("token_url"),
                    format!(
                        "token_url \"{}\" is not an absolute http:// or https:// URL",
                        ballast::redact_url(url)
                    ),
                    "write the token endpoint's URL",
                )),
                Some(u) if u.scheme_str() == Some("http") && !is_loopback(u.host().unwrap_or_default()) => {
                    out.push(KeyFinding::at(
                        None,
                        Severity::Warning,
                        at("token_url"),
                        "token_url is http://: the client secret and the tokens cross the network in clear"
                            .to_owned(),
                        "use the endpoint's https:// URL",
                    ));
                }
                Some(_) => {}
            }
        }
    }
    match a.client_id_env.as_deref() {
        None => out.push(KeyFinding::error(
            None,
            system_path(name, &["auth"]),
            "[auth] has no client_id_env".to_owned(),
            "write client_id_env = \"VARIABLE\" naming the variable that holds the client id",
        )),
        Some(var) => out.extend(env_name(name, &["auth", "client_id_env"], var, "the client id")),
    }
    let how = a.client_auth.as_deref().unwrap_or("basic");
    if !matches!(how, "basic" | "body" | "tls") {
        out.push(KeyFinding::error(
            None,
            at("client_auth"),
            format!("client_auth \"{how}\" is not one of basic, body, tls"),
            "write \"basic\" (the default), \"body\" or \"tls\" (the system's client certificate, RFC 8705)",
        ));
    }
    match (how, a.client_secret_env.as_deref()) {
        ("tls", Some(_)) => out.push(KeyFinding::at(
            None,
            Severity::Warning,
            at("client_secret_env"),
            "client_auth = \"tls\" authenticates by the client certificate: client_secret_env is not sent".to_owned(),
            "remove client_secret_env",
        )),
        ("tls", None) => {}
        (_, None) => out.push(KeyFinding::error(
            None,
            system_path(name, &["auth"]),
            format!("[auth] client_auth = \"{how}\" needs client_secret_env"),
            "write client_secret_env = \"VARIABLE\", or client_auth = \"tls\" to authenticate by the client certificate",
        )),
        (_, Some(var)) => out.extend(env_name(name, &["auth", "client_secret_env"], var, "the client secret")),
    }
    let identity = sys.tls.as_ref().is_some_and(|t| t.cert_file.is_some() || t.pkcs12_file.is_some());
    if how == "tls" && !identity {
        out.push(KeyFinding::error(
            None,
            at("client_auth"),
            "client_auth = \"tls\" authenticates by the system's client certificate, and it has none"
                .to_owned(),
            "add cert_file and key_file (or pkcs12_file) to [systems.NAME.tls]",
        ));
    }
    if sys.headers.iter().flatten().any(|(h, _)| h.eq_ignore_ascii_case("authorization")) {
        out.push(KeyFinding::error(
            None,
            system_path(name, &["headers", "Authorization"]),
            "[headers] Authorization beside [auth]: every request carries the grant's token instead"
                .to_owned(),
            "remove one: the static header, or [auth]",
        ));
    }
    if a.timeout.is_some_and(|t| t.get().is_zero()) {
        out.push(KeyFinding::error(
            None,
            at("timeout"),
            "`auth.timeout` is zero: no token could be had".to_owned(),
            "use e.g. \"5s\"",
        ));
    }
    out
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
