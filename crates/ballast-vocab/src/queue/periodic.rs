//! When a periodic task's periods start ([`Schedule`]: an interval's grid
//! since the Unix epoch, or a cron expression's times in UTC) and what a
//! worker enqueues for periods that went by while none ran ([`CatchUp`]):
//! read by the queue that enqueues them and by `ballast lint` that checks
//! a period against its task's retry window.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The most missed periods [`CatchUp::All`] enqueues after a stop.
pub const MAX_CATCH_UP: usize = 1000;

/// The shortest period: a second.
pub const MIN_PERIOD: Duration = Duration::from_secs(1);

/// Whether `name` may name a periodic task: each period's task is keyed
/// `periodic:{name}:{start}` (the period's start in seconds since the
/// epoch), and that must be an idempotency key whatever the start — 1 to
/// 255 visible ASCII characters, so a name of at most 225 without spaces.
/// The one check `ballast lint` and the worker both make.
///
/// ```
/// use ballast_vocab::queue::check_periodic_name;
/// assert!(check_periodic_name("reconcile").is_ok());
/// assert!(check_periodic_name("nightly report").is_err()); // a space
/// ```
pub fn check_periodic_name(name: &str) -> Result<(), String> {
    crate::IdempotencyKey::parse(&format!("periodic:{name}:{}", u64::MAX)).map(drop).map_err(|e| {
        format!(
            "the name {name:?} does not make its periods' task keys (periodic:{name}:START): {e}; \
             name it with at most 225 visible ASCII characters, no spaces"
        )
    })
}

/// When a periodic task's periods start.
#[derive(Clone)]
pub struct Schedule(Grid);

#[derive(Clone)]
enum Grid {
    Every(Duration),
    Cron(Box<croner::Cron>, String),
}

impl PartialEq for Schedule {
    /// The same interval, or the same cron expression as written.
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Grid::Every(a), Grid::Every(b)) => a == b,
            (Grid::Cron(_, a), Grid::Cron(_, b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Schedule {}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Grid::Every(every) => write!(f, "every {every:?}"),
            Grid::Cron(_, text) => write!(f, "cron {text:?}"),
        }
    }
}

impl fmt::Display for Schedule {
    /// As a configuration could write it: `every 5m`, `every 1m 30s`,
    /// `cron "0 6 * * *"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Grid::Every(every) => write!(f, "every {}", humantime::format_duration(*every)),
            Grid::Cron(_, text) => write!(f, "cron {text:?}"),
        }
    }
}

/// A schedule that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The interval is under a second.
    #[error("a periodic task's interval must be at least {MIN_PERIOD:?}, not {0:?}")]
    TooShort(Duration),
    /// The cron expression does not parse.
    #[error("the cron expression {expression:?} does not parse: {reason}")]
    BadCron {
        /// The expression.
        expression: String,
        /// Why.
        reason: String,
    },
}

impl Schedule {
    /// A period every `interval` (at least a second), starting at the
    /// multiples of `interval` since the Unix epoch: `every(60 s)` starts
    /// on every whole minute, on every replica alike.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ballast_vocab::queue::Schedule;
    ///
    /// let minutely = Schedule::every(Duration::from_secs(60)).unwrap();
    /// assert!(Schedule::every(Duration::from_millis(10)).is_err());
    /// # let _ = minutely;
    /// ```
    pub fn every(interval: Duration) -> Result<Self, ScheduleError> {
        if interval < MIN_PERIOD {
            return Err(ScheduleError::TooShort(interval));
        }
        Ok(Self(Grid::Every(interval)))
    }

    /// Periods starting at the times a cron expression names, in UTC: five
    /// fields (`0 6 * * *`, 06:00 every day) or six with seconds first.
    ///
    /// ```
    /// use ballast_vocab::queue::Schedule;
    ///
    /// let daily = Schedule::cron("0 6 * * *").unwrap();
    /// assert!(Schedule::cron("every day").is_err());
    /// # let _ = daily;
    /// ```
    pub fn cron(expression: &str) -> Result<Self, ScheduleError> {
        let bad = |reason: String| ScheduleError::BadCron { expression: expression.to_owned(), reason };
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .build()
            .parse(expression)
            .map_err(|e| bad(e.to_string()))?;
        let schedule = Self(Grid::Cron(Box::new(cron), expression.to_owned()));
        // An expression that never matches (`0 0 30 2 *`) has no period at all.
        if schedule.after(UNIX_EPOCH + Duration::from_secs(1_700_000_000)).is_none() {
            return Err(bad("it names no time that will ever come".to_owned()));
        }
        Ok(schedule)
    }

    /// The start of the period `at` falls in: the latest start at or before it.
    pub fn at_or_before(&self, at: SystemTime) -> Option<SystemTime> {
        match &self.0 {
            Grid::Every(every) => {
                let since = at.duration_since(UNIX_EPOCH).ok()?;
                let periods = since.as_nanos() / every.as_nanos();
                Some(UNIX_EPOCH + from_nanos(periods * every.as_nanos()))
            }
            Grid::Cron(cron, _) => {
                let at = chrono::DateTime::<chrono::Utc>::from(whole_seconds(at)?);
                cron.find_previous_occurrence(&at, true).ok().map(SystemTime::from)
            }
        }
    }

    /// The first period start strictly after `at`.
    pub fn after(&self, at: SystemTime) -> Option<SystemTime> {
        match &self.0 {
            Grid::Every(every) => {
                let start = self.at_or_before(at)?;
                start.checked_add(*every)
            }
            Grid::Cron(cron, _) => {
                let at = chrono::DateTime::<chrono::Utc>::from(whole_seconds(at)?);
                cron.find_next_occurrence(&at, false).ok().map(SystemTime::from)
            }
        }
    }

