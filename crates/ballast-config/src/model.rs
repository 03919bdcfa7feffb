//! The TOML model: what a `ballast.toml` may say, key by key.
//!
//! The key names are public — users' files depend on them. Every value is
//! optional so that a missing key becomes a finding that names it (and
//! where it should go) instead of a bare deserialization error. Each
//! section's structs live in the section's own module, beside its rules and
//! settings (`queue`, `serve`, `gateway`, `alerts`, `telemetry`,
//! `systems`), and are re-exported here; each section's list of keys is
//! gathered in the schema at the end of this module, so the loader can
//! refuse unknown keys with a "did you mean" suggestion.

use std::collections::BTreeMap;

use serde::Deserialize;

pub use crate::alerts::{AlertsSection, WebhookSection};
pub use crate::gateway::GatewaySection;
pub use crate::queue::QueueSection;
pub use crate::serve::ServeSection;
pub use crate::systems::{
    BreakerSection, BulkheadSection, ClientSection, FollowSection, HeaderSource, RateLimitSection,
    RetrySection, RouteValue, System, TimeoutSection,
};
pub use crate::telemetry::TelemetrySection;

/// A whole configuration file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct File {
    /// `[queue]`: the durable task queue that takes over keyed writes.
    pub queue: Option<QueueSection>,
    /// `[serve]`: how `ballast serve` listens.
    pub serve: Option<ServeSection>,
    /// `[gateway]`: the outbound gateway of `ballast serve`; absent, no gateway.
    pub gateway: Option<GatewaySection>,
    /// `[alerts]`: where a task that failed for good is reported (R-RES-RE-5).
    pub alerts: Option<AlertsSection>,
    /// `[telemetry]`: where `ballast serve` exports its traces (OTLP/HTTP);
    /// the `OTEL_*` variables win over it.
    pub telemetry: Option<TelemetrySection>,
    /// `[systems.NAME]`: one entry per external system.
    #[serde(default)]
    pub systems: BTreeMap<String, System>,
}

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

use Schema::{Named, Table, Tables};

pub(crate) const ROOT: Schema = Table(&[
    ("queue", Table(crate::queue::KEYS)),
    ("serve", Table(crate::serve::KEYS)),
    ("gateway", Table(crate::gateway::KEYS)),
    ("alerts", Table(&[("webhook", Tables(crate::alerts::WEBHOOK_KEYS))])),
    ("telemetry", Table(crate::telemetry::KEYS)),
    ("systems", Named(crate::systems::KEYS)),
]);
