//! The worst-case timeline of each system's policy: in-memory attempts and
//! waits, the window they add up to, then the durable schedule that takes
//! over and how long the idempotency key must live.

use std::fmt;
use std::time::Duration;

use ballast::{
    guide, Breaker, Retry, Severity, Strategy, TimelineAttempt, Timeout, WINDOW_ERROR, WINDOW_WARNING,
};

use crate::model::Part;

use crate::config::Config;
use crate::duration::display;
use crate::error::ConfigError;
use crate::suggest::did_you_mean;
use ballast_vocab::queue::DurableSchedule;

/// The timelines of one file's systems; `Display` prints them for people.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// The file, as named.
    pub file: String,
    /// One timeline per system explained.
    pub systems: Vec<SystemExplanation>,
}

/// One system's worst case: every attempt times out and every wait is the longest.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemExplanation {
    /// The system.
    pub name: String,
    /// The composition in one line.
    pub composition: String,
    /// The declared routes, `POST /payments → keyed_write`.
    pub routes: Vec<String>,
    /// What becomes of a write no route matches (when there are routes).
    pub unrouted: ballast_vocab::http::routes::Unrouted,
    /// Lint findings of the system: errors, warnings, notes.
    pub findings: (usize, usize, usize),
    /// The in-memory worst case, as the core computes it (R-RES-RE-4).
    pub in_memory: ballast::Timeline,
    /// Whether keyed writes are retried (`dedupes_by_key = true`, R-RES-RE-1).
    pub writes_retried: bool,
    /// The durable schedule that takes over keyed writes, if there is a `[queue]`.
    pub durable: Option<Durable>,
    /// The system's `key_ttl`, if declared.
    pub key_ttl: Option<Duration>,
    /// How long a keyed write may still be retried (what `key_ttl` must exceed).
    pub key_needed: Duration,
    /// How the system is reached — TLS roots and client certificate, the
    /// proxy, HTTP/2, the token — when the file says anything of it; files
    /// and variables named, never a secret.
    pub reached: Option<String>,
}

/// One durable attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableStep {
    /// The attempt, from 1.
    pub attempt: u32,
    /// When it starts, worst case, from the hand-over.
    pub start: Duration,
    /// The shortest and longest wait after it, unless it is the last.
    pub wait: Option<(Duration, Duration)>,
}

/// The durable schedule after the in-memory window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Durable {
    /// The queue's schedule.
    pub schedule: DurableSchedule,
    /// The durable attempts printed one by one; those past the cap are folded.
    pub steps: Vec<DurableStep>,
    /// The first attempt whose wait is capped, when later ones are folded.
    pub folded_from: Option<u32>,
    /// Waits and polls between durable attempts, worst case.
    pub waits: Duration,
}

impl Config {
    /// The timeline of system `only`, or of every system.
    pub fn explain(&self, only: Option<&str>) -> Result<Explanation, ConfigError> {
        let names: Vec<&str> = match only {
            Some(name) if self.system(name).is_none() => {
                return Err(ConfigError::UnknownSystem {
                    name: name.to_owned(),
                    file: self.source.name().to_owned(),
                    suggestion: did_you_mean(name, self.system_names()).map(str::to_owned),
                })
            }
            Some(name) => vec![name],
            None => self.system_names().collect(),
        };
        let systems = names.into_iter().map(|name| self.timeline(name)).collect();
        Ok(Explanation { file: self.source.name().to_owned(), systems })
    }

