//! Network namespaces and veth pairs that a run creates and removes, also when it fails (every
//! guard deletes what it made on drop).
//!
//! Addresses only ever live inside namespaces made here. Processes are started with `nsenter`
//! rather than `ip netns exec`: the latter moves the process to the cgroup2 root
//! (iproute2's `vrf_reset`), which would take it out of a test's cgroup.

use crate::run_as::RunAs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, thiserror::Error)]
pub enum NetNsError {
    #[error("network namespaces need root (running as uid {0})")]
    NotRoot(u32),
    #[error("{0} is not installed (apt-get install {1})")]
    Missing(&'static str, &'static str),
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
    #[error("cannot run `{command}`")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
}

/// Why namespace tests cannot run here, or `None` when they can: root, `ip` and `nsenter`, and
/// a kernel that lets us create a namespace.
pub fn unavailable() -> Option<String> {
    let uid = current_uid();
    if uid != 0 {
        return Some(NetNsError::NotRoot(uid).to_string());
    }
    for (tool, package) in [("ip", "iproute2"), ("nsenter", "util-linux")] {
        if !on_path(tool) {
            return Some(NetNsError::Missing(tool, package).to_string());
        }
    }
    match NetNs::new("probe") {
        Ok(_) => None,
        Err(e) => Some(format!("the kernel refused a network namespace: {e}")),
    }
}

/// Whether `tool` is an executable on `PATH` (or in the sbin directories root has).
pub fn on_path(tool: &str) -> bool {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .map(PathBuf::from)
        .chain(["/usr/sbin", "/sbin", "/usr/bin"].map(PathBuf::from))
        .any(|d| d.join(tool).is_file())
}

fn current_uid() -> u32 {
    // /proc/self/status: "Uid:\treal\teffective\t..."
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(u32::MAX)
}

