//! Loading bpf/accel.bpf.o with aya and attaching its programs to one cgroup.
//!
//! Maps are pinned by name in warden's bpffs, so every loader on the node shares one socket
//! map (sidecar -> sidecar needs both ends in it). The sk_msg verdict belongs to that map: it
//! is attached once per load (replacing an identical one) and stays with the map, because
//! sockets already in the map keep the program they were linked with and detaching it under
//! them would gain nothing. Cgroup programs attach through bpf_links (made here: aya 0.14
//! cannot hand out a sockopt program's link to pin), which the kernel drops with their last
//! fd unless `warden accel enable` pins them.

use crate::links::{self, attach_type};
use crate::maps::{Pair, SOCK_PAIRS};
use crate::{Capture, Legs};
use aya::programs::{ProgramError, SkMsg};
use aya::{Ebpf, EbpfLoader};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// The object build.rs compiled (or the checked-in one).
pub static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/accel.bpf.o"));

/// What one attachment's programs know about their sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub proxy_uid: u32,
    pub outbound_port: u16,
    pub inbound_port: u16,
    pub capture: Capture,
    pub legs: Legs,
    /// The pod's own calls that eBPF capture takes.
    pub outbound: crate::OutboundScope,
    /// Where an app's captured call is sent: the pod's IPv4 (the app's socket then has the
    /// pod's address, as under REDIRECT), else loopback.
    pub app_dial: std::net::Ipv4Addr,
}

/// The cgroup programs, in the order they are attached: the verdict and the option hooks
/// first, capture last, so no connection is captured before its answer can be given.
pub fn cgroup_programs(capture: Capture) -> Vec<&'static str> {
    let mut p = vec!["wd_setsockopt"];
    if capture == Capture::Ebpf {
        p.push("wd_getsockopt");
    }
    p.push("wd_sockops");
    if capture == Capture::Ebpf {
        p.extend(["wd_getpeername4", "wd_getpeername6"]);
        p.extend(["wd_connect4", "wd_connect6"]);
    }
    p
}

fn program_error(name: &str, e: ProgramError) -> String {
    match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            // The verifier's last lines say what it refused.
            let log = verifier_log.to_string();
            let tail: Vec<&str> = log.lines().rev().take(4).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!(
                "the kernel refused program {name}: {io_error}; verifier: {}",
                tail.join(" | ")
            )
        }
        other => format!("program {name}: {other}"),
    }
}

/// Load the object with `settings`, maps shared through `bpffs`; programs loaded, nothing
/// attached. A program the kernel refuses is named with the verifier's reason.
pub fn load(bpffs: &Path, settings: &Settings) -> Result<Ebpf, String> {
    let uid = settings.proxy_uid;
    let outbound = u32::from(settings.outbound_port);
    let inbound = u32::from(settings.inbound_port);
    let app_legs = u32::from(settings.legs == Legs::All);
    let app_dial = u32::from(settings.app_dial);
    let mut ebpf = EbpfLoader::new()
        .default_map_pin_directory(bpffs)
        .override_global("proxy_uid", &uid, true)
        .override_global("outbound_port", &outbound, true)
        .override_global("inbound_port", &inbound, true)
        .override_global("app_legs", &app_legs, true)
        .override_global("app_dial_ip4", &app_dial, true)
        .override_global("out_scope", &settings.outbound, true)
        .load(OBJECT)
        .map_err(|e| format!("loading the BPF object: {e}"))?;
    for name in ["wd_sk_msg"]
        .into_iter()
        .chain(cgroup_programs(settings.capture))
    {
        let program = ebpf
            .program_mut(name)
            .ok_or_else(|| format!("the BPF object has no program {name}"))?;
        let loaded = match program {
            aya::programs::Program::SkMsg(p) => p.load(),
            aya::programs::Program::SockOps(p) => p.load(),
            aya::programs::Program::CgroupSockAddr(p) => p.load(),
            aya::programs::Program::CgroupSockopt(p) => p.load(),
            _ => return Err(format!("{name} has an unexpected program type")),
        };
        match loaded {
            Ok(()) => {}
            // IPv4 through dual-stack sockets is a bonus; without it capture is IPv4 only.
            Err(e) if name == "wd_connect6" => {
                tracing::warn!(
                    "{}; dual-stack sockets are not captured",
                    program_error(name, e)
                )
            }
            // Older kernels (before 5.8) have no getpeername hooks: capture still works,
            // and apps see the sidecar's outbound listener as their peer.
            Err(e) if name.starts_with("wd_getpeername") => {
                tracing::warn!(
                    "{}; getpeername() on captured connections names the sidecar",
                    program_error(name, e)
                )
            }
            Err(e) => return Err(program_error(name, e)),
        }
    }
    Ok(ebpf)
}

