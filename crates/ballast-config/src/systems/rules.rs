//! The rules of `[systems.NAME]`, one function each (every other section's
//! rules are in its own module). Rules the core already
//! enforces when a policy is built (R-RES-RE-3, R-RES-RE-4, R-RES-RE-X3 on
//! delays, every range of a breaker, bulkhead, timeout or budget) are *not*
//! re-implemented here: [`core`] runs the core's own `check()` and only
//! points each of its findings at the right key, so the checker and the
//! runtime agree by construction.

use std::time::Duration;

use ballast::{PolicyBuilder, Retry, Rule, Severity, Violation};
use ballast_vocab::http::{is_header_name, RetryOn};

use super::System;
use crate::alerts::is_env_name;
use crate::duration::display;
use crate::finding::{system_path, KeyFinding};
use crate::gateway::GatewaySection;
use crate::queue::QueueSection;
use crate::schema::Part;
use crate::serve::ServeSection;
use crate::suggest::did_you_mean;

/// The only order the composition has (R-RES-RE-2).
pub const ORDER: [&str; 4] = ["retry", "breaker", "bulkhead", "timeout"];

/// What a system's rules read of the rest of the file: the queue its
/// keyed writes may be handed to, and the listeners it must not call.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Around<'a> {
    /// `[queue]`.
    pub queue: Option<&'a QueueSection>,
    /// `[serve]`.
    pub serve: Option<&'a ServeSection>,
    /// `[gateway]`.
    pub gateway: Option<&'a GatewaySection>,
}

/// Every problem of one system: the core's checks, then this crate's rules
/// (files the system names are read from `dir`, the configuration's directory).
pub(crate) fn system(file: Around<'_>, dir: &std::path::Path, name: &str, sys: &System) -> Vec<KeyFinding> {
    let crate::systems::translate::Translated { builder, retry, timeout, problems: mut out, .. } =
        crate::systems::translate::translate(name, sys);
    out.extend(core(name, &builder));
    out.extend(client_timeouts(name, sys, timeout.attempt()));
    out.extend(retry_on(name, sys));
    out.extend(client_retries(name, sys));
    out.extend(order(name, sys));
    out.extend(writes_need_dedup(name, sys, &retry));
    out.extend(key_outlives_retries(file, name, sys, builder.worst_case()));
    out.extend(system_ranges(name, sys));
    out.extend(calls_itself(file, name, sys));
    out.extend(fleet_scope(file, name, sys));
    out.extend(crate::systems::connection::rules(dir, name, sys));
    out
}

/// A part held by a fleet needs the database the fleet shares; a rate a
/// replica holds on its own, on a queue several replicas may share, is
/// worth a note of what N of them send.
fn fleet_scope(file: Around<'_>, name: &str, sys: &System) -> Vec<KeyFinding> {
    let shared = file
        .queue
        .and_then(|q| q.url.as_deref())
        .and_then(ballast_vocab::queue::Backend::from_url)
        .is_some_and(|b| b == ballast_vocab::queue::Backend::Postgres);
    let rate = sys.rate_limit.as_ref();
    let breaker = sys.breaker.as_ref().and_then(|b| b.section());
    let mut out = Vec::new();
    for (section, scope) in [
        ("rate_limit", rate.and_then(|r| r.scope.as_deref())),
        ("breaker", breaker.and_then(|b| b.scope.as_deref())),
    ] {
        if scope == Some("fleet") && !shared {
            out.push(KeyFinding::error(
                None,
                system_path(name, &[section, "scope"]),
                format!(
                    "{section} scope = \"fleet\" needs a PostgreSQL queue: the replicas of a fleet hold it together in \
                     the database they share, and a SQLite queue has one replica"
                ),
                "set [queue] url = \"postgres://…\", or leave scope out",
            ));
        }
    }
    if let Some(rate) = rate.filter(|r| shared && r.scope.as_deref().is_none_or(|s| s == "replica")) {
        let said = rate.rate.as_deref().unwrap_or("the rate");
        out.push(KeyFinding::at(
            None,
            Severity::Note,
            system_path(name, &["rate_limit", "rate"]),
            format!(
                "every replica of `ballast serve` on this PostgreSQL queue holds {said} on its own: N replicas send up \
                 to N × {said}"
            ),
            "if the system allows that rate in all, say `scope = \"fleet\"`: the replicas hold it together",
        ));
    }
    out
}

