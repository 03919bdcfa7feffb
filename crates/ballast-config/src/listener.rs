//! What `[serve]` and `[gateway]` share, as listeners of `ballast serve`:
//! an address, connection and header limits, a token beyond loopback, a
//! body read timeout, the `Host` names it answers to, its TLS files —
//! checked alike for both, and handed out as one [`ListenerSettings`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::alerts::is_env_name;
use crate::duration::display;
use crate::finding::KeyFinding;

/// How long a client may take to send a request's body, on both listeners,
/// unless `body_read_timeout` says otherwise (10 s: nginx's `client_body_timeout` is 60 s for the
/// open internet; a service on the same network needs far less).
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest `body_read_timeout` accepted: beyond it a slow client holds a
/// slot for as long as it likes.
pub(crate) const MAX_BODY_READ_TIMEOUT: Duration = Duration::from_secs(300);

/// `body_read_timeout` of a listener: above zero, at most 5 minutes.
fn body_timeout(section: &str, value: Option<crate::duration::ConfigDuration>) -> Vec<KeyFinding> {
    match value.map(|d| d.get()) {
        Some(d) if d.is_zero() || d > MAX_BODY_READ_TIMEOUT => vec![KeyFinding::error(
            None,
            vec![section.to_owned(), "body_read_timeout".to_owned()],
            format!(
                "`body_read_timeout` {} is outside 1ms..={}: a client sending its body slowly would {}",
                display(d),
                display(MAX_BODY_READ_TIMEOUT),
                if d.is_zero() { "never be read" } else { "hold a connection slot that long" }
            ),
            "use a few seconds, e.g. \"10s\" (the default)",
        )],
        _ => Vec::new(),
    }
}

/// The largest `max_body` accepted: bodies are buffered in memory.
pub(crate) const MAX_BODY_LIMIT: u64 = 1 << 30;

/// The keys every listener's section has, as its file gives them.
#[derive(Clone, Copy)]
pub(crate) struct Listener<'a> {
    pub(crate) listen: Option<&'a str>,
    pub(crate) max_connections: Option<u64>,
    pub(crate) header_read_timeout: Option<crate::duration::ConfigDuration>,
    pub(crate) body_read_timeout: Option<crate::duration::ConfigDuration>,
    pub(crate) token_env: Option<&'a str>,
    pub(crate) allowed_hosts: Option<&'a [String]>,
    pub(crate) tls_cert_file: Option<&'a str>,
    pub(crate) tls_key_file: Option<&'a str>,
}

/// The [`Listener`] of a section that holds the listener's keys under
/// their own names, as `[serve]` and `[gateway]` do.
macro_rules! listener_keys {
    ($section:expr) => {{
        let s = $section;
        $crate::listener::Listener {
            listen: s.listen.as_deref(),
            max_connections: s.max_connections,
            header_read_timeout: s.header_read_timeout,
            body_read_timeout: s.body_read_timeout,
            token_env: s.token_env.as_deref(),
            allowed_hosts: s.allowed_hosts.as_deref(),
            tls_cert_file: s.tls_cert_file.as_deref(),
            tls_key_file: s.tls_key_file.as_deref(),
        }
    }};
}
pub(crate) use listener_keys;

/// What every listener of `ballast serve` is: where it listens, the limits
/// it holds its clients to, who may call it, and how it speaks TLS. Both
/// [`ServeSettings`](crate::ServeSettings) and
/// [`GatewaySettings`](crate::GatewaySettings) hold one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSettings {
    /// The listener's address.
    pub listen: SocketAddr,
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// How long a client may take to send a request's body.
    pub body_read_timeout: Duration,
    /// The environment variable holding the token every request must bring
    /// (`Authorization: Bearer …`), if any.
    pub token_env: Option<String>,
    /// `Host` names the listener answers to besides `localhost`, the
    /// loopback addresses and its listen address; any other is answered 421.
    pub allowed_hosts: Vec<String>,
    /// The certificate chain and key files it speaks TLS with, relative
    /// paths taken from the configuration's directory.
    pub tls: Option<(PathBuf, PathBuf)>,
}

impl ListenerSettings {
    /// A listener on `listen` serving `max_connections` at once, with the
    /// defaults both listeners share: 5 s for headers,
    /// [`DEFAULT_BODY_READ_TIMEOUT`] for
    /// a body, no token, no other `Host` names, plain HTTP.
    pub fn on(listen: SocketAddr, max_connections: usize) -> Self {
        Self {
            listen,
            max_connections,
            header_read_timeout: Duration::from_secs(5),
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            token_env: None,
            allowed_hosts: Vec::new(),
            tls: None,
        }
    }
}

impl Listener<'_> {
    /// The settings these keys give over `defaults`; TLS files from `dir`,
    /// else `inherited` (the gateway speaks `[serve]`'s TLS unless it names
    /// its own).
    pub(crate) fn settings(
        self,
        defaults: ListenerSettings,
        dir: &Path,
        inherited: Option<(PathBuf, PathBuf)>,
    ) -> ListenerSettings {
        ListenerSettings {
            listen: self.listen.and_then(|l| l.parse().ok()).unwrap_or(defaults.listen),
            max_connections: count(self.max_connections).unwrap_or(defaults.max_connections),
            header_read_timeout: self.header_read_timeout.map_or(defaults.header_read_timeout, |d| d.get()),
            body_read_timeout: self.body_read_timeout.map_or(defaults.body_read_timeout, |d| d.get()),
            token_env: self.token_env.map(str::to_owned),
            allowed_hosts: self.allowed_hosts.map(<[String]>::to_vec).unwrap_or_default(),
            tls: self.tls_files(dir).or(inherited),
        }
    }

    /// Its TLS files, from `dir`, when it names both.
    pub(crate) fn tls_files(self, dir: &Path) -> Option<(PathBuf, PathBuf)> {
        Some((dir.join(self.tls_cert_file?), dir.join(self.tls_key_file?)))
    }
}

