//! The TOML model: what a `ballast.toml` may say, key by key.
//!
//! The key names are public — users' files depend on them. Every value is
//! optional so that a missing key becomes a finding that names it (and
//! where it should go) instead of a bare deserialization error. Each
//! section's structs live in the section's own module, beside its rules and
//! settings (`queue`, `serve`, `gateway`, `alerts`, `telemetry`,
//! `systems`), and are re-exported here; each section's list of keys is
//! gathered in the schema at the end of this module, so the loader can
//! refuse unknown keys with a "did you mean" suggestion. The model knows
//! the sections; no section knows the model: what they share (a part left
//! out with `"none"`, the shape of a schema) is in `schema.rs`.

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

impl File {
    /// What a system's rules read of the rest of the file.
    pub(crate) fn around(&self) -> crate::systems::rules::Around<'_> {
        crate::systems::rules::Around {
            queue: self.queue.as_ref(),
            serve: self.serve.as_ref(),
            gateway: self.gateway.as_ref(),
        }
    }
}

pub(crate) use crate::schema::Schema;
pub use crate::schema::{Part, NONE};
use Schema::{Named, Table, Tables};

pub(crate) const ROOT: Schema = Table(&[
    ("queue", Table(crate::queue::KEYS)),
    ("serve", Table(crate::serve::KEYS)),
    ("gateway", Table(crate::gateway::KEYS)),
    ("alerts", Table(&[("webhook", Tables(crate::alerts::WEBHOOK_KEYS))])),
    ("telemetry", Table(crate::telemetry::KEYS)),
    ("systems", Named(crate::systems::KEYS)),
]);
