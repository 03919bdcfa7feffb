//! From a system's sections to the core's objects: the [`PolicyBuilder`]
//! the checker checks and the runtime builds, and the problems met on the way
//! (a kind that does not exist, a key a kind needs). The checker and the
//! builder both start here, so they read every value the same way. The
//! routes are read in `routes.rs`.

use ballast::{
    guide, Backoff, Breaker, Budget, Bulkhead, Policy, PolicyBuilder, RateLimit, Retry, Rule, Scope, Timeout,
};

use super::{BreakerSection, RateLimitSection, RetrySection, System, TimeoutSection};
use crate::finding::{system_path, KeyFinding};
use crate::schema::Part;
use crate::suggest::did_you_mean;
use ballast_vocab::http::routes::{Routes, Unrouted};

/// The backoff kinds that exist (R-RES-RE-X3).
pub const BACKOFF_KINDS: [&str; 2] = ["exponential", "exponential-full-jitter"];
/// The breaker kinds that exist.
pub const BREAKER_KINDS: [&str; 3] = ["consecutive", "count", "sampling"];
/// The timeout strategies that exist.
pub const STRATEGIES: [&str; 2] = ["aggressive", "cooperative"];

/// The largest count-breaker window accepted.
pub const MAX_COUNT_WINDOW: u64 = ballast::Breaker::MAX_COUNT_WINDOW as u64;

/// The core objects a system's sections describe, and the problems met on
/// the way (unknown kinds, missing keys). Where a value is unusable a
/// stand-in is used so the remaining checks still run; such a builder is
/// never handed out, because the problem is an error.
pub(crate) fn translate(name: &str, system: &System) -> Translated {
    let mut problems = Vec::new();
    // A part the file does not mention is the guide's; "none" leaves it out.
    let retry = match &system.retry {
        None => guide::retry(),
        Some(Part::Off) => Retry::never(),
        Some(Part::On(r)) => retry(name, r, &mut problems),
    };
    let timeout = system.timeout.as_ref().map_or(guide::timeout(), |t| timeout(name, t, &mut problems));
    let mut builder = Policy::builder(name).retry(retry).timeout(timeout);
    let breaker = match &system.breaker {
        None => Some(guide::breaker()),
        Some(Part::Off) => None,
        Some(Part::On(b)) => breaker(name, b, &mut problems),
    };
    if let Some(b) = breaker {
        builder = builder.breaker(b);
    }
    match &system.bulkhead {
        None => builder = builder.bulkhead(guide::bulkhead()),
        Some(Part::Off) => {}
        Some(Part::On(b)) => match b.limit {
            Some(limit) => {
                let limit = usize::try_from(limit).unwrap_or(usize::MAX);
                let queue = b.queue.map_or(0, |q| usize::try_from(q).unwrap_or(usize::MAX));
                let reserve = b.reserve_live.unwrap_or(ballast::DEFAULT_RESERVE_LIVE);
                if !(0.0..=1.0).contains(&reserve) {
                    problems.push(KeyFinding::error(
                        None,
                        system_path(name, &["bulkhead", "reserve_live"]),
                        format!("`reserve_live` is {reserve}: it is the share of `limit` kept for live calls, 0.0–1.0"),
                        "use e.g. 0.25 (the default): a quarter of the slots stay free for callers while a backlog drains",
                    ));
                }
                builder = builder.bulkhead(Bulkhead::new(limit).queue(queue).reserve_live(reserve));
            }
            None => {
                problems.push(missing(name, "bulkhead", "limit", "add `limit = 8` (concurrent attempts)"))
            }
        },
    }
    if let Some(limit) = system.rate_limit.as_ref().and_then(|r| rate_limit(name, r, &mut problems)) {
        builder = builder.rate_limit(limit);
    }
    let routes = super::routes::routes(name, system, &timeout, &mut problems);
    let unrouted = super::routes::unrouted(name, system, &routes, &mut problems);
    Translated { builder, retry, timeout, routes, unrouted, problems }
}

/// The periods a `rate` may be given per, and their length.
pub const RATE_PERIODS: [(&str, u64); 4] = [("s", 1), ("m", 60), ("min", 60), ("h", 3600)];

/// `"100/s"` → 100 permits per second; anything else is refused with the reason.
pub fn parse_rate(text: &str) -> Result<(u32, std::time::Duration), String> {
    let (count, period) = text
        .split_once('/')
        .ok_or_else(|| format!("rate \"{text}\" has no period: write permits per period, e.g. \"100/s\""))?;
    let count: u32 =
        count.trim().parse().map_err(|_| format!("\"{}\" is not a whole number of permits", count.trim()))?;
    let period = period.trim();
    let per = match RATE_PERIODS.iter().find(|(p, _)| *p == period) {
        Some((_, secs)) => std::time::Duration::from_secs(*secs),
        None => return Err(format!("\"{period}\" is not a period: use s, m (or min) or h")),
    };
    Ok((count, per))
}