/// A listener's values: an address and port, connection, header and body
/// limits, a token for any address but loopback, `Host` names that are
/// names, and both TLS files or neither.
pub(crate) fn listener(section: &str, l: Listener<'_>) -> Vec<KeyFinding> {
    let mut out = Vec::new();
    let mut refuse = |key: &str, message: String, help: &str| {
        out.push(KeyFinding::error(None, vec![section.to_owned(), key.to_owned()], message, help));
    };
    let addr = l.listen.map(|listen| (listen, listen.parse::<std::net::SocketAddr>()));
    match addr {
        Some((listen, Err(_))) => refuse(
            "listen",
            format!("listen \"{listen}\" is not an address and port"),
            "write an IP address and a port, e.g. \"127.0.0.1:9464\" (port 0 picks a free one)",
        ),
        Some((listen, Ok(addr))) if !addr.ip().is_loopback() && l.token_env.is_none() => refuse(
            "listen",
            format!("[{section}] listens on {listen}, beyond this host, without a token"),
            "set `token_env` to the name of an environment variable holding a token every request must \
             bring (`Authorization: Bearer …`), or listen on 127.0.0.1",
        ),
        _ => {}
    }
    if l.max_connections.is_some_and(|n| n == 0 || n > 1_000_000) {
        refuse(
            "max_connections",
            "`max_connections` is outside 1..=1000000".into(),
            "use a few hundred, e.g. 256: enough for its clients, few enough to keep descriptors for the worker",
        );
    }
    if l.header_read_timeout.is_some_and(|d| d.get().is_zero()) {
        refuse(
            "header_read_timeout",
            "`header_read_timeout` is zero: no request could ever be read".into(),
            "use a few seconds, e.g. \"5s\"",
        );
    }
    match (l.tls_cert_file, l.tls_key_file) {
        (Some(_), None) => refuse(
            "tls_key_file",
            format!("[{section}] names `tls_cert_file` without `tls_key_file`"),
            "name the PEM file of the certificate's private key too, or neither",
        ),
        (None, Some(_)) => refuse(
            "tls_cert_file",
            format!("[{section}] names `tls_key_file` without `tls_cert_file`"),
            "name the PEM file of the certificate chain too, or neither",
        ),
        _ => {}
    }
    if let Some(name) = l.token_env {
        if !is_env_name(name) {
            refuse(
                "token_env",
                format!("token_env \"{name}\" is not an environment variable name"),
                "name the variable that holds the token, e.g. \"BALLAST_GATEWAY_TOKEN\" (never the token itself)",
            );
        }
    }
    for (i, host) in l.allowed_hosts.iter().flat_map(|hosts| hosts.iter()).enumerate() {
        let plain = !host.is_empty()
            && host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
            && !host.contains("://");
        if !plain {
            out.push(KeyFinding::error(
                None,
                vec![section.to_owned(), "allowed_hosts".to_owned(), i.to_string()],
                format!("allowed_hosts entry {host:?} is not a host name"),
                "write the name a browser or proxy sends in `Host`, e.g. \"ballast.internal\" or \"ballast.internal:9464\"",
            ));
        }
    }
    out.extend(body_timeout(section, l.body_read_timeout));
    out
}

/// A listener's TLS as lint sees it: the files read as `ballast serve`
/// reads them (an error if they cannot be served), and a warning for a
/// listener beyond loopback that speaks plain HTTP — its token, session
/// cookie and every body cross the network readable.
pub(crate) fn tls(
    section: &str,
    listen: Option<&str>,
    files: Option<(&str, &str)>,
    dir: &Path,
) -> Vec<KeyFinding> {
    let path = |key: &str| vec![section.to_owned(), key.to_owned()];
    let Some((cert, key)) = files else {
        let beyond = listen
            .and_then(|l| l.parse::<std::net::SocketAddr>().ok())
            .is_some_and(|a| !a.ip().is_loopback());
        if !beyond {
            return Vec::new();
        }
        return vec![KeyFinding::at(
            None,
            ballast::Severity::Warning,
            path("listen"),
            format!(
                "[{section}] listens beyond this host over plain HTTP: its token, session cookie and every body \
                 cross the network readable"
            ),
            "set `tls_cert_file` and `tls_key_file` (in [serve]: both listeners), or keep it behind a proxy that \
             speaks TLS on the same host",
        )];
    };
    let (cert, key) = (dir.join(cert), dir.join(key));
    match ballast_tls::IdentityFiles::pem(&cert, &key).read() {
        Err(e) => vec![KeyFinding::error(
            None,
            path("tls_cert_file"),
            e.to_string(),
            "give a readable PEM certificate chain and its private key",
        )],
        Ok(identity) if identity.facts.expired(std::time::SystemTime::now()) => vec![KeyFinding::error(
            None,
            path("tls_cert_file"),
            format!("the certificate in {} has expired: every client would refuse it", cert.display()),
            "renew it",
        )],
        Ok(_) => Vec::new(),
    }
}

pub(crate) fn count(n: Option<u64>) -> Option<usize> {
    n.map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}
