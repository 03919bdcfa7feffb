//! The TypeScript clients of the gateway (`clients/typescript/`) against this
//! build's `ballast serve`, the way a user gets them:
//!
//! 0. the examples' `src/ballast-systems.d.ts` are what `ballast codegen ts`
//!    prints for their `ballast.toml` (this step needs no `node`);
//! 1. `npm ci` of the workspace, from its committed lockfile;
//! 2. `npm run build`: `@ballast/client` and `@ballast/nestjs` compiled by `tsc`
//!    (one CommonJS implementation, an ES module entry re-exporting it);
//! 3. `npm test`: the packages' `node --test` suites (the client's
//!    compile-time refusals, misspelt system names among them; the exception
//!    filter's mapping of every reason; the `import`/`require` identity; the
//!    testing module), with `BALLAST_BIN` pointing at the binary;
//! 4. `npm pack` of both packages (the Nest tarball alone refused, naming
//!    the client's tarball), `npm ci` of the example
//!    (`examples/sber-adapter`, its own lockfile) and the tarballs installed
//!    into it with `npm install --no-save`;
//! 5. `tsc --noEmit` over the example;
//! 6. the example's tests: the adapter on the fake gateway of
//!    `@ballast/nestjs/testing`, and end to end, the Nest app against
//!    `ballast serve` and a flaky Sber; its figures are printed;
//! 7. a Nest starter project as `nest new` makes it (`examples/nest-starter`,
//!    its own lockfile, with the READMEs' tsconfig changes for TypeScript 7):
//!    `npm ci`, the two tarballs installed beside each other as the READMEs
//!    say, and the quick start compiled by `tsc`.
//!
//! Runs when `node` (20.19 or newer) and `npm` are on the PATH. Without them
//! the test says it was skipped and passes, unless `BALLAST_TEST_NODE` is set
//! (as in CI): then a missing or old `node` fails it like a failing step does.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ballast_test_support::Refusing;

/// The environment variable that makes the TypeScript suites required.
const NODE_ENV: &str = "BALLAST_TEST_NODE";

/// The oldest Node the packages support: `@nestjs/terminus` asks for 20.19,
/// which also `require()`s ES modules (Nest 12 is one) from CommonJS.
const OLDEST_NODE: (u32, u32) = (20, 19);

/// For an install: far more than `npm ci` from a warm cache needs (seconds),
/// enough for a cold one.
const INSTALL_DEADLINE: Duration = Duration::from_secs(600);

/// For a build or a suite (seconds each), so only a hang reaches it.
const RUN_DEADLINE: Duration = Duration::from_secs(240);