/// A `base_url` at the address of one of `ballast serve`'s own listeners:
/// the gateway would call itself (each attempt nesting another call).
fn calls_itself(file: Around<'_>, name: &str, sys: &System) -> Vec<KeyFinding> {
    let Some(url) = sys.base_url.as_deref().and_then(|u| ballast_vocab::http::parse_base_url(u).ok()) else {
        return Vec::new();
    };
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else { return Vec::new() };
    // `[::ffff:127.0.0.1]` is 127.0.0.1.
    let host_ip = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .ok()
        .map(|ip| ip.to_canonical());
    let localhost = host.eq_ignore_ascii_case("localhost");
    let listen = |given: Option<&String>, default: std::net::SocketAddr| {
        given.map_or(Some(default), |l| l.parse::<std::net::SocketAddr>().ok())
    };
    let serve = file.serve.and_then(|s| s.listen.as_ref());
    let mut own = vec![("[serve] listen", listen(serve, crate::ServeSettings::default().listener.listen))];
    if let Some(gateway) = file.gateway {
        own.push((
            "[gateway] listen",
            listen(gateway.listen.as_ref(), crate::GatewaySettings::default().listener.listen),
        ));
    }
    // A listener on 0.0.0.0 or :: answers on every address of the host,
    // loopback included; a connection to 0.0.0.0 or :: reaches this host's
    // loopback listeners.
    let names_host = |addr: std::net::SocketAddr| {
        let ip = addr.ip().to_canonical();
        match host_ip {
            Some(h) => {
                h == ip
                    || (ip.is_unspecified() && (h.is_loopback() || h.is_unspecified()))
                    || (h.is_unspecified() && ip.is_loopback())
            }
            None => localhost && (ip.is_loopback() || ip.is_unspecified()),
        }
    };
    own.into_iter()
        .filter_map(|(which, addr)| Some((which, addr?)))
        .filter(|(_, addr)| addr.port() != 0 && addr.port() == port && names_host(*addr))
        .map(|(which, addr)| {
            KeyFinding::error(
                None,
                system_path(name, &["base_url"]),
                format!(
                    "base_url of `{name}` points at {addr}, {which} of `ballast serve` itself: every call would \
                     call the gateway again instead of the system"
                ),
                "write the external system's own address",
            )
        })
        .collect()
}

/// The core's own checks (R-RES-RE-3, R-RES-RE-4, R-RES-RE-X3 and every
/// range it refuses), each at the key the core names.
fn core(name: &str, builder: &PolicyBuilder) -> Vec<KeyFinding> {
    builder.check().into_iter().map(|v| violation(name, v)).collect()
}

/// A core [`Violation`] about system `name`, at the key its `setting` names.
pub(crate) fn violation(name: &str, v: Violation) -> KeyFinding {
    let rest: Vec<&str> = v.setting.split('.').collect();
    KeyFinding::at(v.rule, v.severity, system_path(name, &rest), v.message, v.help)
}

