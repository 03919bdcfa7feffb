//! What an upstream says of its rate limit, read from its answer's headers
//! for an adaptive [`ballast::RateLimit`]:
//!
//! | header | read as |
//! |---|---|
//! | `RateLimit-Policy: "default";q=100;w=60` (draft-ietf-httpapi-ratelimit-headers 08+), `100;w=60` (earlier drafts) | the rate: `q` per `w` seconds; of several policies the strictest |
//! | `RateLimit: "default";r=0;t=30` (08+), `limit=100, remaining=0, reset=30` (07), `RateLimit-Remaining: 0` with `RateLimit-Reset: 30` (06 and earlier) | the quota is spent: no attempt for `t` seconds |
//! | `X-RateLimit-Remaining: 0` with `X-RateLimit-Reset` | likewise; a reset over 10⁹ is a Unix time (GitHub's), over 10¹² one in milliseconds, else seconds from now |
//!
//! A field that does not parse is ignored, as the draft asks; a remaining
//! quota above zero changes nothing (it is no promise either way). Reading
//! is total: a number out of range (`1e25`, `inf`, a date past the year
//! 9999) is capped at [`MAX_HOLD`] or ignored, never a panic — an upstream
//! decides what its headers say, not whether the attempt survives reading
//! them. The limiter caps what it is told again (`[systems.NAME.rate_limit]
//! max_hold`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;

/// The longest hold a header can say (a daily quota spent); the limiter
/// holds at most its own `max_hold` of it.
pub(crate) const MAX_HOLD: Duration = Duration::from_secs(24 * 3600);

/// What the headers of one answer say.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Announced {
    /// Permits a second the system allows.
    pub rate: Option<f64>,
    /// The window of the policy that says so (`w`).
    pub window: Option<Duration>,
    /// The quota is spent: nothing before this much time has passed.
    pub spent_for: Option<Duration>,
}

/// Reads `headers` at wall-clock time `now`.
pub(crate) fn read(headers: &HeaderMap, now: SystemTime) -> Announced {
    let policy = policy_rate(headers);
    Announced {
        rate: policy.map(|(rate, _)| rate),
        window: policy.and_then(|(_, w)| Duration::try_from_secs_f64(w).ok()),
        spent_for: spent_for(headers, now),
    }
}

/// The strictest `q`/`w` of `RateLimit-Policy`, and its `w` in seconds.
fn policy_rate(headers: &HeaderMap) -> Option<(f64, f64)> {
    let mut strictest: Option<(f64, f64)> = None;
    for value in headers.get_all("ratelimit-policy") {
        for item in value.to_str().ok()?.split(',') {
            let mut params = item.split(';').map(str::trim);
            // 08+: a name first, then q=; earlier: the quota first.
            let head = params.next().unwrap_or_default();
            let (mut quota, mut window) = (head.parse::<f64>().ok(), None);
            for param in params {
                match param.split_once('=') {
                    Some(("q", v)) => quota = v.trim().parse().ok(),
                    Some(("w", v)) => window = v.trim().parse::<f64>().ok(),
                    _ => {}
                }
            }
            let (Some(q), Some(w)) = (quota, window) else { continue };
            let rate = q / w;
            // A quota so small or a window so long that the rate is no number at all says nothing.
            if q > 0.0 && w > 0.0 && rate > 0.0 && rate.is_finite() {
                strictest = match strictest {
                    Some((s, _)) if s <= rate => strictest,
                    _ => Some((rate, w)),
                };
            }
        }
    }
    strictest
}