/// One cgroup program attached through a bpf_link: detached when the fd closes, unless
/// pinned.
pub struct Attachment {
    pub program: &'static str,
    pub link: OwnedFd,
}

fn attach_type(name: &str) -> Option<u32> {
    Some(match name {
        "wd_sockops" => attach_type::SOCK_OPS,
        "wd_connect4" => attach_type::INET4_CONNECT,
        "wd_connect6" => attach_type::INET6_CONNECT,
        "wd_getsockopt" => attach_type::GETSOCKOPT,
        "wd_setsockopt" => attach_type::SETSOCKOPT,
        "wd_getpeername4" => attach_type::INET4_GETPEERNAME,
        "wd_getpeername6" => attach_type::INET6_GETPEERNAME,
        _ => return None,
    })
}

/// Attach the verdict to the socket map and the cgroup programs to `cgroup`.
pub fn attach(
    ebpf: &mut Ebpf,
    cgroup: &std::fs::File,
    capture: Capture,
) -> Result<Vec<Attachment>, String> {
    let map_fd = {
        let map = ebpf
            .map(SOCK_PAIRS)
            .ok_or("the BPF object has no socket map")?;
        let hash = aya::maps::SockHash::<_, Pair>::try_from(map).map_err(|e| e.to_string())?;
        hash.fd()
            .try_clone()
            .map_err(|e| format!("socket map fd: {e}"))?
    };
    let msg: &mut SkMsg = ebpf
        .program_mut("wd_sk_msg")
        .ok_or("no wd_sk_msg")?
        .try_into()
        .map_err(|e: ProgramError| e.to_string())?;
    let id = msg
        .attach(&map_fd)
        .map_err(|e| format!("attaching wd_sk_msg to the socket map: {e}"))?;
    // The map keeps the verdict; dropping the link would detach it from sockets other
    // loaders insert later.
    std::mem::forget(msg.take_link(id).map_err(|e| e.to_string())?);

    let mut attached = Vec::new();
    for name in cgroup_programs(capture) {
        let (Some(program), Some(kind)) = (ebpf.program(name), attach_type(name)) else {
            continue;
        };
        let Ok(fd) = program.fd() else {
            continue; // connect6 or a getpeername hook did not load
        };
        let link = links::attach_cgroup(fd.as_fd(), cgroup.as_fd(), kind)
            .map_err(|e| format!("attaching {name}: {e}"))?;
        attached.push(Attachment {
            program: name,
            link,
        });
    }
    Ok(attached)
}

/// Pin the attachments under `dir`, so they outlive this process.
pub fn pin(attached: &[Attachment], dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for a in attached {
        let at = dir.join(a.program);
        links::pin(&a.link, &at)
            .map_err(|e| format!("pinning {} at {}: {e}", a.program, at.display()))?;
    }
    Ok(())
}

/// Remove the links `enable` pinned for one cgroup (the kernel drops a link with its last
/// reference). Returns the programs unpinned.
pub fn unpin(dir: &Path) -> Vec<String> {
    let mut done = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return done;
    };
    for entry in entries.flatten() {
        if std::fs::remove_file(entry.path()).is_ok() {
            done.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    let _ = std::fs::remove_dir(dir);
    done.sort();
    done
}