/// R-RES-RE-X2: only transient outcomes are retried, never contract errors.
/// An entry is known exactly when the HTTP client's [`RetryOn::from_names`] takes it.
fn retry_on(name: &str, sys: &System) -> Vec<KeyFinding> {
    let Some(list) = sys.retry.as_ref().and_then(|r| r.section()?.retry_on.as_ref()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        if RetryOn::from_names(&[entry]).is_ok() {
            continue;
        }
        let at = system_path(name, &["retry", "retry_on", &i.to_string()]);
        let e = RetryOn::normalize_name(entry);
        let is_4xx_status = e.len() == 3 && e.starts_with('4') && e.bytes().all(|b| b.is_ascii_digit());
        if matches!(e.as_str(), "4xx" | "all" | "any" | "*") || is_4xx_status {
            out.push(KeyFinding::error(
                Some(Rule::ReX2),
                at,
                format!("retry_on \"{entry}\" retries contract errors (4xx): the request itself is wrong and will fail again"),
                format!(
                    "retry only transient outcomes: {}; of the other 4xx only {} may be opted into",
                    quoted(&RetryOn::DEFAULT_NAMES, ", "),
                    quoted(&RetryOn::OPT_IN_NAMES, " and ")
                ),
            ));
        } else {
            let help = match did_you_mean(&e, RetryOn::names()) {
                Some(s) => format!("did you mean \"{s}\"?"),
                None => format!("use some of {}", quoted(&RetryOn::names().collect::<Vec<_>>(), ", ")),
            };
            out.push(KeyFinding::error(
                None,
                at,
                format!("retry_on \"{entry}\" is not an outcome ballast knows"),
                help,
            ));
        }
    }
    let names: Vec<String> = list.iter().map(|e| RetryOn::normalize_name(e)).collect();
    if sys.dedupes_by_key == Some(true) && !names.iter().any(|n| n == "409-in-flight") {
        out.push(KeyFinding::at(
            Some(Rule::ReX2),
            Severity::Note,
            system_path(name, &["retry", "retry_on"]),
            format!(
                "`retry_on` leaves out \"409-in-flight\": a 409 to a keyed write to `{name}` fails the write \
                 at once, though under the IETF Idempotency-Key draft it means the original request with that \
                 key is still being processed and may well succeed"
            ),
            "add \"409-in-flight\" unless this system's 409 means a contract error; the write is then \
             tried again later with the same key",
        ));
    }
    out
}

/// `"a", "b"{last}"c"`: names quoted and listed.
fn quoted(names: &[&str], last: &str) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    match quoted.split_last() {
        Some((tail, [])) => tail.clone(),
        Some((tail, rest)) => format!("{}{last}{tail}", rest.join(", ")),
        None => String::new(),
    }
}

/// R-RES-RE-X4: no retries beside the one composition.
fn client_retries(name: &str, sys: &System) -> Vec<KeyFinding> {
    match sys.client.as_ref().and_then(|c| c.retries) {
        Some(n) if n > 0 => vec![KeyFinding::error(
            Some(Rule::ReX4),
            system_path(name, &["client", "retries"]),
            format!("the HTTP client would retry {n} more time(s) on its own, outside the policy: it keeps retrying while the breaker is open and multiplies max_attempts"),
            "set `retries = 0` (or remove it) and let [retry] do the retrying",
        )],
        _ => Vec::new(),
    }
}

/// R-RES-CB-1 / R-RES-RE-2: the composition order is fixed; `order` is
/// accepted only to explain that.
fn order(name: &str, sys: &System) -> Vec<KeyFinding> {
    let Some(order) = &sys.order else { return Vec::new() };
    let at = system_path(name, &["order"]);
    let fixed = ORDER.map(|s| format!("\"{s}\"")).join(" → ");
    if let Some(unknown) = order.iter().find(|s| !ORDER.contains(&s.as_str())) {
        return vec![KeyFinding::error(
            None,
            at,
            format!("`order` names \"{unknown}\", which is not a stage of the composition"),
            format!("remove `order`: the composition is always {fixed}"),
        )];
    }
    let pos = |stage: &str| order.iter().position(|s| s == stage);
    if let (Some(retry), Some(breaker)) = (pos("retry"), pos("breaker")) {
        if breaker < retry {
            return vec![KeyFinding::error(
                Some(Rule::Cb1),
                at,
                "`order` puts the circuit breaker outside retry: it would see only final outcomes, not each failed attempt".into(),
                format!("remove `order`: the composition is always {fixed}, from the outside in"),
            )];
        }
    }
    if order.iter().map(String::as_str).eq(ORDER) {
        return vec![KeyFinding::at(
            Some(Rule::Re2),
            Severity::Note,
            at,
            "`order` repeats the fixed composition order; it is not a setting".into(),
            "remove `order`; nothing changes",
        )];
    }
    vec![KeyFinding::error(
        Some(Rule::Re2),
        at,
        format!("`order` [{}] differs from the one composition ballast has", order.join(", ")),
        format!("remove `order`: the composition is always {fixed}, from the outside in"),
    )]
}