    fn timeline(&self, name: &str) -> SystemExplanation {
        let system = self.file.systems.get(name).cloned().unwrap_or_default();
        let crate::systems::translate::Translated { builder, retry, timeout, routes, unrouted, .. } =
            crate::systems::translate::translate(name, &system);
        let findings = self.lint_system(name);
        let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
        let in_memory = builder.timeline();
        let window = in_memory.window;
        let writes_retried = system.dedupes_by_key == Some(true);
        let durable = self.file.queue.as_ref().map(|q| durable(q.schedule(), window));
        SystemExplanation {
            name: name.to_owned(),
            composition: composition(&system, &retry, &timeout),
            routes: routes
                .iter()
                .map(|r| {
                    let timeout = r
                        .attempt_timeout()
                        .map(|t| format!(", {} per attempt", display(t)))
                        .unwrap_or_default();
                    let follow = r
                        .followed()
                        .map(|f| {
                            let until = match f.field_name() {
                                Some(field) => {
                                    let done = f.done_values().collect::<Vec<_>>().join(" | ");
                                    format!("until {field} is {done}")
                                }
                                None => "until a status other than 202".to_owned(),
                            };
                            format!(
                                ", a 202's operation followed {until}, for at most {}",
                                display(f.deadline_after())
                            )
                        })
                        .unwrap_or_default();
                    format!("{} → {}{timeout}{follow}", r.name(), r.kind())
                })
                .collect(),
            unrouted: unrouted.unwrap_or_default(),
            findings: (count(Severity::Error), count(Severity::Warning), count(Severity::Note)),
            in_memory,
            writes_retried,
            durable,
            key_ttl: system.key_ttl.map(|d| d.get()),
            key_needed: crate::systems::rules::required_key_ttl(self.file.queue.as_ref(), window),
            reached: crate::systems::connection::explain(&system),
        }
    }
}

fn durable(schedule: DurableSchedule, window: Duration) -> Durable {
    let mut steps = Vec::new();
    let mut folded_from = None;
    let mut start = Duration::ZERO;
    for attempt in 1..=schedule.max_attempts {
        let wait = (attempt < schedule.max_attempts).then(|| schedule.wait_after(attempt));
        let capped = attempt > 1 && schedule.wait_after(attempt - 1) == schedule.wait_after(attempt);
        if capped && schedule.max_attempts - attempt >= 2 {
            // Every later wait is the cap: fold them into one row instead of
            // printing up to u32::MAX of them.
            folded_from = Some(attempt);
            break;
        }
        steps.push(DurableStep { attempt, start, wait });
        start = start
            .saturating_add(window)
            .saturating_add(wait.map_or(Duration::ZERO, |w| w.1))
            .saturating_add(schedule.poll_interval);
    }
    Durable { schedule, steps, folded_from, waits: schedule.waits_total() }
}

/// Where a part's values came from, for the composition line.
fn origin<T>(part: &Option<Part<T>>) -> &'static str {
    match part {
        None => " [the guide's default; `= \"none\"` leaves it out]",
        Some(_) => "",
    }
}