/// How long a spent quota holds, by any of the fields that say so.
fn spent_for(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let number = |name: &str| text(name).and_then(|v| v.parse::<f64>().ok());
    let mut holds = Vec::new();
    if let Some(value) = text("ratelimit") {
        // 08+: a list of items, each `"name";r=…;t=…`; 07: one dictionary,
        // `limit=…, remaining=…, reset=…`.
        let items: Vec<&str> = if value.contains(';') { value.split(',').collect() } else { vec![value] };
        for item in items {
            let (mut remaining, mut reset) = (None, None);
            for (key, v) in item.split([';', ',']).filter_map(|p| p.trim().split_once('=')) {
                match key.trim() {
                    "r" | "remaining" => remaining = v.trim().parse::<f64>().ok(),
                    "t" | "reset" => reset = v.trim().parse::<f64>().ok(),
                    _ => {}
                }
            }
            if let (Some(r), Some(t)) = (remaining, reset) {
                if r <= 0.0 {
                    holds.push(seconds(t));
                }
            }
        }
    }
    if let (Some(r), Some(t)) = (number("ratelimit-remaining"), number("ratelimit-reset")) {
        if r <= 0.0 {
            holds.push(seconds(t));
        }
    }
    if let (Some(r), Some(t)) = (number("x-ratelimit-remaining"), number("x-ratelimit-reset")) {
        if r <= 0.0 {
            holds.push(reset_at(t, now));
        }
    }
    holds.into_iter().flatten().max().map(|d| d.min(MAX_HOLD))
}

/// `t` seconds, at most [`MAX_HOLD`]; `None` for a negative or not-a-number `t`.
fn seconds(t: f64) -> Option<Duration> {
    (t >= 0.0).then(|| Duration::try_from_secs_f64(t).map_or(MAX_HOLD, |d| d.min(MAX_HOLD)))
}

