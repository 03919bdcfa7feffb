//! Errors a worker meets again and again — a database that is down, a full
//! disk — logged once per distinct error per interval, with how many like
//! it were held back, instead of a line at every retry: an operator reads
//! the cause, the log does not fill the disk it is complaining about.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The interval each distinct error is logged at most once in.
pub(crate) const QUIET_FOR: Duration = Duration::from_secs(30);

/// Keeps, per distinct error text, when it was last logged and how many
/// times it came since.
#[derive(Debug, Default)]
pub(crate) struct Quiet(Mutex<HashMap<String, (Instant, u64)>>);

impl Quiet {
    /// Whether `error` is to be logged now, and if so how many times it
    /// came since it last was (0 for a new error).
    pub(crate) fn let_through(&self, error: &str) -> Option<u64> {
        let now = Instant::now();
        let mut seen = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // An error gone quiet for a whole interval is forgotten.
        seen.retain(|_, (at, held)| now.duration_since(*at) < QUIET_FOR || *held > 0);
        match seen.get_mut(error) {
            Some((at, held)) if now.duration_since(*at) < QUIET_FOR => {
                *held += 1;
                None
            }
            Some((at, held)) => {
                let since = *held;
                (*at, *held) = (now, 0);
                Some(since)
            }
            None => {
                seen.insert(error.to_owned(), (now, 0));
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn each_error_once_an_interval_with_the_count_held_back() {
        let quiet = Quiet::default();
        assert_eq!(quiet.let_through("disk full"), Some(0));
        for _ in 0..119 {
            tokio::time::advance(Duration::from_millis(250)).await;
            assert_eq!(quiet.let_through("disk full"), None, "within the interval");
        }
        assert_eq!(quiet.let_through("database down"), Some(0), "another error is its own");
        tokio::time::advance(Duration::from_millis(250)).await;
        assert_eq!(quiet.let_through("disk full"), Some(119), "then once, with the count");
    }
}
