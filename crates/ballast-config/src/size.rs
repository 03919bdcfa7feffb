//! Sizes as the configuration writes them: a number of bytes, or a string
//! with a unit such as `"512KiB"` or `"1MiB"` (read by the `bytesize` crate).

use std::fmt;

/// A size in bytes read from the configuration.
///
/// ```
/// use ballast_config::ConfigSize;
///
/// let size: ConfigSize = "1MiB".parse().unwrap();
/// assert_eq!(size.bytes(), 1 << 20);
/// assert!("lots".parse::<ConfigSize>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ConfigSize(pub u64);

impl ConfigSize {
    /// The size in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }
}

/// A size string that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{input:?} is not a size: write a number of bytes or a number and a unit, e.g. \"512KiB\" or \"1MiB\""
)]
pub struct SizeError {
    /// The text given.
    pub input: String,
}

impl std::str::FromStr for ConfigSize {
    type Err = SizeError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        input
            .trim()
            .parse::<bytesize::ByteSize>()
            .map(|size| ConfigSize(size.as_u64()))
            .map_err(|_| SizeError { input: input.to_owned() })
    }
}

impl fmt::Display for ConfigSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", bytesize::ByteSize::b(self.0).display().iec())
    }
}

impl<'de> serde::Deserialize<'de> for ConfigSize {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ConfigSize;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as 1048576 or \"1MiB\"")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                v.parse().map_err(E::custom)
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(ConfigSize(v))
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                u64::try_from(v)
                    .map(ConfigSize)
                    .map_err(|_| E::custom(format!("{v} is negative: a size is 0 or more bytes")))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}
