//! Whether certificate files changed since they were read: inode, size and modification time
//! (following symlinks, so Kubernetes' `..data` swap of a mounted Secret counts as a change).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Inode, size, mtime seconds and nanoseconds; `None` for a file that cannot be stat'ed.
type Stamp = Option<(u64, u64, i64, i64)>;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileStamps(Vec<(PathBuf, Stamp)>);

fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

impl FileStamps {
    pub fn of<'a>(paths: impl IntoIterator<Item = &'a Path>) -> FileStamps {
        let mut out: Vec<(PathBuf, Stamp)> = Vec::new();
        for p in paths {
            if !out.iter().any(|(q, _)| q == p) {
                out.push((p.to_path_buf(), stamp(p)));
            }
        }
        FileStamps(out)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether any file differs now from when these stamps were taken.
    pub fn changed(&self) -> bool {
        self.0.iter().any(|(p, s)| stamp(p) != *s)
    }

    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.0.iter().map(|(p, _)| p.as_path())
    }
}
