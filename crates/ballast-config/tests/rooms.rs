//! The configuration crate's rooms point one way: the model (`model.rs`,
//! the whole file's shape) knows every section, and no section knows the
//! model, or the configuration that holds it (`config.rs`, whose type the
//! layer above hands settings out on). What the sections share lives below
//! them both (`schema.rs`), and only what reads a whole file — the
//! configuration, its loader, lint, explain and the settings handed out —
//! may name the model or the configuration.

use std::path::{Path, PathBuf};

/// Every `.rs` file below `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("an entry of src").path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The files that read a whole file, and may name the model and the configuration.
const ABOVE: [&str; 7] =
    ["lib.rs", "model.rs", "config.rs", "load.rs", "lint.rs", "explain.rs", "settings.rs"];

/// The sections' files (every file but those [`ABOVE`]) whose code names any of `names`.
fn sections_naming(names: &[&str]) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = sources(&src);
    assert!(files.len() >= 20, "the walk found the crate's files: {files:?}");
    files
        .iter()
        .filter(|path| path.parent() != Some(src.as_path()) || !ABOVE.iter().any(|a| path.ends_with(a)))
        .filter(|path| {
            // A doc comment's link is no dependency: code lines only.
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let mut code = text.lines().filter(|line| !line.trim_start().starts_with("//"));
            code.any(|line| names.iter().any(|name| line.contains(name)))
        })
        .map(|path| path.strip_prefix(&src).unwrap_or(path).display().to_string())
        .collect()
}

#[test]
fn no_section_names_the_model() {
    let naming = sections_naming(&["crate::model"]);
    assert!(naming.is_empty(), "sections that name the model, which knows them: {naming:?}");
}

#[test]
fn no_section_names_the_configuration() {
    // A section adding its accessor to `Config` closes the circle through
    // the type: config.rs -> model.rs -> the section -> config.rs.
    let naming = sections_naming(&["crate::config", "crate::Config", "impl Config {"]);
    assert!(naming.is_empty(), "sections that name the configuration, which holds them: {naming:?}");
}