fn composition(system: &crate::model::System, retry: &Retry, timeout: &Timeout) -> String {
    let backoff = retry.get_backoff();
    let mut parts = Vec::new();
    match &system.retry {
        Some(Part::Off) => parts.push("retry (none: 1 attempt, `retry = \"none\"`)".to_owned()),
        _ if retry.max_attempts() <= 1 => parts.push("retry (none: 1 attempt)".to_owned()),
        part => parts.push(format!(
            "retry ({} attempts, {} backoff from ~{}, capped at {}){}",
            retry.max_attempts(),
            if backoff.is_full_jitter() { "exponential full-jitter" } else { "exponential" },
            display(backoff.median_first()),
            display(backoff.cap()),
            origin(part)
        )),
    }
    match &system.breaker {
        Some(Part::Off) => parts.push("no breaker (`breaker = \"none\"`)".to_owned()),
        Some(Part::On(b)) => {
            let kind = b.kind.as_deref().unwrap_or("?");
            let detail = match kind {
                "count" => format!(
                    "count: opens at {}% failures of the last {} calls",
                    b.threshold.map_or(0.0, |t| t * 100.0),
                    b.size.unwrap_or(0)
                ),
                "sampling" => format!(
                    "sampling: opens at {}% failures over {}",
                    b.threshold.map_or(0.0, |t| t * 100.0),
                    b.duration.map_or_else(|| "?".to_owned(), |d| display(d.get()))
                ),
                "consecutive" => {
                    format!("consecutive: opens after {} failures in a row", b.threshold.unwrap_or(0.0))
                }
                other => other.to_owned(),
            };
            let half_open = b.half_open_after.map_or(Breaker::DEFAULT_HALF_OPEN, |d| d.get());
            let fleet = if b.scope.as_deref() == Some("fleet") {
                format!(
                    ", the fleet's: opens for every replica once {} see it failing",
                    b.quorum.unwrap_or(2)
                )
            } else {
                String::new()
            };
            parts.push(format!("breaker ({detail}, half-open after {}{fleet})", display(half_open)));
        }
        None => parts.push(format!(
            "breaker (count: opens at {}% failures of the last {} calls, half-open after {}){}",
            guide::BREAKER_THRESHOLD * 100.0,
            guide::BREAKER_SIZE,
            display(Breaker::DEFAULT_HALF_OPEN),
            origin(&system.breaker)
        )),
    }
    match &system.bulkhead {
        Some(Part::Off) => parts.push("no bulkhead (`bulkhead = \"none\"`)".to_owned()),
        Some(Part::On(b)) => parts.push(format!(
            "bulkhead ({} at once, queue {}, {}% kept for live calls)",
            b.limit.unwrap_or(0),
            b.queue.unwrap_or(0),
            (b.reserve_live.unwrap_or(ballast::DEFAULT_RESERVE_LIVE) * 100.0).round()
        )),
        None => parts.push(format!(
            "bulkhead ({} at once, queue {}){}",
            guide::BULKHEAD_LIMIT,
            guide::BULKHEAD_QUEUE,
            origin(&system.bulkhead)
        )),
    }
    if let Some(r) = &system.rate_limit {
        let mut detail = r.rate.clone().unwrap_or_default();
        if let Some(burst) = r.burst {
            detail.push_str(&format!(", burst {burst}"));
        }
        if let Some(wait) = r.wait {
            detail.push_str(&format!(", waits up to {}", display(wait.get())));
        }
        if r.adaptive == Some(true) {
            detail.push_str(", adaptive");
        }
        detail.push_str(match r.scope.as_deref() {
            Some("fleet") => ", held by the fleet together",
            _ => ", per replica: N replicas send N times it",
        });
        parts.push(format!("rate limit ({detail})"));
    }
    let strategy = match timeout.strategy() {
        Strategy::Aggressive => "aggressive",
        Strategy::Cooperative => "cooperative",
    };
    let total = timeout.total_deadline().map(|t| format!(", total {}", display(t))).unwrap_or_default();
    let timeout_origin = if system.timeout.is_none() { " [the guide's default]" } else { "" };
    parts.push(format!(
        "timeout ({} per attempt, {strategy}{total}){timeout_origin}",
        display(timeout.attempt())
    ));
    parts.join(" → ")
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, system) in self.systems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{system}")?;
        }
        Ok(())
    }
}

use ballast_vocab::http::routes::Unrouted;

