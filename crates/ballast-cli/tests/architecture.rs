//! ARCHITECTURE.md names the room of every step of a request and of a
//! deferred write: each file or folder it names must exist, so the map
//! cannot drift from the house.

use std::path::Path;

#[test]
fn every_path_architecture_md_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md at the root");
    let named: Vec<&str> =
        text.split('`').skip(1).step_by(2).filter(|quoted| quoted.starts_with("crates/")).collect();
    assert!(named.len() >= 30, "the map names the rooms: {named:?}");
    let missing: Vec<&&str> = named.iter().filter(|path| !root.join(path).exists()).collect();
    assert!(missing.is_empty(), "ARCHITECTURE.md names paths that do not exist: {missing:?}");
}
