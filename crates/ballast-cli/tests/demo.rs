//! `ballast demo`: the naive client double-charges and duplicates
//! notifications on the seeded bad day; ballast, on the same day, does neither.

use std::process::Command;

/// The two counts of a report line `"<label>: naive <n>, ballast <m>"`.
fn counts(report: &str, label: &str) -> (u64, u64) {
    let prefix = format!("{label}: naive ");
    let line = report
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{report}"));
    let (naive, ballast) = line.split_once(", ballast ").expect("the line names both clients");
    (naive.parse().expect("a count"), ballast.parse().expect("a count"))
}

#[test]
fn quick_demo_ballast_never_repeats_a_side_effect() {
    let out = Command::new(env!("CARGO_BIN_EXE_ballast"))
        .args(["demo", "--quick", "--seed", "7"])
        .output()
        .expect("the binary runs");
    let report = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}\n{}", String::from_utf8_lossy(&out.stderr));

    for label in ["double charges", "duplicate notifications"] {
        let (naive, ballast) = counts(&report, label);
        assert_eq!(ballast, 0, "{label}: ballast must never repeat a side effect\n{report}");
        assert!(naive > 0, "{label}: the naive client should have repeated side effects\n{report}");
    }
}

#[test]
fn demo_refuses_bad_flags_with_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_ballast"))
        .args(["demo", "--orders", "0"])
        .output()
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--orders"));
}
