//! warden's own bpffs: the maps every sidecar and `warden accel enable` share (one socket map
//! per node, so sidecar -> sidecar can be redirected) and the links `enable` leaves attached
//! are pinned only here, in a bpffs mounted by warden itself, never in /sys/fs/bpf.
//!
//! Layout: `<dir>/wd_*` maps (pinned by name by the loader), `<dir>/links/cg<ID>/<program>`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

#[derive(Debug, thiserror::Error)]
pub enum BpffsError {
    #[error("{0} is inside a bpffs warden did not mount ({1}); pick another --bpffs")]
    Foreign(String, String),
    #[error("mounting a bpffs at {0} needs CAP_SYS_ADMIN")]
    MountPrivilege(String),
    #[error("cannot mount a bpffs at {0}: {1}")]
    Mount(String, std::io::Error),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

fn c_path(p: &Path) -> Result<CString, BpffsError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| {
        BpffsError::Io(
            p.display().to_string(),
            std::io::Error::other("path has a NUL byte"),
        )
    })
}

/// The filesystem magic of `p` (statfs).
fn fs_magic(p: &Path) -> Option<i64> {
    let c = c_path(p).ok()?;
    // SAFETY: statfs writes into the zeroed struct we own; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    #[allow(clippy::unnecessary_cast)]
    (rc == 0).then_some(st.f_type as i64)
}

/// Whether `dir` is the root of a bpffs mount (not a directory inside one).
pub fn is_mounted(dir: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mounts").is_ok_and(|m| {
        let want = dir.to_string_lossy();
        m.lines().any(|l| {
            let mut f = l.split_whitespace();
            let (_, at, kind) = (f.next(), f.next(), f.next());
            kind == Some("bpf") && at == Some(want.as_ref())
        })
    })
}

/// Mount warden's bpffs at `dir` unless it already is; returns whether this call mounted.
pub fn ensure(dir: &Path, may_mount: bool) -> Result<bool, BpffsError> {
    if is_mounted(dir) {
        return Ok(false);
    }
    std::fs::create_dir_all(dir).map_err(|e| BpffsError::Io(dir.display().to_string(), e))?;
    if fs_magic(dir) == Some(BPF_FS_MAGIC) {
        return Err(BpffsError::Foreign(
            dir.display().to_string(),
            "e.g. /sys/fs/bpf".into(),
        ));
    }
    if !may_mount {
        return Err(BpffsError::MountPrivilege(dir.display().to_string()));
    }
    let target = c_path(dir)?;
    let src = c"bpffs";
    let kind = c"bpf";
    let opts = c"mode=0700";
    // SAFETY: all pointers are NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            kind.as_ptr(),
            0,
            opts.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(BpffsError::Mount(
            dir.display().to_string(),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(true)
}

/// Hand warden's bpffs and its map pins to `uid` (a root `warden accel enable` for sidecars
/// that run as the proxy uid): the mount is mode 0700 and pins are 0600, both the creator's.
pub fn hand_to(dir: &Path, uid: u32) -> Result<(), BpffsError> {
    let chown = |p: &Path| {
        std::os::unix::fs::chown(p, Some(uid), Some(uid))
            .map_err(|e| BpffsError::Io(p.display().to_string(), e))
    };
    chown(dir)?;
    let entries =
        std::fs::read_dir(dir).map_err(|e| BpffsError::Io(dir.display().to_string(), e))?;
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with("wd_") {
            chown(&entry.path())?;
        }
    }
    Ok(())
}

/// Where `enable` pins the links of cgroup `id`.
pub fn links_dir(dir: &Path, cgroup_id: u64) -> PathBuf {
    dir.join("links").join(format!("cg{cgroup_id}"))
}

/// The cgroup ids that have pinned links, from `links/cg<ID>` names.
pub fn pinned_cgroups(dir: &Path) -> Vec<u64> {
    std::fs::read_dir(dir.join("links"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_prefix("cg"))
                        .and_then(|n| n.parse().ok())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Remove every pin and unmount (`warden accel disable --clean`). Links still pinned are
/// detached by their removal (the kernel drops a link with its last reference).
pub fn clean(dir: &Path) -> Result<Vec<String>, BpffsError> {
    let mut removed = Vec::new();
    if !is_mounted(dir) {
        return Ok(removed);
    }
    // Only what warden pinned: the kernel adds its own entries (maps.debug, progs.debug).
    let entries =
        std::fs::read_dir(dir).map_err(|e| BpffsError::Io(dir.display().to_string(), e))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let path = entry.path();
        if name == "links" {
            remove_tree(dir, &path, &mut removed)?;
            let _ = std::fs::remove_dir(&path);
        } else if name.starts_with("wd_") {
            std::fs::remove_file(&path)
                .map_err(|e| BpffsError::Io(path.display().to_string(), e))?;
            removed.push(format!("unpinned {name}"));
        }
    }
    let target = c_path(dir)?;
    // SAFETY: NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(target.as_ptr(), 0) } != 0 {
        return Err(BpffsError::Io(
            dir.display().to_string(),
            std::io::Error::last_os_error(),
        ));
    }
    let _ = std::fs::remove_dir(dir);
    removed.push(format!("unmounted {}", dir.display()));
    Ok(removed)
}

fn remove_tree(root: &Path, dir: &Path, removed: &mut Vec<String>) -> Result<(), BpffsError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| BpffsError::Io(dir.display().to_string(), e))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(root, &path, removed)?;
            std::fs::remove_dir(&path)
                .map_err(|e| BpffsError::Io(path.display().to_string(), e))?;
        } else {
            std::fs::remove_file(&path)
                .map_err(|e| BpffsError::Io(path.display().to_string(), e))?;
            let rel = path.strip_prefix(root).unwrap_or(&path);
            removed.push(format!("unpinned {}", rel.display()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_dirs_name_their_cgroup() {
        let d = links_dir(Path::new("/run/warden/bpffs"), 4242);
        assert_eq!(d, PathBuf::from("/run/warden/bpffs/links/cg4242"));
    }

    #[test]
    fn a_plain_directory_is_not_mounted() {
        assert!(!is_mounted(Path::new("/tmp")));
        assert!(pinned_cgroups(Path::new("/nonexistent")).is_empty());
    }
}
