//! A program another uid (a sidecar's 1337) can execute, wherever it was built.
//!
//! Started as another uid without root's capabilities (`nsenter --setuid`, `Command::uid`), a
//! program is executable only when that uid may search every directory above it: a checkout in
//! a 0700 directory (root's home, a `mktemp -d` folder) fails the exec with EACCES.
//! `setpriv --reuid` happens to exec while it still holds root's capabilities; every way of
//! starting a process as another uid goes through [`RunAs`] so none depends on that. It uses
//! the program where it is when the uid can reach it, and otherwise a hard link (a copy across
//! filesystems) in a 0755 temp dir that it removes on drop; a running process keeps its binary
//! when the link goes.

use crate::TempDir;
use std::ffi::OsString;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A uid/gid pair and a program path that uid can execute; holds the staged copy, if one was
/// needed, until dropped.
#[derive(Debug)]
pub struct RunAs {
    uid: u32,
    gid: u32,
    program: PathBuf,
    _staged: Option<TempDir>,
}

impl RunAs {
    /// `program` (a path, or a name looked up on `PATH`) for `uid`/`gid`: staged in a temp dir
    /// when a directory above it (or the file itself) does not let that uid through.
    pub fn new(uid: u32, gid: u32, program: impl AsRef<Path>) -> io::Result<RunAs> {
        let program = locate(program.as_ref())?;
        if executable_by(&program, uid, gid)? {
            return Ok(RunAs {
                uid,
                gid,
                program,
                _staged: None,
            });
        }
        let dir = TempDir::new("run-as")?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        if !searchable_by(dir.path(), uid, gid)? {
            return Err(io::Error::other(format!(
                "uid {uid} cannot reach {} nor the temp dir {} (set TMPDIR to a directory every \
                 user can search)",
                program.display(),
                dir.path().display()
            )));
        }
        let name = program
            .file_name()
            .ok_or_else(|| io::Error::other(format!("{} names no file", program.display())))?;
        let staged = dir.path().join(name);
        // A link shares the file's mode: only when the file itself lets the uid execute it.
        let file_lets_through = file_executable_by(&program, uid, gid)?;
        if !(file_lets_through && std::fs::hard_link(&program, &staged).is_ok()) {
            std::fs::copy(&program, &staged)?;
            std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(RunAs {
            uid,
            gid,
            program: staged,
            _staged: Some(dir),
        })
    }

    pub fn uid(&self) -> u32 {
        self.uid
    }

    pub fn gid(&self) -> u32 {
        self.gid
    }

    /// The path to execute (the original, or the staged link or copy).
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Whether the program had to be staged (its own place is out of the uid's reach).
    pub fn staged(&self) -> bool {
        self._staged.is_some()
    }

    /// The arguments after `setpriv` that run the program as this uid/gid with no
    /// supplementary groups, and `caps` (e.g. `+bpf,+net_admin`) as inheritable and ambient
    /// capabilities when given; the program's own arguments follow.
    pub fn setpriv_args(&self, caps: Option<&str>) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "--reuid".into(),
            self.uid.to_string().into(),
            "--regid".into(),
            self.gid.to_string().into(),
            "--clear-groups".into(),
        ];
        if let Some(caps) = caps {
            args.extend(["--inh-caps", caps, "--ambient-caps", caps].map(OsString::from));
        }
        args.push("--".into());
        args.push(self.program.clone().into_os_string());
        args
    }
}

/// Whether a process of `uid`/`gid` (no supplementary groups) may search a directory, or
/// execute a file, with permission bits `mode` owned by `owner`/`group`: the kernel uses the
/// owner's bits for the owner, else the group's for the group, else the others' (ACLs are not
/// read: a directory they would open is staged around anyway). Root is let through.
pub fn lets_through(mode: u32, owner: u32, group: u32, uid: u32, gid: u32) -> bool {
    let bit = if uid == 0 {
        return true;
    } else if uid == owner {
        0o100
    } else if gid == group {
        0o010
    } else {
        0o001
    };
    mode & bit != 0
}

