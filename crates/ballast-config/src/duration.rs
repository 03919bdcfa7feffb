//! Durations as the configuration writes them: `"500ms"`, `"5s"`, `"24h"`,
//! or several parts such as `"1m30s"` (read by humantime), and as `ballast
//! explain` and the findings print them (`"1.414s"`, `"2m 30s"`).
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

impl std::str::FromStr for ConfigDuration {
    type Err = DurationError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        parse(input).map(ConfigDuration)
    }
}

/// Parses `"500ms"`, `"5s"`, `"2m"`, `"24h"`, `"7d"`, `"1m30s"` or `"0"`:
/// whole numbers, each with its unit, without spaces. humantime reads them,
/// so its long unit names (`"2min"`, `"3days"`) are accepted too.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    use humantime::DurationError as Error;
    let fail = |reason| DurationError { input: input.to_owned(), reason };
    let text = input.trim();
    // humantime also reads "1.5s", "1m 30s" and "1M" (a month); a configuration
    // keeps to whole numbers and lower-case units, where "m" is only ever minutes.
    if let Some(c) = text.chars().find(|c| !(c.is_ascii_digit() || c.is_ascii_lowercase())) {
        return Err(fail(match c {
            '.' => "fractions are not read; use a smaller unit, e.g. \"1500ms\"",
            c if c.is_whitespace() => "it has a space in it; write the parts together, e.g. \"1m30s\"",
            c if c.is_ascii_uppercase() => "units are lower-case: ms, s, m, h, d",
            _ => "expected a whole number",
        }));
    }
    humantime::parse_duration(text).map_err(|e| {
        fail(match e {
            Error::Empty => "it is empty",
            Error::NumberExpected(_) | Error::InvalidCharacter(_) => "expected a whole number",
            Error::UnknownUnit { unit, .. } if unit.is_empty() => "a number has no unit",
            Error::UnknownUnit { .. } => "the unit is not one of ms, s, m, h, d",
            Error::NumberOverflow => "it is too long",
        })
    })
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
        return match d.as_micros() {
            0 if d.is_zero() => "0s".into(),
            0 => format!("{}ns", d.as_nanos()),
            us => format!("{us}µs"),
        };
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