fn rate_limit(name: &str, r: &RateLimitSection, problems: &mut Vec<KeyFinding>) -> Option<RateLimit> {
    let Some(rate) = r.rate.as_deref() else {
        problems.push(missing(name, "rate_limit", "rate", "add `rate = \"100/s\"` (permits per period)"));
        return None;
    };
    let (permits, per) = match parse_rate(rate) {
        Ok(parsed) => parsed,
        Err(why) => {
            problems.push(KeyFinding::error(
                None,
                system_path(name, &["rate_limit", "rate"]),
                why,
                "write permits per period: \"100/s\", \"30/m\", \"1000/h\"",
            ));
            return None;
        }
    };
    let mut limit = RateLimit::new(permits, per);
    if let Some(burst) = r.burst {
        limit = limit.burst(u32::try_from(burst).unwrap_or(u32::MAX));
    }
    if let Some(wait) = r.wait {
        limit = limit.wait(wait.get());
    }
    if r.adaptive == Some(true) {
        limit = limit.adaptive();
    }
    if let Some(max_hold) = r.max_hold {
        limit = limit.max_hold(max_hold.get());
    }
    if scope(name, "rate_limit", r.scope.as_deref(), problems) == Scope::Fleet {
        limit = limit.fleet();
    }
    Some(limit)
}

/// What [`translate`] makes of a system.
#[derive(Debug)]
pub(crate) struct Translated {
    pub builder: PolicyBuilder,
    pub retry: Retry,
    pub timeout: Timeout,
    pub routes: Routes,
    pub unrouted: Option<Unrouted>,
    pub problems: Vec<KeyFinding>,
}

fn retry(name: &str, r: &RetrySection, problems: &mut Vec<KeyFinding>) -> Retry {
    let attempts = r.max_attempts.map_or(Retry::DEFAULT_ATTEMPTS, |n| u32::try_from(n).unwrap_or(u32::MAX));
    let first = r.first_delay.map_or(Backoff::DEFAULT_FIRST_DELAY, |d| d.get());
    let mut backoff = match r.backoff.as_deref() {
        None | Some("exponential") => Backoff::exponential(first),
        Some("exponential-full-jitter") => Backoff::exponential_full_jitter(first),
        Some(other) => {
            let help = match did_you_mean(other, BACKOFF_KINDS) {
                Some(k) => format!("did you mean \"{k}\"?"),
                None => "use \"exponential\" (decorrelated jitter) or \"exponential-full-jitter\"".to_owned(),
            };
            problems.push(KeyFinding::error(
                Some(Rule::ReX3),
                system_path(name, &["retry", "backoff"]),
                format!("backoff \"{other}\" does not exist: only jittered exponential backoff is allowed (R-RES-RE-X3)"),
                help,
            ));
            Backoff::exponential(first)
        }
    };
    if let Some(max) = r.max_delay {
        backoff = backoff.max_delay(max.get());
    }
    let retry = Retry::attempts(attempts).backoff(backoff);
    // 0 means "the default budget", so a file can spell the key out without choosing a ratio.
    match r.budget_ratio {
        Some(ratio) if ratio != 0.0 => retry.budget(Budget::ratio(ratio)),
        _ => retry,
    }
}

fn timeout(name: &str, t: &TimeoutSection, problems: &mut Vec<KeyFinding>) -> Timeout {
    let attempt = t.attempt.map_or(Timeout::DEFAULT_ATTEMPT, |d| d.get());
    let timeout = match t.strategy.as_deref() {
        None | Some("aggressive") => Timeout::aggressive(attempt),
        Some("cooperative") => Timeout::cooperative(attempt),
        Some(other) => {
            problems.push(KeyFinding::error(
                None,
                system_path(name, &["timeout", "strategy"]),
                format!("timeout strategy \"{other}\" does not exist"),
                one_of(other, &STRATEGIES),
            ));
            Timeout::aggressive(attempt)
        }
    };
    match t.total {
        Some(total) => timeout.total(total.get()),
        None => timeout,
    }
}

