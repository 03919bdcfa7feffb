//! What `ballast serve` tells the world about itself besides `/metrics`: its
//! log, one line per notable event on stderr, at `RUST_LOG` (default
//! `info`).
//!
//! The log records events only, never spans: the fmt layer would format
//! every span's fields into a string when the span is made, which on the
//! gateway's hot path costs more than the rest of a call's policy, for lines
//! nobody prints. Spans are made only when a layer that wants them (a
//! tracing exporter) is installed.

use tracing_subscriber::filter::{filter_fn, EnvFilter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// Installs `ballast serve`'s log as the global subscriber; `false` if one
/// was installed already.
pub fn init() -> bool {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter)
        .with_filter(filter_fn(|meta| meta.is_event()));
    tracing_subscriber::registry().with(log).try_init().is_ok()
}
