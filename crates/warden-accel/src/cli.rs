//! `warden accel enable|disable|status`.

use crate::{AccelRequest, Capture, Legs, DEFAULT_BPFFS};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct AccelArgs {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(clap::Subcommand, Debug)]
pub enum Action {
    /// Attach the programs to a pod's cgroup and leave them attached (links pinned in warden's
    /// bpffs) until `disable`.
    Enable(EnableArgs),
    /// Detach warden's programs from a cgroup (pinned or held by a proxy), or from every
    /// cgroup `enable` attached to; `--clean` also removes every pin and warden's bpffs.
    Disable(DisableArgs),
    /// What is attached where, what each capture short-circuits, and the counters.
    Status(StatusArgs),
}

#[derive(clap::Args, Debug)]
pub struct EnableArgs {
    /// The pod's cgroup2 directory (default: this process's own cgroup; never the cgroup2
    /// root unless named here).
    #[arg(long)]
    pub cgroup: Option<PathBuf>,
    /// Who captures the pod's traffic: `ebpf` adds the connect/getsockopt programs (every leg
    /// short-circuited), `iptables` keeps `warden capture`'s rules (only mirrored legs).
    #[arg(long, value_enum, default_value_t = Capture::Iptables)]
    pub capture: Capture,
    /// Which legs are short-circuited: `all`, or `sidecars` (only sidecar -> sidecar, needs
    /// `--capture ebpf`; the app's sockets stay plain TCP, safe for blocking readers).
    #[arg(long, value_enum, default_value_t = Legs::All)]
    pub legs: Legs,
    /// The sidecar's uid (its own connect()s are not captured).
    #[arg(long, default_value_t = 1337)]
    pub proxy_uid: u32,
    /// The sidecar's outbound listener, where `--capture ebpf` sends the pod's calls.
    #[arg(long, default_value_t = 15001)]
    pub outbound_port: u16,
    /// The sidecar's inbound listener, where same-node sidecars' calls to the pod land.
    #[arg(long, default_value_t = 15006)]
    pub inbound_port: u16,
    /// The pod's address (repeatable); with `--capture ebpf`, same-node sidecars then connect
    /// straight to its inbound port.
    #[arg(long = "pod-ip")]
    pub pod_ips: Vec<IpAddr>,
    /// warden's own bpffs, mounted here if it is not.
    #[arg(long, default_value = DEFAULT_BPFFS)]
    pub bpffs: PathBuf,
    /// With `--capture ebpf`: what is captured, as `warden capture` takes it.
    #[command(flatten)]
    pub selection: warden_capture::SelectionArgs,
}

#[derive(clap::Args, Debug)]
pub struct DisableArgs {
    /// Only this cgroup (default: every cgroup `enable` attached to).
    #[arg(long)]
    pub cgroup: Option<PathBuf>,
    /// Also remove every pinned map and link and unmount warden's bpffs.
    #[arg(long)]
    pub clean: bool,
    /// warden's own bpffs, where `enable` pinned the links.
    #[arg(long, default_value = DEFAULT_BPFFS)]
    pub bpffs: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Only this cgroup's attachments (probes are made for it too).
    #[arg(long)]
    pub cgroup: Option<PathBuf>,
    /// The capture to probe kernel support for.
    #[arg(long, value_enum, default_value_t = Capture::Ebpf)]
    pub capture: Capture,
    /// warden's own bpffs, where the pinned links and the shared maps are.
    #[arg(long, default_value = DEFAULT_BPFFS)]
    pub bpffs: PathBuf,
}

pub fn run(args: AccelArgs) -> anyhow::Result<ExitCode> {
    imp::run(args)
}

#[cfg(warden_ebpf)]
mod imp {
    use super::*;
    use crate::ops;

    pub fn run(args: AccelArgs) -> anyhow::Result<ExitCode> {
        match args.action {
            Action::Enable(a) => {
                if a.capture != Capture::Ebpf && !a.selection.is_default() {
                    anyhow::bail!(
                        "the capture selections (--exclude-outbound-ports, ...) are for --capture ebpf; with iptables capture give them to `warden capture`"
                    );
                }
                let scope = crate::Scope::from_args(
                    &a.selection,
                    a.proxy_uid,
                    a.outbound_port,
                    a.inbound_port,
                )
                .map_err(|e| anyhow::anyhow!("warden accel enable: {e}"))?;
                let req = AccelRequest {
                    scope,
                    cgroup: a.cgroup,
                    bpffs: a.bpffs,
                    capture: a.capture,
                    legs: a.legs,
                    proxy_uid: a.proxy_uid,
                    outbound_port: a.outbound_port,
                    inbound_port: a.inbound_port,
                    pod_ips: a.pod_ips,
                };
                match ops::enable(&req) {
                    Ok(lines) => {
                        for l in lines {
                            println!("{l}");
                        }
                        Ok(ExitCode::SUCCESS)
                    }
                    Err(why) => {
                        eprintln!("warden accel enable: not enabled, missing:");
                        for m in why.0 {
                            eprintln!("  - {m}");
                        }
                        Ok(ExitCode::FAILURE)
                    }
                }
            }
            Action::Disable(a) => match ops::disable(a.cgroup.as_deref(), &a.bpffs, a.clean) {
                Ok(lines) => {
                    for l in lines {
                        println!("{l}");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("warden accel disable: {e}");
                    Ok(ExitCode::FAILURE)
                }
            },
            Action::Status(a) => {
                print!("{}", ops::status(a.cgroup.as_deref(), &a.bpffs, a.capture));
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

#[cfg(not(warden_ebpf))]
mod imp {
    use super::*;

    pub fn run(_: AccelArgs) -> anyhow::Result<ExitCode> {
        eprintln!(
            "warden accel: this warden was built without eBPF support (warden-accel's `ebpf` feature is off, or not Linux)"
        );
        Ok(ExitCode::FAILURE)
    }
}
