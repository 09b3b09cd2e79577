//! Child cgroups of the cgroup2 hierarchy that a run creates and removes (its processes are
//! killed first). Never the root: eBPF programs attach and processes move only here.

use crate::netns::run;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A child cgroup of the cgroup2 hierarchy, removed on drop (its processes are killed first).
/// Never the root: tests attach programs and move processes only here.
#[derive(Debug)]
pub struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// Where cgroup2 is mounted: `/sys/fs/cgroup/unified` on hybrid hosts, else
    /// `/sys/fs/cgroup` when that is cgroup2 itself.
    pub fn root() -> Option<PathBuf> {
        let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
        mounts
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (_, dir, kind) = (f.next()?, f.next()?, f.next()?);
                (kind == "cgroup2").then(|| PathBuf::from(dir))
            })
            .next()
    }

    pub fn new(prefix: &str) -> std::io::Result<Self> {
        let root =
            Self::root().ok_or_else(|| std::io::Error::other("no cgroup2 hierarchy is mounted"))?;
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = root.join(format!("warden-{prefix}-{}-{n}", std::process::id()));
        std::fs::create_dir(&path)?;
        Ok(Cgroup { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A shell command line that moves itself into this cgroup and then `exec`s `inner`:
    /// `sh -c 'echo $$ > CG/cgroup.procs; exec "$@"' sh inner...`.
    pub fn wrap(&self, inner: &mut Command) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!(
                "echo $$ > {}/cgroup.procs && exec \"$@\"",
                self.path.display()
            ))
            .arg("sh")
            .arg(inner.get_program())
            .args(inner.get_args());
        c
    }

    pub fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.path.join("cgroup.procs"))
            .map(|s| {
                s.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                let _ = run("kill", &["-9", &pid.to_string()]);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir(&self.path);
    }
}
