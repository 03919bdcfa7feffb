//! Durations as the configuration writes them: `"500ms"`, `"5s"`, `"24h"`,
//! or several parts such as `"1m30s"`.
//!
//! A bare number has no unit and is refused, except `0`, which is zero in
//! every unit (so `first_delay = 0` reaches the rule that refuses it,
//! R-RES-RE-X3, instead of a type error).

use std::fmt;
use std::time::Duration;

/// A duration read from the configuration.
///
/// ```
/// use std::time::Duration;
/// use ballast_config::ConfigDuration;
///
/// let d: ConfigDuration = "1m30s".parse().unwrap();
/// assert_eq!(d.get(), Duration::from_secs(90));
/// assert!("5 parsecs".parse::<ConfigDuration>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ConfigDuration(pub Duration);

impl ConfigDuration {
    /// The duration.
    pub fn get(self) -> Duration {
        self.0
    }
}

/// A duration string that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a duration: {reason}; write a number and a unit, e.g. \"500ms\", \"5s\", \"24h\"")]
pub struct DurationError {
    /// The text given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// The units accepted, in milliseconds. Millisecond precision is enough for
/// every timeout and delay a policy has.
const UNITS: [(&str, u64); 5] = [("ms", 1), ("s", 1_000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)];

fn unit_millis(unit: &str) -> Option<u64> {
    UNITS.iter().find(|(u, _)| *u == unit).map(|(_, ms)| *ms)
}

impl std::str::FromStr for ConfigDuration {
    type Err = DurationError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        parse(input).map(ConfigDuration)
    }
}

/// Parses `"500ms"`, `"5s"`, `"2m"`, `"24h"`, `"7d"`, `"1m30s"` or `"0"`.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    let fail = |reason| DurationError { input: input.to_owned(), reason };
    let text = input.trim();
    if text.is_empty() {
        return Err(fail("it is empty"));
    }
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total_ms: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(fail("expected a whole number"));
        }
        let (number, after) = rest.split_at(digits);
        let letters = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        if letters == 0 {
            return Err(fail("a number has no unit"));
        }
        let (unit, after) = after.split_at(letters);
        let per = unit_millis(unit).ok_or_else(|| fail("the unit is not one of ms, s, m, h, d"))?;
        let n: u64 = number.parse().map_err(|_| fail("the number is too large"))?;
        let ms = n.checked_mul(per).ok_or_else(|| fail("it is too long"))?;
        total_ms = total_ms.checked_add(ms).ok_or_else(|| fail("it is too long"))?;
        rest = after;
    }
    Ok(Duration::from_millis(total_ms))
}

impl<'de> serde::Deserialize<'de> for ConfigDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ConfigDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"500ms\", \"5s\" or \"24h\"")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                v.parse().map_err(E::custom)
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                if v == 0 {
                    Ok(ConfigDuration(Duration::ZERO))
                } else {
                    Err(E::custom(format!(
                        "{v} has no unit; write a string with a unit, e.g. \"{v}s\" or \"{v}ms\""
                    )))
                }
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// A duration for people: `500ms`, `1.414s`, `30s`, `2m 30s`, `24h`.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(ballast_config::duration::display(Duration::from_millis(1500)), "1.5s");
/// assert_eq!(ballast_config::duration::display(Duration::from_secs(86_400)), "24h");
/// ```
pub fn display(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return if d.is_zero() { "0s".into() } else { format!("{}µs", d.as_micros()) };
    }
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    if ms < 60_000 {
        let text = format!("{:.3}", d.as_secs_f64());
        let text = text.trim_end_matches('0').trim_end_matches('.');
        return format!("{text}s");
    }
    let secs = d.as_secs();
    let (m, s) = (secs / 60 % 60, secs % 60);
    // Under two days, hours read better ("24h", "36h"); past that, days ("7d").
    let (days, h) = if secs < 2 * 86_400 { (0, secs / 3_600) } else { (secs / 86_400, secs / 3_600 % 24) };
    let mut parts = Vec::new();
    if days > 0 {
        parts.push(format!("{days}d"));
    }
    if h > 0 {
        parts.push(format!("{h}h"));
    }
    if m > 0 {
        parts.push(format!("{m}m"));
    }
    if s > 0 {
        parts.push(format!("{s}s"));
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_issue_examples() {
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse("24h").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse("1h30m").unwrap(), Duration::from_secs(5_400));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
    }

    #[test]
    fn refuses_what_it_cannot_read_without_panicking() {
        for bad in
            ["", "5", "s", "5 s", "1.5s", "5x", "99999999999999999999999s", "18446744073709551615d", "-1s"]
        {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn displays_compactly() {
        assert_eq!(display(Duration::from_millis(500)), "500ms");
        assert_eq!(display(Duration::from_millis(1414)), "1.414s");
        assert_eq!(display(Duration::from_secs(20)), "20s");
        assert_eq!(display(Duration::from_secs(150)), "2m 30s");
        assert_eq!(display(Duration::ZERO), "0s");
        assert_eq!(display(Duration::from_secs(86_400)), "24h");
        assert_eq!(display(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(display(Duration::from_secs(36 * 3_600)), "36h");
    }
}