impl fmt::Display for SystemExplanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The name is the one string taken verbatim from the file.
        writeln!(f, "system `{}`", crate::report::printable(&self.name))?;
        writeln!(f, "  composition: {}", crate::report::printable(&self.composition))?;
        if let Some(reached) = &self.reached {
            writeln!(f, "  reached: {}", crate::report::printable(reached))?;
        }
        if !self.routes.is_empty() {
            let rest = match self.unrouted {
                Unrouted::Refuse => "a write no route matches is refused unsent",
                Unrouted::Once => "a write no route matches is sent once",
                Unrouted::ByMethod => "the rest by method and key",
            };
            writeln!(f, "  routes ({rest}; paths in any spelling):")?;
            for route in &self.routes {
                writeln!(f, "    {}", crate::report::printable(route))?;
            }
        }
        let (e, w, n) = self.findings;
        if e + w + n == 0 {
            writeln!(f, "  lint: clean")?;
        } else {
            writeln!(
                f,
                "  lint: {e} error(s), {w} warning(s), {n} note(s) — run `ballast lint` for details"
            )?;
        }
        writeln!(f)?;
        writeln!(f, "  in memory, worst case (every attempt times out, every wait is the longest):")?;
        let memory = &self.in_memory;
        for TimelineAttempt { attempt, start, permit_wait, timeout_at, wait } in &memory.attempts {
            if !permit_wait.is_zero() {
                writeln!(
                    f,
                    "    attempt {attempt:<2} may wait {:>9} for a rate-limit permit",
                    display(*permit_wait)
                )?;
            }
            write!(
                f,
                "    attempt {attempt:<2} starts {:>9}   times out {:>9}",
                display(*start),
                display(*timeout_at)
            )?;
            match wait {
                Some(b) => writeln!(
                    f,
                    "   then waits {} / {} / {} (min / median / max)",
                    display(b.min),
                    display(b.median),
                    display(b.max)
                )?,
                None => writeln!(f)?,
            }
        }
        if let (Some(attempt), Some(total)) = (memory.cut_by_total, memory.total) {
            writeln!(
                f,
                "    attempt {attempt:<2} made only if its wait ends before the total deadline ({}); in the worst case it is not",
                display(total)
            )?;
        }
        let bound = memory.total.map(|t| format!(", bounded by total = {}", display(t))).unwrap_or_default();
        let (error, warning) = (WINDOW_ERROR.as_secs(), WINDOW_WARNING.as_secs());
        let verdict = if memory.window > WINDOW_ERROR {
            format!("over {error} s: error, hand this to the durable queue (R-RES-RE-4)")
        } else if memory.window > WINDOW_WARNING {
            format!("over {warning} s: warning, normally the durable queue's job (R-RES-RE-4)")
        } else {
            format!("within {warning} s (R-RES-RE-4)")
        };
        writeln!(
            f,
            "  in-memory window: {} (attempt timeouts + longest waits{bound}) — {verdict}",
            display(memory.window)
        )?;
        writeln!(f)?;
        if !self.writes_retried {
            writeln!(
                f,
                "  writes are never retried: `dedupes_by_key` is not true, so no durable hand-over and no key TTL to check (R-RES-RE-1)"
            )?;
            return Ok(());
        }
        match &self.durable {
            None => writeln!(f, "  no [queue]: nothing takes over after the in-memory window")?,
            Some(d) => {
                let s = &d.schedule;
                writeln!(
                    f,
                    "  durable queue, takes over keyed writes with the same key: up to {} attempts, each running the policy (≤ {})",
                    s.max_attempts,
                    display(self.in_memory.window)
                )?;
                writeln!(
                    f,
                    "    wait after durable attempt n: 2^n s capped at {}, jittered within [half, all] of it, + up to one poll ({})",
                    display(s.backoff.nominal(u32::MAX)),
                    display(s.poll_interval)
                )?;
                for DurableStep { attempt, start, wait } in &d.steps {
                    write!(f, "    attempt {attempt:<2} starts {:>11} after the hand-over", display(*start))?;
                    match wait {
                        Some((min, max)) => {
                            writeln!(f, "   then waits {} – {}", display(*min), display(*max))?
                        }
                        None => {
                            writeln!(f, "   last: on failure the task is marked failed and the alert fires")?
                        }
                    }
                }
                if let Some(from) = d.folded_from {
                    let (min, max) = s.wait_after(from);
                    writeln!(
                        f,
                        "    attempts {from}–{}: each waits {} – {} (the cap); the last one fails the task and fires the alert",
                        s.max_attempts,
                        display(min),
                        display(max)
                    )?;
                }
                writeln!(
                    f,
                    "  durable schedule: {} of waits and polls + {} × {} of attempts",
                    display(d.waits),
                    s.max_attempts,
                    display(self.in_memory.window)
                )?;
                let stop = match self.key_ttl {
                    Some(ttl) => format!(
                        "its key_ttl ({}) after the first attempt, less one in-memory window: past it",
                        display(ttl)
                    ),
                    None => {
                        format!("[queue] max_age ({}) after the first attempt: past it", display(s.max_age))
                    }
                };
                writeln!(
                    f,
                    "  attempts refused before anything is sent (breaker open, bulkhead full, system not configured) \
                     are postponed without counting; none is sent later than {stop} the task fails and the alert fires \
                     (R-RES-RE-1)"
                )?;
            }
        }
        let formula = match &self.durable {
            Some(d) => format!(
                " = {} in memory + {} × {} durable attempts + {} of durable waits",
                display(self.in_memory.window),
                d.schedule.max_attempts,
                display(self.in_memory.window),
                display(d.waits)
            ),
            None => " (the in-memory window)".to_owned(),
        };
        writeln!(f, "  a keyed write may still be retried up to {}{formula}", display(self.key_needed))?;
        match self.key_ttl {
            Some(ttl) if ttl >= self.key_needed => {
                writeln!(f, "  key_ttl {}: the key outlives every retry (R-RES-RE-1)", display(ttl))
            }
            Some(ttl) => writeln!(
                f,
                "  key_ttl {}: TOO SHORT, a late retry would be applied twice (R-RES-RE-1)",
                display(ttl)
            ),
            None => writeln!(
                f,
                "  key_ttl: not declared; it must exceed {} (R-RES-RE-1)",
                display(self.key_needed)
            ),
        }
    }
}