fn breaker(name: &str, b: &BreakerSection, problems: &mut Vec<KeyFinding>) -> Option<Breaker> {
    let Some(kind) = b.kind.as_deref() else {
        problems.push(missing(
            name,
            "breaker",
            "kind",
            "add `kind = \"count\"` (or \"consecutive\", \"sampling\")",
        ));
        return None;
    };
    // Keys that belong to another kind are refused rather than silently ignored.
    let foreign: &[(&str, bool)] = match kind {
        "consecutive" => &[
            ("size", b.size.is_some()),
            ("min_calls", b.min_calls.is_some()),
            ("duration", b.duration.is_some()),
            ("min_throughput", b.min_throughput.is_some()),
        ],
        "count" => &[("duration", b.duration.is_some()), ("min_throughput", b.min_throughput.is_some())],
        "sampling" => &[("size", b.size.is_some()), ("min_calls", b.min_calls.is_some())],
        other => {
            problems.push(KeyFinding::error(
                None,
                system_path(name, &["breaker", "kind"]),
                format!("breaker kind \"{other}\" does not exist"),
                one_of(other, &BREAKER_KINDS),
            ));
            return None;
        }
    };
    for (key, _) in foreign.iter().filter(|(_, present)| *present) {
        problems.push(KeyFinding::error(
            None,
            system_path(name, &["breaker", key]),
            format!("`{key}` does not apply to a \"{kind}\" breaker"),
            format!("remove `{key}`, or change `kind` to the breaker it belongs to"),
        ));
    }
    let Some(threshold) = b.threshold else {
        problems.push(missing(
            name,
            "breaker",
            "threshold",
            "add e.g. `threshold = 0.5` (5 for \"consecutive\")",
        ));
        return None;
    };
    let breaker = match kind {
        "consecutive" => {
            if threshold.fract() != 0.0 || !(0.0..=f64::from(u32::MAX)).contains(&threshold) {
                problems.push(KeyFinding::error(
                    None,
                    system_path(name, &["breaker", "threshold"]),
                    format!("a \"consecutive\" breaker's threshold counts failures in a row; {threshold} is not a whole number"),
                    "use e.g. `threshold = 5`, or `kind = \"count\"` for a share of failures",
                ));
                return None;
            }
            Breaker::consecutive(threshold as u32)
        }
        "count" => {
            let Some(size) = b.size else {
                problems.push(missing(
                    name,
                    "breaker",
                    "size",
                    "add e.g. `size = 50` (recent calls counted)",
                ));
                return None;
            };
            // An oversized window is refused by the rules; keep the stand-in small.
            let size = usize::try_from(size.min(MAX_COUNT_WINDOW)).unwrap_or(0);
            let breaker = Breaker::count(threshold, size);
            match b.min_calls {
                Some(m) => breaker.min_calls(usize::try_from(m).unwrap_or(usize::MAX)),
                None => breaker,
            }
        }
        _ => {
            let Some(period) = b.duration else {
                problems.push(missing(
                    name,
                    "breaker",
                    "duration",
                    "add e.g. `duration = \"30s\"` (the period sampled)",
                ));
                return None;
            };
            let breaker = Breaker::sampling(threshold, period.get());
            match b.min_throughput {
                Some(n) => breaker.min_throughput(n),
                None => breaker,
            }
        }
    };
    let breaker = match b.half_open_after {
        Some(d) => breaker.half_open_after(d.get()),
        None => breaker,
    };
    let fleet = scope(name, "breaker", b.scope.as_deref(), problems) == Scope::Fleet;
    if b.quorum.is_some() && !fleet {
        problems.push(KeyFinding::error(
            None,
            system_path(name, &["breaker", "quorum"]),
            "`quorum` applies to a breaker the fleet holds".to_owned(),
            "add `scope = \"fleet\"`, or remove `quorum`",
        ));
    }
    Some(match fleet {
        true => breaker.fleet(u32::try_from(b.quorum.unwrap_or(DEFAULT_QUORUM)).unwrap_or(u32::MAX)),
        false => breaker,
    })
}

/// The quorum of a fleet's breaker unless `quorum` says otherwise.
pub const DEFAULT_QUORUM: u64 = 2;

/// A part's `scope`, checked.
fn scope(name: &str, section: &str, scope: Option<&str>, problems: &mut Vec<KeyFinding>) -> Scope {
    match scope {
        None | Some("replica") => Scope::Replica,
        Some("fleet") => Scope::Fleet,
        Some(other) => {
            problems.push(KeyFinding::error(
                None,
                system_path(name, &[section, "scope"]),
                format!("scope \"{other}\" does not exist"),
                one_of(other, &["replica", "fleet"]),
            ));
            Scope::Replica
        }
    }
}

fn missing(name: &str, section: &str, key: &str, help: &str) -> KeyFinding {
    KeyFinding::error(
        None,
        system_path(name, &[section, key]),
        format!("`{key}` is missing from [systems.{name}.{section}]"),
        help,
    )
}

fn one_of(value: &str, allowed: &[&str]) -> String {
    let list = allowed.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", ");
    match did_you_mean(value, allowed.iter().copied()) {
        Some(s) => format!("did you mean \"{s}\"? Use one of {list}"),
        None => format!("use one of {list}"),
    }
}
