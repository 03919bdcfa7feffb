//! The `ballast` binary: exit codes, formats and the snapshot of its output.

use std::process::{Command, Output};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../ballast-config/tests/fixtures");

fn ballast(args: &[&str]) -> Output {
    // Run from the workspace root so file names in the output are stable and relative.
    Command::new(env!("CARGO_BIN_EXE_ballast"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn lint_exit_codes() {
    let clean = ballast(&["lint", "examples/ballast.toml"]);
    assert_eq!(clean.status.code(), Some(0), "{}", stdout(&clean));

    let warning_only = ballast(&["lint", &format!("{FIXTURES}/re4_warning.toml")]);
    assert_eq!(warning_only.status.code(), Some(0));

    let errors = ballast(&["lint", &format!("{FIXTURES}/bad.toml")]);
    assert_eq!(errors.status.code(), Some(1));

    let unknown = ballast(&["lint", &format!("{FIXTURES}/unknown_key.toml")]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stdout(&unknown).contains("unknown_key.toml:3:1"), "{}", stdout(&unknown));

    let missing = ballast(&["lint", "no/such/file.toml", "examples/ballast.toml"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stdout(&missing).contains("no/such/file.toml"));
}

#[test]
fn lint_human_output_snapshot() {
    let out = ballast(&["lint", "crates/ballast-config/tests/fixtures/bad.toml"]);
    let expected = include_str!("snapshots/lint_bad.txt");
    assert_eq!(stdout(&out), expected);
}

#[test]
fn lint_json_is_one_array_across_files() {
    let out = ballast(&[
        "lint",
        "--format",
        "json",
        "crates/ballast-config/tests/fixtures/x4.toml",
        "crates/ballast-config/tests/fixtures/cb1.toml",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let expected = include_str!("snapshots/lint_x4_cb1.json");
    assert_eq!(stdout(&out), expected);
}

#[test]
fn explain_one_system() {
    let out = ballast(&["explain", "examples/ballast.toml", "--system", "sber"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(text.starts_with("system `sber`"), "{text}");
    assert!(text.contains("in-memory window: 4s"), "{text}");
    assert!(text.contains("key_ttl 24h: the key outlives every retry"), "{text}");
    assert!(!text.contains("system `crm`"));

    let unknown = ballast(&["explain", "examples/ballast.toml", "--system", "sbr"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("did you mean `sber`"));
}
