//! The durable queue's schedule as a `[queue]` section configures it: the
//! one [`DurableSchedule`] value that `ballast lint` and `explain` reason
//! about and that `ballast serve` hands to its queue and worker
//! ([`QueueSettings::schedule`](crate::QueueSettings::schedule)), so the window
//! lint approves is the window the tasks have (R-RES-RE-1, R-RES-RE-5).

use ballast_vocab::queue::DurableSchedule;

use crate::model::QueueSection;

impl QueueSection {
    /// The schedule this section configures: the queue's defaults
    /// ([`DurableSchedule::default`]) for what it leaves out.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ballast_config::model::QueueSection;
    ///
    /// let schedule = QueueSection { max_attempts: Some(3), ..QueueSection::default() }.schedule();
    /// assert_eq!(schedule.max_attempts, 3);
    /// // 2 + 4 s of waits, plus one 5 s poll interval per wait:
    /// assert_eq!(schedule.waits_total(), Duration::from_secs(6 + 2 * 5));
    /// ```
    pub fn schedule(&self) -> DurableSchedule {
        let defaults = DurableSchedule::default();
        DurableSchedule {
            max_attempts: self
                .max_attempts
                .map_or(defaults.max_attempts, |n| u32::try_from(n).unwrap_or(u32::MAX)),
            poll_interval: self.poll_interval.map_or(defaults.poll_interval, |d| d.get()),
            backoff: defaults.backoff,
            max_age: self.max_age.map_or(defaults.max_age, |d| d.get()),
        }
    }
}
