//! Which file a SQLite queue opened, so that a file removed or replaced
//! under the running process is noticed: its connections keep writing to
//! the old inode, and every task written there is gone at the next start.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The queue's file as it was when the queue was opened.
#[derive(Debug, Clone)]
pub(crate) struct OpenedFile {
    path: PathBuf,
    /// Device and inode (Unix); `None` where the platform says neither.
    id: Option<(u64, u64)>,
}

impl OpenedFile {
    /// The file at `path` now; `None` for an in-memory database or a file
    /// that cannot be looked at (the queue fails on its own then).
    pub(crate) fn at(path: &Path) -> Option<Self> {
        let name = path.to_string_lossy();
        if name.is_empty() || name == ":memory:" || name.starts_with("file:") {
            return None;
        }
        let metadata = std::fs::metadata(path).ok()?;
        Some(Self { path: path.to_owned(), id: identity(&metadata) })
    }

    /// `Err(Error::FileGone)` if the path no longer leads to the file opened.
    pub(crate) fn check(&self) -> Result<()> {
        let now = std::fs::metadata(&self.path).ok();
        match now {
            Some(metadata) if identity(&metadata) == self.id => Ok(()),
            _ => Err(Error::FileGone { path: self.path.clone() }),
        }
    }
}

#[cfg(unix)]
fn identity(metadata: &std::fs::Metadata) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    Some((metadata.dev(), metadata.ino()))
}

#[cfg(not(unix))]
fn identity(_: &std::fs::Metadata) -> Option<(u64, u64)> {
    None
}