/// Run a command to completion; a non-zero exit is an error carrying its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<Output, NetNsError> {
    let command = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| NetNsError::Spawn {
            command: command.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(NetNsError::Command {
            command,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

/// A network namespace `warden-<prefix>-<pid>-<n>` with `lo` up; on drop, every process still
/// in it is killed and the namespace (with its interfaces and iptables rules) deleted.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    pub fn new(prefix: &str) -> Result<Self, NetNsError> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Interface-name-like limits do not apply to namespaces, but keep names short for `ip`.
        let name = format!("wd-{prefix}-{}-{n}", std::process::id());
        run("ip", &["netns", "add", &name])?;
        let ns = NetNs { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/NAME`, what `nsenter --net=` takes.
    pub fn path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.name)
    }

    /// `ip -n NAME args...`.
    pub fn ip(&self, args: &[&str]) -> Result<Output, NetNsError> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// A command that runs `program` inside the namespace (through `nsenter`, so it stays in
    /// the caller's cgroup). As another uid: [`NetNs::command_as`].
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", self.path().display()))
            .arg("--")
            .arg(program);
        c
    }

    /// As [`NetNs::command`], running `who`'s program as its uid/gid (e.g. the sidecar's 1337;
    /// [`RunAs`] makes sure that uid can execute it).
    pub fn command_as(&self, who: &RunAs) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", self.path().display()))
            .arg(format!("--setuid={}", who.uid()))
            .arg(format!("--setgid={}", who.gid()))
            .arg("--")
            .arg(who.program());
        c
    }

    /// Run `program args...` inside the namespace to completion.
    pub fn exec(&self, program: &str, args: &[&str]) -> Result<Output, NetNsError> {
        let p = self.path();
        let net = format!("--net={}", p.display());
        let mut all = vec![net.as_str(), "--", program];
        all.extend_from_slice(args);
        run("nsenter", &all)
    }

    /// Run `f` on a thread that has entered the namespace (`setns`), as an app of that
    /// namespace would: sockets it opens live there (also after it returns), and its traffic is
    /// captured like any non-proxy process's.
    #[allow(unsafe_code)] // setns(2): see the crate root.
    pub fn run_in<T: Send>(&self, f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
        let file = std::fs::File::open(self.path())?;
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    use std::os::fd::AsRawFd;
                    // SAFETY: setns on this thread only, with a namespace fd we hold open.
                    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                    if rc != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(f())
                })
                .join()
                .map_err(|_| std::io::Error::other("namespace thread panicked"))?
        })
    }

    /// The pids of processes in the namespace (`ip netns pids`).
    pub fn pids(&self) -> Vec<u32> {
        run("ip", &["netns", "pids", &self.name])
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        for pid in self.pids() {
            let _ = run("kill", &["-9", &pid.to_string()]);
        }
        let _ = run("ip", &["netns", "del", &self.name]);
    }
}

/// Join `a` and `b` with a veth pair: `a_addr`/`b_addr` in CIDR form (e.g. `10.77.0.1/24`) are
/// assigned inside the namespaces and both ends brought up. Deleting either namespace removes
/// the pair.
pub fn veth_pair(a: &NetNs, a_addr: &str, b: &NetNs, b_addr: &str) -> Result<(), NetNsError> {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    // Interface names are limited to 15 bytes.
    let (ea, eb) = (
        format!("va{}x{n}", std::process::id() % 100_000),
        format!("vb{}x{n}", std::process::id() % 100_000),
    );
    run(
        "ip",
        &[
            "link", "add", &ea, "netns", &a.name, "type", "veth", "peer", "name", &eb, "netns",
            &b.name,
        ],
    )?;
    a.ip(&["addr", "add", a_addr, "dev", &ea])?;
    b.ip(&["addr", "add", b_addr, "dev", &eb])?;
    a.ip(&["link", "set", &ea, "up"])?;
    b.ip(&["link", "set", &eb, "up"])?;
    Ok(())
}

/// Two pods on one veth, as the sidecar tests and `warden lab` lay them out: `client` and
/// `server` namespaces (names from the prefixes) with `client_ip`/`server_ip` on a /24, and the
/// client's default route via the server, so a call to a service VIP (which is nowhere) leaves
/// the client and capture can take it first.
pub fn pod_pair(
    client_prefix: &str,
    client_ip: &str,
    server_prefix: &str,
    server_ip: &str,
) -> Result<(NetNs, NetNs), NetNsError> {
    let client = NetNs::new(client_prefix)?;
    let server = NetNs::new(server_prefix)?;
    veth_pair(
        &client,
        &format!("{client_ip}/24"),
        &server,
        &format!("{server_ip}/24"),
    )?;
    client.ip(&["route", "add", "default", "via", server_ip])?;
    Ok((client, server))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_and_veth_come_and_go() {
        if let Some(why) = unavailable() {
            eprintln!("skipped: {why}");
            return;
        }
        let a = NetNs::new("ta").unwrap();
        let b = NetNs::new("tb").unwrap();
        veth_pair(&a, "10.231.0.1/24", &b, "10.231.0.2/24").unwrap();
        let out = a.exec("ip", &["-4", "addr", "show"]).unwrap();
        assert!(String::from_utf8_lossy(&out.stdout).contains("10.231.0.1"));
        let (na, nb) = (a.name().to_string(), b.name().to_string());
        drop(a);
        drop(b);
        let list = run("ip", &["netns", "list"]).unwrap();
        let list = String::from_utf8_lossy(&list.stdout);
        assert!(!list.contains(&na) && !list.contains(&nb), "{list}");
    }

    #[test]
    fn a_pod_pairs_client_routes_everything_via_the_server() {
        if let Some(why) = unavailable() {
            eprintln!("skipped: {why}");
            return;
        }
        let (client, server) = pod_pair("tpc", "10.231.9.1", "tps", "10.231.9.2").unwrap();
        let routes = client.exec("ip", &["-4", "route", "show"]).unwrap();
        let routes = String::from_utf8_lossy(&routes.stdout);
        assert!(routes.contains("default via 10.231.9.2"), "{routes}");
        let addrs = server.exec("ip", &["-4", "addr", "show"]).unwrap();
        assert!(String::from_utf8_lossy(&addrs.stdout).contains("10.231.9.2/24"));
    }
}
