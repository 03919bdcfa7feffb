//! The configuration crate's rooms point one way: the model (`model.rs`,
//! the whole file's shape) knows every section, and no section knows the
//! model. What the sections share lives below them both (`schema.rs`), and
//! only what reads a whole file — the configuration, its loader, lint and
//! explain — may name the model.

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

#[test]
fn no_section_names_the_model() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let above = ["lib.rs", "model.rs", "config.rs", "load.rs", "lint.rs", "explain.rs"];
    let files = sources(&src);
    assert!(files.len() >= 20, "the walk found the crate's files: {files:?}");
    let naming: Vec<String> = files
        .iter()
        .filter(|path| path.parent() != Some(src.as_path()) || !above.iter().any(|a| path.ends_with(a)))
        .filter(|path| std::fs::read_to_string(path).unwrap_or_default().contains("crate::model"))
        .map(|path| path.strip_prefix(&src).unwrap_or(path).display().to_string())
        .collect();
    assert!(naming.is_empty(), "sections that name the model, which knows them: {naming:?}");
}
