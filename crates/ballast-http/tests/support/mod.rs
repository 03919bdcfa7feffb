//! What several of these test binaries share besides ballast-test-support's
//! upstream.

use std::time::Duration;

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
