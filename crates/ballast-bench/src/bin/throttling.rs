//! Prints BENCHMARKS.md's "Rate limits" table: a partner API that allows 50
//! requests a second (429 + `Retry-After: 1` beyond), called at 200 a second
//! for 30 s, without a rate limit, with fixed ones and with an adaptive one;
//! figures after the first 5 s. On tokio's paused clock: exact, repeatable.
//!
//! ```text
//! cargo run --release -p ballast-bench --bin throttling
//! ```

use ballast::RateLimit;
use ballast_bench::throttling::{run, ThrottlingRun};

fn main() {
    let scenario = ThrottlingRun::default();
    let rows: [(&str, Option<RateLimit>); 4] = [
        ("no rate limit", None),
        ("fixed, 100/s (a guess above the partner's limit)", Some(RateLimit::per_second(100).burst(10))),
        ("fixed, 50/s (the partner's own limit)", Some(RateLimit::per_second(50).burst(10))),
        ("adaptive, from 100/s", Some(RateLimit::per_second(100).burst(10).adaptive())),
    ];
    println!(
        "{} calls/s offered, {} allowed, {} s; figures after the first {} s\n",
        scenario.offered, scenario.allowed, scenario.seconds, scenario.warm_up
    );
    println!("| limiter | sent/s | answered 429 | accepted/s | of the allowed rate | refused unsent/s |");
    println!("|---|---|---|---|---|---|");
    let seconds = (scenario.seconds - scenario.warm_up) as f64;
    for (name, limit) in rows {
        let f = run(scenario, limit);
        println!(
            "| {name} | {:.1} | {:.1} % | {:.1} | {:.0} % | {:.1} |",
            f.sent as f64 / seconds,
            f.throttled_share() * 100.0,
            f.accepted_per_second,
            f.used_share(scenario.allowed) * 100.0,
            f.refused as f64 / seconds
        );
    }
}