/// R-RES-RE-1 (note): without deduplication by key, only reads are retried.
fn writes_need_dedup(name: &str, sys: &System, retry: &Retry) -> Vec<KeyFinding> {
    // Only a retry the file configures: the guide's default retries reads, as it should.
    if retry.max_attempts() <= 1
        || sys.dedupes_by_key == Some(true)
        || !matches!(sys.retry, Some(Part::On(_)))
    {
        return Vec::new();
    }
    let at = if sys.dedupes_by_key.is_some() {
        system_path(name, &["dedupes_by_key"])
    } else {
        system_path(name, &["retry"])
    };
    vec![KeyFinding::at(
        Some(Rule::Re1),
        Severity::Note,
        at,
        format!("`{name}` does not deduplicate by key: writes to this system will never be retried, only reads"),
        "if its contract guarantees deduplication by Idempotency-Key, set `dedupes_by_key = true` and `key_ttl`",
    )]
}

/// R-RES-RE-1: the system must remember a key for longer than a keyed write
/// can still be retried — in memory, then in the durable queue.
fn key_outlives_retries(file: Around<'_>, name: &str, sys: &System, window: Duration) -> Vec<KeyFinding> {
    if sys.dedupes_by_key != Some(true) {
        return Vec::new();
    }
    let needed = required_key_ttl(file.queue, window);
    let how = match file.queue {
        Some(_) => "the in-memory window and the whole durable schedule",
        None => "the in-memory window (there is no [queue])",
    };
    match sys.key_ttl.map(|d| d.get()) {
        None => vec![KeyFinding::at(
            Some(Rule::Re1),
            Severity::Warning,
            system_path(name, &["dedupes_by_key"]),
            format!("`{name}` dedupes by key but `key_ttl` is not declared, so nobody can check that a key outlives its retries ({})", display(needed)),
            format!("add `key_ttl` from the system's contract; it must exceed {}", display(needed)),
        )],
        Some(ttl) if ttl < needed => vec![KeyFinding::error(
            Some(Rule::Re1),
            system_path(name, &["key_ttl"]),
            format!(
                "key_ttl {} is shorter than the longest time a keyed write can still be retried, {} ({how}): a late retry would be applied twice",
                display(ttl),
                display(needed)
            ),
            "lower [queue] max_attempts or the policy's window, or confirm a longer key TTL with the system; `ballast explain` shows the schedule",
        )],
        Some(_) => Vec::new(),
    }
}

/// The longest time a keyed write may still be retried: see [`ballast_vocab::queue::DurableSchedule::key_lifetime`].
pub(crate) fn required_key_ttl(queue: Option<&QueueSection>, window: Duration) -> Duration {
    queue.map_or(window, |q| q.schedule().key_lifetime(window))
}

/// The HTTP client's connect and read timeouts fit inside the attempt
/// timeout, as `ballast_http::HttpSystem` requires (no rule id): a longer
/// one could never fire, the attempt timeout would always cut it short.
fn client_timeouts(name: &str, sys: &System, attempt: Duration) -> Vec<KeyFinding> {
    let Some(t) = &sys.timeout else { return Vec::new() };
    // A zero attempt timeout is the core's finding; every client timeout would exceed it.
    if attempt.is_zero() {
        return Vec::new();
    }
    let attempt_key = if t.attempt.is_some() { "`timeout.attempt`" } else { "the default attempt timeout" };
    [("connect", t.connect), ("read", t.read)]
        .into_iter()
        .filter_map(|(key, value)| Some((key, value?.get())))
        .filter(|(_, value)| *value > attempt)
        .map(|(key, value)| {
            KeyFinding::error(
                None,
                system_path(name, &["timeout", key]),
                format!(
                    "`timeout.{key}` {} is longer than {attempt_key} {}: the HTTP client refuses it, so `ballast serve` would not start",
                    display(value),
                    display(attempt)
                ),
                format!(
                    "lower `{key}` to at most {} (the attempt timeout bounds every client timeout), or raise `attempt`",
                    display(attempt)
                ),
            )
        })
        .collect()
}

