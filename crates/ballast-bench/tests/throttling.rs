//! The adaptive rate limit against a partner API that allows 50 requests a
//! second and answers 429 + `Retry-After` beyond, called at 200 a second for
//! 30 s through an `HttpSystem`, on tokio's paused clock.

use ballast::RateLimit;
use ballast_bench::throttling::{run, ThrottlingRun};

#[test]
fn without_a_limit_most_attempts_are_429s() {
    let naive = run(ThrottlingRun::default(), None);
    assert!(naive.throttled_share() > 0.7, "{naive:?}");
}

#[test]
fn the_adaptive_limit_learns_the_partner_s_rate() {
    let scenario = ThrottlingRun::default();
    let adaptive = run(scenario, Some(RateLimit::per_second(100).burst(10).adaptive()));
    assert!(adaptive.throttled_share() <= 0.05, "after the first seconds at most 5 % are 429s: {adaptive:?}");
    assert!(
        adaptive.used_share(scenario.allowed) >= 0.9,
        "at least 90 % of the allowed rate is used: {adaptive:?}"
    );
    assert!(adaptive.refused > 0, "the calls over the rate are refused unsent: {adaptive:?}");
}
