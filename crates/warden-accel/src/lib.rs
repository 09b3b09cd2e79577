//! Same-node acceleration for the sidecar, as Merbridge/ASM do it: socket traffic
//! between meshed processes of one node (app -> sidecar -> sidecar -> app) is handed from
//! socket to socket by eBPF (sockops + sk_msg) instead of crossing TCP/IP, and capture can
//! be done without iptables (cgroup connect4/6 + getsockopt), which keeps every leg's
//! 4-tuples mirrored so each one can be short-circuited.
//!
//! Entry points: [`Accelerator::start`] for `warden proxy --mode sidecar --accel` (the proxy
//! holds the programs; their bpf_links go with it), and [`cli::run`] for
//! `warden accel enable|disable|status` (links pinned in warden's own bpffs).
//!
//! Modules: `probe` (privileges, kernel features), `cgroup` (the target cgroup, never the
//! root by default), `bpffs` (warden's mount and pins), `counters` (the counters map's
//! slots), `maps` (key/value shapes, pinned maps), `links` (finding and detaching warden's
//! cgroup links), `loader` (aya: load, attach, pin), `accelerator` (the proxy's handle),
//! `splice` (a sidecar's plain TCP relays, which apps' sends then skip),
//! `ops` (enable, disable, status), `scope` (what eBPF capture captures: `warden capture`'s
//! selections), `cli`. The BPF side is bpf/accel.bpf.c.

// Without eBPF support only the stubs call in; the pure parts stay built and tested.
#![cfg_attr(not(warden_ebpf), allow(dead_code, unused_imports))]
// Unsafe code is allowed only in the modules that call the kernel where neither aya nor std
// has a safe wrapper: statfs/mount/umount2 (`bpffs`), BPF_LINK_* syscalls (`links`), the
// plain-old-data map values aya reads and writes (`maps`), geteuid (`probe`), and the
// map updates and SO_NETNS_COOKIE reads of relay sockets (`splice`).
#![deny(unsafe_code)]

mod accelerator;
mod cgroup;
pub mod cli;
mod counters;
#[allow(unsafe_code)]
mod maps;
#[allow(unsafe_code)]
mod probe;
mod scope;
#[allow(unsafe_code)]
mod splice;

// `warden_ebpf`: the `ebpf` feature on a Linux target (set by build.rs).
#[cfg(warden_ebpf)]
#[allow(unsafe_code)]
mod bpffs;
#[cfg(warden_ebpf)]
#[allow(unsafe_code)]
mod links;
#[cfg(warden_ebpf)]
mod loader;
#[cfg(warden_ebpf)]
mod ops;

pub use accelerator::{AccelRequest, Accelerator, Unavailable};
pub use cgroup::{cgroup2_root, CgroupTarget};
pub use counters::{Counter, Counters};
pub use maps::Pair;
pub use probe::euid;
pub use scope::{InboundScope, OutboundScope, Scope};
pub use splice::{key_of, Direction, SpliceEntry, Splicer};

/// Who captures the pod's traffic.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Capture {
    /// `warden capture`'s nat rules; only legs whose 4-tuples mirror are short-circuited
    /// (sidecar -> app); REDIRECT/DNAT breaks the mirror on app -> sidecar and
    /// sidecar -> sidecar.
    #[default]
    Iptables,
    /// cgroup connect4/6 + getsockopt programs: every leg mirrors and is short-circuited.
    Ebpf,
}

impl Capture {
    pub fn name(self) -> &'static str {
        match self {
            Capture::Iptables => "iptables",
            Capture::Ebpf => "ebpf",
        }
    }

    /// Which legs this capture lets acceleration short-circuit, for `status` and logs.
    pub fn legs(self) -> &'static str {
        match self {
            Capture::Ebpf => {
                "every leg mirrors: app->sidecar, sidecar->sidecar (meshed pods of this node) \
                 and sidecar->app are short-circuited"
            }
            Capture::Iptables => {
                "only legs whose 4-tuples mirror are short-circuited: sidecar->app (from \
                 127.0.0.6); app->sidecar and sidecar->sidecar go through REDIRECT (DNAT), \
                 whose tuples do not mirror, and fall back to TCP (counted as redirect misses)"
            }
        }
    }
}

/// Which legs of a same-node call sk_msg short-circuits.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Legs {
    /// app -> sidecar, sidecar -> sidecar and sidecar -> app (Merbridge's and ASM's choice).
    /// The app's sockets enter the socket map, and the kernel's receive path for such a
    /// socket (tcp_bpf_recvmsg) returns EAGAIN from a *blocking* recv() that a state change
    /// wakes without data: the app's own shutdown(SHUT_WR), the ACK of its FIN. Apps on
    /// non-blocking sockets (Go, Java, Node, nginx, curl, tokio) retry; plain blocking
    /// readers see an error.
    #[default]
    All,
    /// Only sidecar -> sidecar: the app's sockets never enter the map and keep TCP's own
    /// receive path, so blocking apps are safe; app <-> sidecar stays on loopback TCP.
    Sidecars,
}

impl Legs {
    pub fn name(self) -> &'static str {
        match self {
            Legs::All => "all",
            Legs::Sidecars => "sidecars",
        }
    }

    /// What is short-circuited with `capture`; `Err` when that is nothing at all.
    pub fn with(self, capture: Capture) -> Result<&'static str, String> {
        match (self, capture) {
            (Legs::All, c) => Ok(c.legs()),
            (Legs::Sidecars, Capture::Ebpf) => Ok(
                "sidecar->sidecar (meshed pods of this node) is short-circuited; the app's \
                 sockets stay plain TCP (legs sidecars)",
            ),
            (Legs::Sidecars, Capture::Iptables) => Err(
                "legs `sidecars` with capture `iptables` would short-circuit nothing: REDIRECT \
                 breaks the sidecar->sidecar 4-tuples; use --capture ebpf, or legs `all`"
                    .into(),
            ),
        }
    }
}

/// Whether this build can load BPF programs at all (cargo feature `ebpf`, Linux).
pub const BUILT_WITH_EBPF: bool = cfg!(warden_ebpf);

/// Where warden mounts its own bpffs (shared maps, `enable`'s pinned links).
pub const DEFAULT_BPFFS: &str = "/run/warden/bpffs";

/// Where the embedded object came from: `clang` (built from bpf/accel.bpf.c) or
/// `checked-in` (bpf/accel.bpf.o, when clang was not available).
pub const OBJECT_FROM: &str = env!("WARDEN_ACCEL_OBJECT_FROM");