/// Plain ranges of the keys the core does not see (no rule id).
fn system_ranges(name: &str, sys: &System) -> Vec<KeyFinding> {
    let mut out = Vec::new();
    let zero = |key: &[&str], what: &str, help: &str| {
        KeyFinding::error(None, system_path(name, key), format!("`{}` is zero: {what}", key.join(".")), help)
    };
    if sys.key_ttl.is_some_and(|d| d.get().is_zero()) {
        out.push(zero(
            &["key_ttl"],
            "the system would forget every key at once",
            "use the TTL from the system's contract, e.g. \"24h\"",
        ));
    }
    if let Some(t) = &sys.timeout {
        if t.connect.is_some_and(|d| d.get().is_zero()) {
            out.push(zero(&["timeout", "connect"], "no connection could be made", "use e.g. \"1s\""));
        }
        if t.read.is_some_and(|d| d.get().is_zero()) {
            out.push(zero(
                &["timeout", "read"],
                "no response could be read",
                "use e.g. \"5s\", or leave it out",
            ));
        }
        if t.stream.is_some_and(|d| d.get().is_zero()) {
            out.push(zero(
                &["timeout", "stream"],
                "every streamed answer would be cut off as it began",
                "use e.g. \"5m\", or leave it out (5 minutes)",
            ));
        }
    }
    for (header, source) in sys.headers.iter().flatten() {
        let at = system_path(name, &["headers", header]);
        if !is_header_name(header) {
            out.push(KeyFinding::error(
                None,
                at.clone(),
                format!("`{header}` is not an HTTP header name"),
                "use e.g. `Authorization` or `X-Api-Key`",
            ));
        } else if sys.idempotency_header.as_deref().unwrap_or("Idempotency-Key").eq_ignore_ascii_case(header)
        {
            out.push(KeyFinding::error(
                Some(Rule::Re1),
                at.clone(),
                format!("`{header}` is the idempotency header: its value is each write's own key, never a fixed one"),
                "remove it from [headers]; keyed writes carry their key (R-RES-RE-1)",
            ));
        }
        match source.env.as_deref() {
            None => out.push(KeyFinding::error(
                None,
                at,
                format!(
                    "`{header}` names no `env`: a header value comes from the environment, never the file"
                ),
                format!("write `{header} = {{ env = \"VARIABLE\" }}` with the variable that holds the value"),
            )),
            Some(var) if !is_env_name(var) => out.push(KeyFinding::error(
                None,
                at,
                format!("`env = \"{var}\"` is not an environment variable name"),
                "name the variable that holds the value (never the value itself)",
            )),
            Some(_) => {}
        }
    }
    if let Some(url) = &sys.base_url {
        // The parser `ballast serve` builds the client with: lint and serve agree.
        if let Err(ballast_vocab::http::InvalidBaseUrl { reason, .. }) =
            ballast_vocab::http::parse_base_url(url)
        {
            out.push(KeyFinding::error(
                None,
                system_path(name, &["base_url"]),
                format!("base_url \"{}\" is not a usable base URL: {reason}", ballast::redact_url(url)),
                "write an absolute http:// or https:// URL without query or fragment, e.g. \"https://api.example.com/v1\"",
            ));
        }
    }
    if let Some(h) = &sys.idempotency_header {
        if !is_header_name(h) {
            out.push(KeyFinding::error(
                None,
                system_path(name, &["idempotency_header"]),
                format!("idempotency_header \"{h}\" is not a valid HTTP header name"),
                "use e.g. \"Idempotency-Key\"",
            ));
        }
    }
    out
}
