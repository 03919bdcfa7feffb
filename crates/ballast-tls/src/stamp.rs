//! When TLS files changed: a stamp of each file's length, modification time
//! and inode, compared with the one taken when they were read. A rotation
//! that writes new files (or renames them into place) changes the stamp.

use std::path::Path;
use std::time::SystemTime;

/// The state of a set of files; two stamps differ when any file changed,
/// appeared or disappeared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stamp(Vec<Option<(u64, Option<SystemTime>, u64)>>);

impl Stamp {
    /// The stamp of `files` now.
    pub fn of<'a>(files: impl IntoIterator<Item = &'a Path>) -> Stamp {
        Stamp(files.into_iter().map(|path| std::fs::metadata(path).ok().map(|m| state(&m))).collect())
    }
}

#[cfg(unix)]
fn state(meta: &std::fs::Metadata) -> (u64, Option<SystemTime>, u64) {
    use std::os::unix::fs::MetadataExt as _;
    (meta.len(), meta.modified().ok(), meta.ino())
}

#[cfg(not(unix))]
fn state(meta: &std::fs::Metadata) -> (u64, Option<SystemTime>, u64) {
    (meta.len(), meta.modified().ok(), 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_changes_the_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.pem");
        std::fs::write(&path, "one").unwrap();
        let before = Stamp::of([path.as_path()]);
        assert_eq!(before, Stamp::of([path.as_path()]));
        let next = dir.path().join("next.pem");
        std::fs::write(&next, "two").unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert_ne!(before, Stamp::of([path.as_path()]));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(Stamp::of([path.as_path()]), Stamp(vec![None]));
    }
}