/// `program` as an absolute path without symlinks: a bare name is looked up on `PATH` (and the
/// sbin directories root has), as `Command` would.
fn locate(program: &Path) -> io::Result<PathBuf> {
    let found = if program.components().count() > 1 {
        program.to_path_buf()
    } else {
        let name = program.as_os_str().to_string_lossy();
        let path = std::env::var("PATH").unwrap_or_default();
        path.split(':')
            .map(PathBuf::from)
            .chain(["/usr/sbin", "/sbin", "/usr/bin"].map(PathBuf::from))
            .map(|d| d.join(&*name))
            .find(|p| p.is_file())
            .ok_or_else(|| io::Error::other(format!("{name} is not on PATH")))?
    };
    found.canonicalize()
}

/// Every directory above `path` lets `uid` search it, and the file lets it execute.
fn executable_by(path: &Path, uid: u32, gid: u32) -> io::Result<bool> {
    Ok(file_executable_by(path, uid, gid)?
        && match path.parent() {
            Some(parent) => searchable_by(parent, uid, gid)?,
            None => true,
        })
}

fn file_executable_by(path: &Path, uid: u32, gid: u32) -> io::Result<bool> {
    let meta = std::fs::metadata(path)?;
    Ok(meta.is_file() && lets_through(meta.mode(), meta.uid(), meta.gid(), uid, gid))
}

/// `dir` and every directory above it let `uid` search them.
fn searchable_by(dir: &Path, uid: u32, gid: u32) -> io::Result<bool> {
    for d in dir.ancestors() {
        let meta = std::fs::metadata(d)?;
        if !lets_through(meta.mode(), meta.uid(), meta.gid(), uid, gid) {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn which_permission_bits_apply() {
        // (mode, owner, group, uid, gid, let through)
        let cases = [
            (0o700, 0, 0, 1337, 1337, false),    // root's home
            (0o755, 0, 0, 1337, 1337, true),     // /usr/bin
            (0o711, 0, 0, 1337, 1337, true),     // search without listing
            (0o750, 0, 1337, 1337, 1337, true),  // the uid's group
            (0o705, 0, 1337, 1337, 1337, false), // group bits apply to the group, not others'
            (0o070, 1337, 0, 1337, 1337, false), // owner bits apply to the owner
            (0o700, 1337, 0, 1337, 1337, true),
            (0o000, 5, 5, 0, 0, true),        // root
            (0o1777, 0, 0, 1337, 1337, true), // /tmp
            (0o644, 0, 0, 1337, 1337, false), // a file without x
        ];
        for (mode, owner, group, uid, gid, want) in cases {
            assert_eq!(
                lets_through(mode, owner, group, uid, gid),
                want,
                "mode {mode:o} owner {owner}:{group} for {uid}:{gid}"
            );
        }
    }

    #[test]
    fn a_program_on_path_is_used_where_it_is() {
        let sh = RunAs::new(1337, 1337, "sh").unwrap();
        assert!(!sh.staged(), "{}", sh.program().display());
        assert!(sh.program().is_absolute());
    }

    #[test]
    fn a_program_in_a_0700_directory_is_staged_and_runs_as_the_uid() {
        let dir = TempDir::new("run-as-test").unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let original = dir.path().join("true");
        std::fs::copy(locate(Path::new("true")).unwrap(), &original).unwrap();
        let who = RunAs::new(1337, 1337, &original).unwrap();
        assert!(who.staged());
        assert_ne!(who.program(), original);
        let staged_dir = who.program().parent().unwrap().to_path_buf();
        assert!(searchable_by(&staged_dir, 1337, 1337).unwrap());
        assert_eq!(
            who.setpriv_args(Some("+bpf")).last(),
            Some(&who.program().as_os_str().to_owned())
        );
        // Only root can switch uids; elsewhere the staging above is what can be checked.
        if current_euid() == 0 {
            let run = |p: &Path| std::process::Command::new(p).uid(1337).gid(1337).status();
            assert_eq!(
                run(&original).map_err(|e| e.kind()).err(),
                Some(io::ErrorKind::PermissionDenied),
                "the original is out of uid 1337's reach"
            );
            assert!(run(who.program()).unwrap().success());
        }
        drop(who);
        assert!(!staged_dir.exists(), "the staged copy is removed on drop");
    }

    fn current_euid() -> u32 {
        std::fs::metadata("/proc/self")
            .map(|m| m.uid())
            .unwrap_or(u32::MAX)
    }
}
