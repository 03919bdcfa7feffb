//! ARCHITECTURE.md names the room of every step of a request and of a
//! deferred write, what each crate depends on, and the `ballast` command's
//! subcommands: each file or folder it names must exist, each crate's row
//! must name the workspace crates its `Cargo.toml` depends on, and the
//! command's row its commands, so the map cannot drift from the house.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn architecture_md() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md at the root")
}

/// The words quoted in backticks in `text`.
fn quoted(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// The crate table's rows: the crate, what it holds, what it depends on.
fn crate_rows(text: &str) -> Vec<(String, String, String)> {
    let table = text.split("| crate | holds | depends on |").nth(1).expect("the crate table");
    table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_owned(), cells[2].to_owned(), cells[3].to_owned())
        })
        .collect()
}

/// The workspace crates `krate`'s `Cargo.toml` depends on (optional ones
/// included, development ones not).
fn workspace_dependencies(krate: &str) -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(root().join("crates").join(krate).join("Cargo.toml"))
        .unwrap_or_else(|e| panic!("crates/{krate}/Cargo.toml: {e}"));
    let manifest: toml::Table = manifest.parse().expect("a Cargo.toml parses");
    let mut tables = vec![manifest.get("dependencies")];
    if let Some(targets) = manifest.get("target").and_then(toml::Value::as_table) {
        tables.extend(targets.values().map(|target| target.get("dependencies")));
    }
    tables
        .into_iter()
        .flatten()
        .filter_map(toml::Value::as_table)
        .flat_map(|deps| deps.keys())
        .filter(|name| name.starts_with("ballast"))
        .cloned()
        .collect()
}

/// The subcommands `ballast <args> --help` lists, `help` aside.
fn commands(args: &[&str]) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_ballast"))
        .args(args)
        .arg("--help")
        .output()
        .expect("the ballast binary runs");
    let help = String::from_utf8(out.stdout).expect("help is UTF-8");
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_path_architecture_md_names_exists() {
    let text = architecture_md();
    let named: Vec<&str> = quoted(&text).filter(|quoted| quoted.starts_with("crates/")).collect();
    assert!(named.len() >= 30, "the map names the rooms: {named:?}");
    let missing: Vec<&&str> = named.iter().filter(|path| !root().join(path).exists()).collect();
    assert!(missing.is_empty(), "ARCHITECTURE.md names paths that do not exist: {missing:?}");
}

#[test]
fn the_crate_table_names_what_each_cargo_toml_depends_on() {
    let text = architecture_md();
    let rows = crate_rows(&text);
    assert!(rows.len() >= 9, "a row per published crate: {rows:?}");
    let mismatches: Vec<String> = rows
        .iter()
        .filter_map(|(krate, _, depends_on)| {
            let named: BTreeSet<String> =
                quoted(depends_on).filter(|name| name.starts_with("ballast")).map(str::to_owned).collect();
            let actual = workspace_dependencies(krate);
            (named != actual).then(|| format!("{krate}: the table says {named:?}, Cargo.toml has {actual:?}"))
        })
        .collect();
    assert!(mismatches.is_empty(), "ARCHITECTURE.md's crate table has drifted:\n{}", mismatches.join("\n"));
}

#[test]
fn the_cli_row_names_every_command_and_only_commands() {
    let text = architecture_md();
    let rows = crate_rows(&text);
    let (_, holds, _) =
        rows.iter().find(|(krate, _, _)| krate == "ballast-cli").expect("a row for ballast-cli");
    // "the `ballast` command: `demo`, …": the command itself, then its commands.
    let named: BTreeSet<String> =
        quoted(holds).filter(|word| *word != "ballast").map(str::to_owned).collect();
    let top = commands(&[]);
    assert!(top.len() >= 8, "ballast --help lists its commands: {top:?}");
    let unnamed: Vec<&String> = top.difference(&named).collect();
    assert!(unnamed.is_empty(), "ARCHITECTURE.md's ballast-cli row leaves out {unnamed:?}");
    let subcommands: BTreeSet<String> = top.iter().flat_map(|command| commands(&[command])).collect();
    let unknown: Vec<&String> =
        named.iter().filter(|word| !top.contains(*word) && !subcommands.contains(*word)).collect();
    assert!(
        unknown.is_empty(),
        "ARCHITECTURE.md's ballast-cli row names {unknown:?}, which ballast does not have"
    );
}

/// The packages `Cargo.lock` says `package` needs, itself included, each
/// of its features and its development dependencies counted.
fn locked_tree(package: &str) -> BTreeSet<String> {
    let lock = std::fs::read_to_string(root().join("Cargo.lock")).expect("Cargo.lock at the root");
    let lock: toml::Table = lock.parse().expect("Cargo.lock parses");
    let packages = lock["package"].as_array().expect("Cargo.lock lists packages");
    let needs = |name: &str| -> Vec<String> {
        packages
            .iter()
            .filter(|p| p["name"].as_str() == Some(name))
            .flat_map(|p| p.get("dependencies").and_then(toml::Value::as_array).cloned().unwrap_or_default())
            .filter_map(|dep| dep.as_str().and_then(|d| d.split_whitespace().next()).map(str::to_owned))
            .collect()
    };
    let mut seen = BTreeSet::new();
    let mut next = vec![package.to_owned()];
    while let Some(name) = next.pop() {
        if seen.insert(name.clone()) {
            next.extend(needs(&name));
        }
    }
    seen
}

#[test]
fn the_vocabulary_is_the_floor() {
    assert!(
        workspace_dependencies("ballast-vocab").is_empty(),
        "ballast-vocab depends on no other ballast crate; it is the one they all stand on"
    );
    let tree = locked_tree("ballast-vocab");
    assert!(tree.contains("serde"), "the walk reads Cargo.lock: {tree:?}");
    let runtime: Vec<&String> =
        tree.iter().filter(|name| ["tokio", "hyper", "sqlx", "reqwest"].contains(&name.as_str())).collect();
    assert!(runtime.is_empty(), "ballast-vocab's tree holds a runtime: {runtime:?}");
}