#[test]
fn the_typescript_clients_and_the_example_pass_against_ballast_serve() {
    let workspace = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/typescript"));
    let example = workspace.join("examples/sber-adapter");
    let starter = workspace.join("examples/nest-starter");
    for dir in [&example, &starter] {
        declarations_are_current(dir);
    }

    let required = std::env::var_os(NODE_ENV).is_some_and(|v| !v.is_empty());
    let skip = |why: String| {
        assert!(!required, "{NODE_ENV} is set but {why}");
        eprintln!("skipped: {why} (set {NODE_ENV}=1 to require it)");
    };
    let node = match version("node") {
        Ok(v) if v >= OLDEST_NODE => v,
        Ok((major, minor)) => {
            return skip(format!(
                "node is {major}.{minor}: the suites need {}.{} or newer",
                OLDEST_NODE.0, OLDEST_NODE.1
            ))
        }
        Err(e) => return skip(format!("node cannot be run: {e}")),
    };
    if let Err(e) = version("npm") {
        return skip(format!("npm cannot be run: {e}"));
    }

    let packs = tempfile::tempdir().unwrap();
    let steps = Steps { node, logs: tempfile::tempdir().unwrap(), refusing: Refusing::new() };

    steps.run(
        "npm ci (workspace)",
        workspace,
        &["ci", "--no-audit", "--no-fund", "--prefer-offline"],
        INSTALL_DEADLINE,
    );
    steps.run("build the packages", workspace, &["run", "build"], RUN_DEADLINE);
    steps.run("the packages' suites", workspace, &["test"], RUN_DEADLINE);
    let destination = packs.path().to_str().unwrap();
    steps.run(
        "npm pack",
        workspace,
        &["pack", "--workspaces", "--pack-destination", destination],
        RUN_DEADLINE,
    );
    let tarballs = tarballs(packs.path());
    steps.run(
        "npm ci (example)",
        &example,
        &["ci", "--no-audit", "--no-fund", "--prefer-offline"],
        INSTALL_DEADLINE,
    );
    let mut install = vec!["install", "--no-save", "--no-audit", "--no-fund", "--prefer-offline"];
    install.extend(tarballs.iter().map(|t| t.to_str().unwrap()));
    steps.run("install the tarballs into the example", &example, &install, INSTALL_DEADLINE);
    steps.run("tsc --noEmit (example)", &example, &["run", "typecheck"], RUN_DEADLINE);
    steps.run("build the example", &example, &["run", "build"], RUN_DEADLINE);
    let e2e = steps.run("the example's tests", &example, &["test"], RUN_DEADLINE);
    steps.run(
        "npm ci (Nest starter)",
        &starter,
        &["ci", "--no-audit", "--no-fund", "--prefer-offline"],
        INSTALL_DEADLINE,
    );
    // The Nest package alone is refused, naming the tarball it needs beside
    // it: in an app of its own, outside the workspace, whose client the
    // install would find otherwise (its peers left out: nothing is fetched).
    let app = tempfile::tempdir().unwrap();
    std::fs::write(app.path().join("package.json"), r#"{"name":"alone","private":true}"#).unwrap();
    let nestjs = tarballs.iter().find(|t| t.to_string_lossy().contains("nestjs")).unwrap();
    let mut alone = install[..5].to_vec();
    alone.extend(["--legacy-peer-deps", nestjs.to_str().unwrap()]);
    let said = steps.refused("install the Nest tarball alone", app.path(), &alone, INSTALL_DEADLINE);
    assert!(said.contains("npm install ./ballast-client-0.1.0.tgz ./ballast-nestjs-0.1.0.tgz"), "{said}");
    steps.run("install the tarballs into the Nest starter", &starter, &install, INSTALL_DEADLINE);
    steps.run("compile the Nest starter's quick start", &starter, &["run", "compile"], RUN_DEADLINE);

    let figures = e2e.lines().find_map(|line| line.split_once("e2e: ")).map(|(_, figures)| figures);
    let figures = figures.unwrap_or_else(|| panic!("the end-to-end test printed no figures:\n{e2e}"));
    // Past the test harness's capture: the figures are the point of the run.
    let _ = writeln!(std::io::stderr(), "sber-adapter e2e: {figures}");
}

/// The steps' shared state: the Node version they run with, and where their
/// output goes.
struct Steps {
    node: (u32, u32),
    logs: tempfile::TempDir,
    /// A port the suites' "nothing listens there" system points at.
    refusing: Refusing,
}

impl Steps {
    /// Runs `npm args` in `dir` with `BALLAST_BIN` and
    /// `BALLAST_TEST_REFUSING_PORT` set; its stdout if it
    /// succeeds within `deadline`, else a failure naming the step with its
    /// output.
    fn run(&self, step: &str, dir: &Path, args: &[&str], deadline: Duration) -> String {
        match self.outcome(step, dir, args, deadline) {
            (Some(status), out, _, _) if status.success() => out,
            (Some(status), out, err, command) => {
                panic!("{step} failed ({status}): {command}\n--- stdout:\n{out}\n--- stderr:\n{err}")
            }
            (None, out, err, command) => panic!(
                "{step} did not finish within {deadline:?}; killed: {command}\n--- stdout:\n{out}\n--- stderr:\n{err}"
            ),
        }
    }

    /// Runs `npm args` as [`run`](Self::run) does, expecting it to fail;
    /// what it printed, stdout and stderr together.
    fn refused(&self, step: &str, dir: &Path, args: &[&str], deadline: Duration) -> String {
        match self.outcome(step, dir, args, deadline) {
            (Some(status), out, err, command) if status.success() => {
                panic!("{step} succeeded, and should not have: {command}\n--- stdout:\n{out}\n--- stderr:\n{err}")
            }
            (Some(_), out, err, _) => format!("{out}\n{err}"),
            (None, out, err, command) => panic!(
                "{step} did not finish within {deadline:?}; killed: {command}\n--- stdout:\n{out}\n--- stderr:\n{err}"
            ),
        }
    }

    /// Runs `npm args` in `dir` within `deadline`: its exit status (`None`
    /// when it was killed at the deadline), stdout, stderr, and the command
    /// as a failure names it.
    fn outcome(
        &self,
        step: &str,
        dir: &Path,
        args: &[&str],
        deadline: Duration,
    ) -> (Option<std::process::ExitStatus>, String, String, String) {
        let (stdout, stderr) = (self.logs.path().join("stdout"), self.logs.path().join("stderr"));
        let mut child = Command::new("npm")
            .args(args)
            .env("BALLAST_BIN", env!("CARGO_BIN_EXE_ballast"))
            .env("BALLAST_TEST_REFUSING_PORT", self.refusing.addr.port().to_string())
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{step}: cannot start npm: {e}"));
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if started.elapsed() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let (out, err) = (read(&stdout), read(&stderr));
        let (major, minor) = self.node;
        let command = format!("npm {} (in {}, node {major}.{minor})", args.join(" "), dir.display());
        (status, out, err, command)
    }
}

/// The `.tgz` files `npm pack` left in `dir`: one per package.
fn tarballs(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "tgz"))
        .collect();
    found.sort();
    assert_eq!(found.len(), 2, "npm pack left {found:?}: one tarball per package expected");
    found
}

/// Fails unless `dir`'s `src/ballast-systems.d.ts` is what `ballast codegen
/// ts` prints for `dir`'s `ballast.toml`: the system names the compiler
/// allows are the configuration's.
fn declarations_are_current(dir: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_ballast"))
        .args(["codegen", "ts", "--config", "ballast.toml"])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("ballast codegen ts in {}: {e}", dir.display()));
    assert!(
        out.status.success(),
        "ballast codegen ts in {} failed ({}): {}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let committed = read(&dir.join("src/ballast-systems.d.ts"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        committed,
        "{}: src/ballast-systems.d.ts is not what `ballast codegen ts` prints: regenerate it",
        dir.display()
    );
}

/// The major and minor version `program --version` prints (`v20.19.0`, `11.4.2`).
fn version(program: &str) -> Result<(u32, u32), String> {
    let out = Command::new(program).arg("--version").output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.trim().trim_start_matches('v').split('.').map(|n| n.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) if out.status.success() => Ok((major, minor)),
        _ => Err(format!("`{program} --version` printed {text:?} ({})", out.status)),
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("({e})"))
}
