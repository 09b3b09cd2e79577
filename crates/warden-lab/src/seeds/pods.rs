//! The sidecar experiments' two pods on one node, as bench/sidecar.sh and bench/accel.sh build
//! them: a client and a server network namespace joined by a veth, optionally each in its own
//! child cgroup (the eBPF programs attach there, never to the cgroup2 root), with `warden
//! capture` rules and sidecars running as uid 1337. Everything is removed on drop (the
//! warden-sandbox guards), also when Ctrl-C stops the run.

use crate::process::{Lab, Server};
use anyhow::Context;
use std::process::Command;
use warden_sandbox::{netns, Cgroup, NetNs, RunAs};

pub const PROXY_UID: u32 = 1337;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

pub struct Pods {
    // Cgroups first: dropping them kills their processes before the namespaces go.
    cgroups: Option<(Cgroup, Cgroup)>,
    client: NetNs,
    server: NetNs,
    pub client_ip: String,
    pub server_ip: String,
    /// The warden binary as uid 1337 can execute it (staged when it sits in a 0700 directory).
    proxy: RunAs,
}

/// Why the pods cannot be made here (not root, `ip`/`nsenter` missing), or `None`.
pub fn unavailable(extra_tools: &[&str]) -> Option<String> {
    if let Some(why) = netns::unavailable() {
        return Some(why);
    }
    extra_tools
        .iter()
        .find(|t| !netns::on_path(t))
        .map(|t| format!("{t} is not on PATH"))
}

impl Pods {
    /// Pods on `subnet` (e.g. "10.232.1": client .1, server .2); `cgroups` puts each in a child
    /// cgroup of its own.
    pub fn new(lab: &Lab, prefix: &str, subnet: &str, cgroups: bool) -> anyhow::Result<Pods> {
        let (client_ip, server_ip) = (format!("{subnet}.1"), format!("{subnet}.2"));
        let (client, server) = netns::pod_pair(
            &format!("{prefix}c"),
            &client_ip,
            &format!("{prefix}s"),
            &server_ip,
        )?;
        lab.record(format!(
            "ip netns add {} / {}; veth {client_ip}/24 <-> {server_ip}/24",
            client.name(),
            server.name()
        ));
        // A new connection per request makes a conntrack entry each (capture is NAT): at the
        // default 120 s TIME_WAIT they fill the host-wide table (bench/sidecar.sh).
        for ns in [&client, &server] {
            let _ = ns.exec(
                "sysctl",
                &["-qw", "net.netfilter.nf_conntrack_tcp_timeout_time_wait=2"],
            );
        }
        let cgroups = if cgroups {
            Some((Cgroup::new("lab-cli")?, Cgroup::new("lab-srv")?))
        } else {
            None
        };
        let proxy = RunAs::new(PROXY_UID, PROXY_UID, &lab.warden).with_context(|| {
            format!(
                "making {} executable by uid {PROXY_UID}",
                lab.warden.display()
            )
        })?;
        Ok(Pods {
            cgroups,
            client,
            server,
            client_ip,
            server_ip,
            proxy,
        })
    }

    fn ns(&self, side: Side) -> &NetNs {
        match side {
            Side::Client => &self.client,
            Side::Server => &self.server,
        }
    }

    pub fn cgroup(&self, side: Side) -> Option<&Cgroup> {
        self.cgroups.as_ref().map(|(c, s)| match side {
            Side::Client => c,
            Side::Server => s,
        })
    }

    /// The argv that runs what follows inside the pod: into its cgroup first, then its
    /// namespace (nsenter, so the process stays in the cgroup).
    pub fn prefix(&self, side: Side) -> Vec<String> {
        let mut argv = Vec::new();
        if let Some(cg) = self.cgroup(side) {
            argv.extend([
                "sh".to_string(),
                "-c".to_string(),
                format!(
                    "echo $$ > {}/cgroup.procs && exec \"$@\"",
                    cg.path().display()
                ),
                "sh".to_string(),
            ]);
        }
        argv.extend([
            "nsenter".to_string(),
            format!("--net={}", self.ns(side).path().display()),
            "--".to_string(),
        ]);
        argv
    }

    /// A command running `inner` (program and args) inside the pod.
    pub fn command(&self, side: Side, inner: &Command) -> Command {
        let argv = self.prefix(side);
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..])
            .arg(inner.get_program())
            .args(inner.get_args());
        c
    }

    /// `warden capture --proxy-uid 1337 ARGS` in the pod.
    pub fn capture(&self, lab: &Lab, side: Side, args: &[&str]) -> anyhow::Result<()> {
        let mut inner = Command::new(&lab.warden);
        inner
            .args(["capture", "--proxy-uid", &PROXY_UID.to_string()])
            .args(args);
        lab.run(self.command(side, &inner)).map(|_| ())
    }

    /// Start a sidecar (uid 1337, `caps` ambient when given, e.g. "+bpf,+net_admin,+sys_admin")
    /// in the pod; `extra` are more proxy flags.
    #[allow(clippy::too_many_arguments)]
    pub fn sidecar(
        &self,
        lab: &Lab,
        side: Side,
        name: &str,
        mesh: &std::path::Path,
        label: &str,
        caps: Option<&str>,
        extra: &[&str],
    ) -> anyhow::Result<Server> {
        let mut inner = lab.pinned(crate::process::Core::Server, "setpriv");
        inner.args(self.proxy.setpriv_args(caps));
        let pod_ip = match side {
            Side::Client => &self.client_ip,
            Side::Server => &self.server_ip,
        };
        inner.args(["proxy", "--mode", "sidecar", "-c"]);
        inner
            .arg(mesh)
            .args(["--concurrency", "1", "--no-watch", "--drain-timeout", "1s"]);
        inner.args([
            "--admin",
            "127.0.0.1:15000",
            "--pod-ip",
            pod_ip,
            "--label",
            label,
        ]);
        inner.args(extra);
        let mut cmd = self.command(side, &inner);
        cmd.env("RUST_LOG", "warn");
        lab.spawn(name, cmd)
    }
}
