//! Tasks refused before anything was sent — an open breaker, no rate
//! permit, a full bulkhead — and postponed without counting the attempt:
//! through an outage a backlog meets that refusal thousands of times a
//! minute, so the log says it once a minute per kind, with how many and
//! the last reason; each task's own line is at debug, and
//! `ballast_task_attempts_total{outcome="postponed"}` counts every one.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// How often the postponements of a kind are said at most.
pub(super) const SAID_EVERY: Duration = Duration::from_secs(60);

/// The postponements not yet said, by kind.
#[derive(Debug)]
pub(super) struct Postponed {
    said_at: Option<Instant>,
    by_kind: BTreeMap<String, (u64, String)>,
}

impl Postponed {
    pub(super) fn new() -> Self {
        Self { said_at: None, by_kind: BTreeMap::new() }
    }

    /// Counts a task of `kind` postponed for `reason`, and says what was
    /// counted when a minute has passed since it last did (at once, the
    /// first time).
    pub(super) fn count(&mut self, kind: &str, reason: impl std::fmt::Display) {
        let (count, last) = self.by_kind.entry(kind.to_owned()).or_default();
        *count += 1;
        last.clear();
        let _ = std::fmt::Write::write_fmt(last, format_args!("{reason}"));
        if self.said_at.is_none_or(|at| at.elapsed() >= SAID_EVERY) {
            self.say();
        }
    }

    fn say(&mut self) {
        let within = self.said_at.map(|at| at.elapsed());
        for (kind, (count, last)) in std::mem::take(&mut self.by_kind) {
            let over = within.map_or_else(String::new, |d| format!(" in the last {}s", d.as_secs()));
            tracing::info!(
                %kind,
                postponed = count,
                last_reason = %last,
                "{count} task(s) of {kind} refused before anything was sent and postponed{over}, the attempts not counted"
            );
        }
        self.said_at = Some(Instant::now());
    }

    /// How many of `kind` are counted and not yet said.
    #[cfg(test)]
    pub(super) fn unsaid(&self, kind: &str) -> u64 {
        self.by_kind.get(kind).map_or(0, |(count, _)| *count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn postponements_are_said_once_a_minute_per_kind() {
        let mut postponed = Postponed::new();
        postponed.count("pay", "breaker open");
        assert_eq!(postponed.unsaid("pay"), 0, "the first is said at once");
        for _ in 0..500 {
            postponed.count("pay", "breaker open");
        }
        postponed.count("crm", "no permit");
        assert_eq!((postponed.unsaid("pay"), postponed.unsaid("crm")), (500, 1), "kept within the minute");
        tokio::time::advance(SAID_EVERY).await;
        postponed.count("pay", "breaker open");
        assert_eq!((postponed.unsaid("pay"), postponed.unsaid("crm")), (0, 0), "said a minute later");
    }
}