    /// The last period start strictly before `at`.
    pub fn before(&self, at: SystemTime) -> Option<SystemTime> {
        let just_before = at.checked_sub(Duration::from_nanos(1))?;
        self.at_or_before(just_before)
    }

    /// The shortest time between two period starts (for a cron expression,
    /// over a year of its times from 2026 on): what a period's task must
    /// finish within, retries included, not to overlap the next.
    pub fn shortest_period(&self) -> Duration {
        self.gaps().0
    }

    /// The longest time between two period starts (for a cron expression,
    /// over a year of its times from 2026 on): how long a period's task must
    /// be kept, for its key to keep a restart from enqueuing it again.
    pub fn longest_period(&self) -> Duration {
        self.gaps().1
    }

    fn gaps(&self) -> (Duration, Duration) {
        match &self.0 {
            Grid::Every(every) => (*every, *every),
            Grid::Cron(..) => {
                let from = UNIX_EPOCH + Duration::from_secs(1_767_225_600);
                let end = from + Duration::from_secs(366 * 24 * 3600);
                let Some(mut at) = self.after(from) else { return (Duration::MAX, Duration::MAX) };
                let (mut shortest, mut longest) = (Duration::MAX, Duration::ZERO);
                for _ in 0..100_000 {
                    let Some(next) = self.after(at) else { break };
                    if next > end {
                        break;
                    }
                    if let Ok(gap) = next.duration_since(at) {
                        shortest = shortest.min(gap);
                        longest = longest.max(gap);
                    }
                    at = next;
                }
                (shortest, longest.max(shortest.min(Duration::from_secs(366 * 24 * 3600))))
            }
        }
    }
}

/// `at` without its fraction of a second: cron's times are whole seconds,
/// and croner keeps the fraction of the time it is given.
fn whole_seconds(at: SystemTime) -> Option<SystemTime> {
    let since = at.duration_since(UNIX_EPOCH).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(since.as_secs()))
}

fn from_nanos(nanos: u128) -> Duration {
    Duration::new((nanos / 1_000_000_000) as u64, (nanos % 1_000_000_000) as u32)
}

/// What a worker enqueues for the periods that went by while no worker ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CatchUp {
    /// The latest missed period only (the default): one run after a stop,
    /// however long it was.
    #[default]
    Latest,
    /// Every missed period since the last one enqueued, oldest first, at
    /// most [`MAX_CATCH_UP`] (with none enqueued within that many periods —
    /// a first start — the current period only).
    All,
    /// None: the next period that starts while a worker runs.
    None,
}

impl CatchUp {
    /// Every choice.
    pub const ALL: [CatchUp; 3] = [CatchUp::Latest, CatchUp::All, CatchUp::None];

    /// The choice configured as `text` (`latest`, `all`, `none`).
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|choice| choice.as_str() == text)
    }

    /// As configured: `latest`, `all`, `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::Latest => "latest",
            CatchUp::All => "all",
            CatchUp::None => "none",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn an_interval_s_periods_are_the_epoch_s_multiples() {
        let minute = Schedule::every(Duration::from_secs(60)).unwrap();
        assert_eq!(minute.at_or_before(at(1_000_030)), Some(at(1_000_020)));
        assert_eq!(minute.at_or_before(at(1_000_020)), Some(at(1_000_020)), "a start is its own period");
        assert_eq!(minute.after(at(1_000_020)), Some(at(1_000_080)), "strictly after");
        assert_eq!(minute.before(at(1_000_020)), Some(at(999_960)));
        assert_eq!(minute.shortest_period(), Duration::from_secs(60));
        assert_eq!(minute.to_string(), "every 1m");
        assert_eq!(Schedule::every(Duration::from_secs(90)).unwrap().to_string(), "every 1m 30s");
        assert_eq!(Schedule::every(Duration::from_secs(7200)).unwrap().to_string(), "every 2h");
    }

    #[test]
    fn a_cron_expression_s_periods_are_its_times_in_utc() {
        let six = Schedule::cron("0 6 * * *").unwrap();
        // 2026-12-05 02:00:00 UTC
        let now = at(1_764_900_000);
        assert_eq!(six.at_or_before(now), Some(at(1_764_828_000)), "06:00 the day before");
        assert_eq!(six.after(now), Some(at(1_764_914_400)), "06:00 today");
        assert_eq!(six.shortest_period(), Duration::from_secs(24 * 3600));
        assert_eq!(six.longest_period(), Duration::from_secs(24 * 3600));
        assert_eq!(six.to_string(), r#"cron "0 6 * * *""#);
        // A fraction of a second changes nothing: a period's start is whole
        // seconds, and the walk back from it reaches the day before.
        let start = six.at_or_before(now + Duration::from_millis(123)).unwrap();
        assert_eq!(start, at(1_764_828_000));
        assert_eq!(six.before(start), Some(at(1_764_741_600)));
        assert_eq!(six.after(at(1_764_914_400) + Duration::from_millis(500)), Some(at(1_765_000_800)));
        let monthly = Schedule::cron("0 0 1 * *").unwrap();
        assert_eq!(monthly.longest_period(), Duration::from_secs(31 * 24 * 3600));
        let err = Schedule::cron("0 0 30 2 *").unwrap_err();
        assert!(err.to_string().contains("no time that will ever come"), "{err}");
        assert!(Schedule::cron("61 * * * *").is_err());
    }
}
