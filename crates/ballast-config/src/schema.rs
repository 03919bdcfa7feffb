//! What every section shares and the model gathers: a part of the
//! composition a file may leave out (`"none"`), and the shape of a
//! section's keys, which the loader reads to refuse unknown ones with a
//! suggestion. Below the sections and the model alike.

use serde::Deserialize;

/// A part of the composition as a file gives it: its own table, or
/// `"none"` to leave the part out on purpose. A part the file does not
/// mention at all is the guide's ([`ballast::guide`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Part<T> {
    /// `retry = "none"` (or `breaker`, `bulkhead`): left out on purpose.
    Off,
    /// A table of settings.
    On(T),
}

impl<T> Part<T> {
    /// The table, if the part is configured with one.
    pub fn section(&self) -> Option<&T> {
        match self {
            Part::On(t) => Some(t),
            Part::Off => None,
        }
    }
}

/// The word that leaves a part out.
pub const NONE: &str = "none";

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Part<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visit<T> {
            type Value = Part<T>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a table of settings, or the string \"none\" to leave this part out")
            }

            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Part<T>, E> {
                if value == NONE {
                    Ok(Part::Off)
                } else {
                    Err(E::invalid_value(serde::de::Unexpected::Str(value), &self))
                }
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Part<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Part::On)
            }
        }
        deserializer.deserialize_any(Visit(std::marker::PhantomData))
    }
}

/// Where a key may appear: the keys of each section, for refusing unknown
/// keys with a suggestion. Kept next to the structs so the two change together.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Schema {
    /// A table with these keys, each with its own schema.
    Table(&'static [(&'static str, Schema)]),
    /// A table whose keys are names chosen by the user (`[systems.NAME]`).
    Named(&'static [(&'static str, Schema)]),
    /// An array of tables with these keys (`[[alerts.webhook]]`).
    Tables(&'static [(&'static str, Schema)]),
    /// A plain value.
    Value,
}