/// `X-RateLimit-Reset` as the time left: a Unix time in seconds (over 10⁹)
/// or milliseconds (over 10¹²), else seconds from now. A time past what the
/// clock can hold is as far as a hold goes.
fn reset_at(value: f64, now: SystemTime) -> Option<Duration> {
    let epoch = |secs: f64| {
        let at = Duration::try_from_secs_f64(secs).ok().and_then(|d| UNIX_EPOCH.checked_add(d));
        Some(at.map_or(MAX_HOLD, |at| at.duration_since(now).unwrap_or(Duration::ZERO)))
    };
    if !(value.is_finite() && value >= 0.0) {
        None
    } else if value > 1e12 {
        epoch(value / 1000.0)
    } else if value > 1e9 {
        epoch(value)
    } else {
        seconds(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn the_policy_of_every_draft_gives_the_strictest_rate() {
        let now = SystemTime::now();
        let current = headers(&[("ratelimit-policy", "\"permin\";q=50;w=60, \"perhr\";q=1000;w=3600")]);
        assert_eq!(read(&current, now).rate, Some(1000.0 / 3600.0));
        let older = headers(&[("ratelimit-policy", "10;w=1, 50;w=60")]);
        assert_eq!(read(&older, now).rate, Some(50.0 / 60.0));
        let broken = headers(&[("ratelimit-policy", "\"x\";q=abc;w=1, w=0")]);
        assert_eq!(read(&broken, now).rate, None);
    }

    #[test]
    fn a_spent_quota_holds_until_its_reset_in_every_spelling() {
        let now = SystemTime::now();
        let hold = |pairs: &[(&'static str, &str)]| read(&headers(pairs), now).spent_for;
        assert_eq!(hold(&[("ratelimit", "\"default\";r=0;t=30")]), Some(Duration::from_secs(30)));
        assert_eq!(hold(&[("ratelimit", "\"default\";r=5;t=30")]), None, "quota left");
        assert_eq!(hold(&[("ratelimit", "limit=100, remaining=0, reset=7")]), Some(Duration::from_secs(7)));
        assert_eq!(
            hold(&[("ratelimit-remaining", "0"), ("ratelimit-reset", "12")]),
            Some(Duration::from_secs(12))
        );
        assert_eq!(
            hold(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "9")]),
            Some(Duration::from_secs(9))
        );
        let in_a_minute = now.duration_since(UNIX_EPOCH).unwrap().as_secs() + 60;
        let epoch =
            hold(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", &in_a_minute.to_string())]).unwrap();
        assert!(epoch > Duration::from_secs(58) && epoch <= Duration::from_secs(60), "{epoch:?}");
        let millis = (in_a_minute * 1000).to_string();
        let epoch = hold(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", &millis)]).unwrap();
        assert!(epoch > Duration::from_secs(58) && epoch <= Duration::from_secs(60), "{epoch:?}");
        assert_eq!(hold(&[("x-ratelimit-remaining", "3"), ("x-ratelimit-reset", "9")]), None);
        assert_eq!(hold(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "soon")]), None);
        assert_eq!(hold(&[("ratelimit", "r=0;t=999999999")]), Some(MAX_HOLD), "capped at a day");
    }

    /// Cases of the header fuzz: `BALLAST_FUZZ_CASES` for a longer run.
    fn fuzz_cases() -> u32 {
        std::env::var("BALLAST_FUZZ_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(2_000)
    }

    /// A number as an upstream might write one: in range or far out of it,
    /// negative, not a number, in exponent form.
    fn number() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            any::<f64>().prop_map(|f| f.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            (0u32..400).prop_map(|e| format!("1e{e}")),
            Just("inf".to_owned()),
            Just("-inf".to_owned()),
            Just("NaN".to_owned()),
            "[0-9eE+.-]{0,24}",
        ]
    }

    /// A header value an upstream's rate headers might carry.
    fn value() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            number(),
            (number(), number()).prop_map(|(r, t)| format!("\"default\";r={r};t={t}")),
            (number(), number(), number())
                .prop_map(|(l, r, t)| format!("limit={l}, remaining={r}, reset={t}")),
            (number(), number()).prop_map(|(q, w)| format!("\"p\";q={q};w={w}, {q};w={w}")),
            (0u64..u64::MAX / 2).prop_map(|secs| {
                // Dates far past the year 9999 the format can hold are written by hand.
                match std::time::UNIX_EPOCH.checked_add(Duration::from_secs(secs % 253_402_300_799)) {
                    Some(at) => httpdate::fmt_http_date(at),
                    None => "Fri, 31 Dec 99999 23:59:59 GMT".to_owned(),
                }
            }),
            "[ -~]{0,64}",
        ]
    }

    const NAMES: [&str; 7] = [
        "ratelimit",
        "ratelimit-policy",
        "ratelimit-remaining",
        "ratelimit-reset",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "retry-after",
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: fuzz_cases(),
            failure_persistence: None,
            ..Default::default()
        })]

        /// N1: whatever an upstream's rate headers and `Retry-After` say,
        /// reading them never panics, and what the limiter makes of them is
        /// bounded: a hold of at most `max_hold`, a rate never under the floor.
        #[test]
        fn no_rate_header_can_panic_or_stall_a_system(
            pairs in proptest::collection::vec((proptest::sample::select(&NAMES[..]), value()), 0..6)
        ) {
            let mut map = HeaderMap::new();
            for (name, value) in &pairs {
                if let Ok(value) = http::HeaderValue::from_str(value) {
                    map.append(*name, value);
                }
            }
            let said = read(&map, SystemTime::now());
            proptest::prop_assert!(said.spent_for.is_none_or(|d| d <= MAX_HOLD), "{said:?}");
            proptest::prop_assert!(said.rate.is_none_or(|r| r.is_finite() && r > 0.0), "{said:?}");
            let after = crate::classify::retry_after(&map);
            proptest::prop_assert!(after.is_none_or(|d| d <= MAX_HOLD), "{after:?}");

            let max_hold = Duration::from_secs(600);
            let policy = ballast::Policy::builder("fuzz")
                .rate_limit(ballast::RateLimit::per_second(100).adaptive().max_hold(max_hold))
                .build()
                .unwrap();
            let limiter = policy.rate_limiter().unwrap();
            if let Some(rate) = said.rate {
                limiter.announce(rate);
            }
            if let Some(spent_for) = said.spent_for {
                limiter.hold_until(tokio::time::Instant::now() + spent_for);
            }
            limiter.throttled(after);
            let now = limiter.snapshot();
            proptest::prop_assert!(now.held_for <= max_hold, "{now:?}");
            proptest::prop_assert!(now.rate >= 100.0 * ballast::rate_limit::adaptive::FLOOR, "{now:?}");
        }
    }
}
