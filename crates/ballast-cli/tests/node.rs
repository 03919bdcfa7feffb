//! The Node client of the gateway (`examples/node/`) against this build's
//! `ballast serve`: its `node --test` suite, with `BALLAST_BIN` pointing at
//! the binary.
//!
//! Runs when `node` (18 or newer) is on the PATH. Without it the test says it
//! was skipped and passes, unless `BALLAST_TEST_NODE` is set (as in CI): then
//! a missing or old `node` fails it like a failing suite does.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The environment variable that makes the Node suite required.
const NODE_ENV: &str = "BALLAST_TEST_NODE";

/// The oldest Node with a global `fetch` and `node:test`.
const OLDEST_NODE: u32 = 18;

/// Far more than the suite needs (a few seconds), so only a hang reaches it.
const DEADLINE: Duration = Duration::from_secs(120);

#[test]
fn the_node_client_passes_its_suite_against_ballast_serve() {
    let required = std::env::var_os(NODE_ENV).is_some_and(|v| !v.is_empty());
    let version = match node_major() {
        Ok(major) if major >= OLDEST_NODE => major,
        Ok(major) if !required => {
            eprintln!("skipped: node {major} is older than {OLDEST_NODE} (set {NODE_ENV}=1 to require it)");
            return;
        }
        Err(_) if !required => {
            eprintln!("skipped: node not found (set {NODE_ENV}=1 to require it)");
            return;
        }
        Ok(major) => {
            panic!("{NODE_ENV} is set but node is version {major}: the suite needs {OLDEST_NODE} or newer")
        }
        Err(e) => panic!("{NODE_ENV} is set but node cannot be run: {e}"),
    };

    let out = tempfile::tempdir().unwrap();
    let (stdout, stderr) = (out.path().join("stdout"), out.path().join("stderr"));
    let mut node = Command::new("node")
        .args(["--test", "examples/node/ballast-client.test.mjs"])
        .env("BALLAST_BIN", env!("CARGO_BIN_EXE_ballast"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = node.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > DEADLINE {
            let _ = node.kill();
            let _ = node.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = format!("--- stdout:\n{}\n--- stderr:\n{}", read(&stdout), read(&stderr));
    match status {
        Some(status) if status.success() => {}
        Some(status) => panic!("node {version}'s suite failed ({status}):\n{output}"),
        None => panic!("node {version}'s suite did not finish within {DEADLINE:?}; killed:\n{output}"),
    }
}

/// The major version `node --version` prints.
fn node_major() -> Result<u32, String> {
    let out = Command::new("node").arg("--version").output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let major = text.trim().strip_prefix('v').and_then(|v| v.split('.').next()?.parse().ok());
    major.ok_or_else(|| format!("`node --version` printed {text:?} ({})", out.status))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("({e})"))
}
