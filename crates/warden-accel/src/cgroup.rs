//! Which cgroup the programs attach to: a `--cgroup PATH` given explicitly, else the cgroup
//! the process runs in, never the cgroup2 root unless it was named (attaching there affects
//! every process of the node).

use std::path::{Path, PathBuf};

/// A cgroup2 directory and its id (the directory's inode number on cgroup2), which is what
/// the kernel reports for cgroup links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupTarget {
    pub path: PathBuf,
    pub id: u64,
}

/// Where cgroup2 is mounted, from a `/proc/self/mounts` text: `/sys/fs/cgroup/unified` on
/// hybrid hosts, `/sys/fs/cgroup` on pure v2 ones.
pub fn cgroup2_root_in(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, kind) = (f.next()?, f.next()?, f.next()?);
        (kind == "cgroup2").then(|| PathBuf::from(dir))
    })
}

pub fn cgroup2_root() -> Option<PathBuf> {
    cgroup2_root_in(&std::fs::read_to_string("/proc/self/mounts").ok()?)
}

/// The process's cgroup2 path relative to the root, from a `/proc/self/cgroup` text (its
/// `0::/path` line).
pub fn own_cgroup_in(proc_cgroup: &str) -> Option<String> {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim().to_string())
}

/// Why a target cannot be used, in words for the person who asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup2 hierarchy is mounted (cgroup programs attach to cgroup2 directories)")]
    NoCgroup2,
    #[error("this process runs in the cgroup2 root; attaching there would accelerate every process of the node, so name it explicitly with --cgroup {0} if that is meant")]
    ImplicitRoot(String),
    #[error("cannot tell which cgroup this process is in (no 0:: line in /proc/self/cgroup)")]
    Unknown,
    #[error("{0} is not a directory of the cgroup2 hierarchy mounted at {1}")]
    NotCgroup2(String, String),
    #[error("cannot read {0}: {1}")]
    Io(String, String),
}

/// Resolve `--cgroup` (or the process's own cgroup) against the cgroup2 mount at `root`.
pub fn resolve(explicit: Option<&Path>, root: Option<&Path>) -> Result<CgroupTarget, CgroupError> {
    let root = root.ok_or(CgroupError::NoCgroup2)?;
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => {
            let text = std::fs::read_to_string("/proc/self/cgroup")
                .map_err(|e| CgroupError::Io("/proc/self/cgroup".into(), e.to_string()))?;
            let own = own_cgroup_in(&text).ok_or(CgroupError::Unknown)?;
            let rel = own.trim_start_matches('/');
            if rel.is_empty() {
                return Err(CgroupError::ImplicitRoot(root.display().to_string()));
            }
            root.join(rel)
        }
    };
    let canonical = path
        .canonicalize()
        .map_err(|e| CgroupError::Io(path.display().to_string(), e.to_string()))?;
    let root_canonical = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    if !canonical.starts_with(&root_canonical) || !canonical.is_dir() {
        return Err(CgroupError::NotCgroup2(
            path.display().to_string(),
            root.display().to_string(),
        ));
    }
    use std::os::unix::fs::MetadataExt;
    let id = std::fs::metadata(&canonical)
        .map_err(|e| CgroupError::Io(canonical.display().to_string(), e.to_string()))?
        .ino();
    Ok(CgroupTarget {
        path: canonical,
        id,
    })
}

/// The directory under `root` whose id is `id` (a cgroup link names only the id).
pub fn path_of(root: &Path, id: u64) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if std::fs::metadata(&dir).is_ok_and(|m| m.ino() == id) {
            return Some(dir);
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            stack.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount_on_hybrid_and_pure_hosts() {
        let hybrid = "tmpfs /sys/fs/cgroup tmpfs ro 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n";
        assert_eq!(
            cgroup2_root_in(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let pure = "cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n";
        assert_eq!(cgroup2_root_in(pure), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(cgroup2_root_in("proc /proc proc rw 0 0\n"), None);
    }

    #[test]
    fn own_cgroup_is_the_unified_line() {
        let text = "12:cpu:/x\n0::/warden-accel-1\n";
        assert_eq!(own_cgroup_in(text).as_deref(), Some("/warden-accel-1"));
        assert_eq!(own_cgroup_in("1:name=systemd:/\n"), None);
    }

    #[test]
    fn no_cgroup2_is_said_so() {
        let err = resolve(None, None).unwrap_err();
        assert_eq!(err, CgroupError::NoCgroup2);
        assert!(err.to_string().contains("no cgroup2 hierarchy is mounted"));
    }

    #[test]
    fn a_path_outside_the_hierarchy_is_refused() {
        let err = resolve(Some(Path::new("/tmp")), Some(Path::new("/proc"))).unwrap_err();
        assert!(matches!(err, CgroupError::NotCgroup2(..)), "{err}");
    }
}
