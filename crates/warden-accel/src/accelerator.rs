//! The handle `warden proxy --mode sidecar --accel` holds: the loaded programs, attached to
//! the pod's cgroup for the proxy's lifetime (bpf_links, dropped with it), the pod's
//! addresses announced to same-node callers while it serves, and the counters for
//! `/stats/prometheus`. When anything is missing, [`Unavailable`] lists every reason and the
//! proxy runs unaccelerated.

use crate::counters::Counters;
use crate::{Capture, Legs};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// What to accelerate and for whom.
#[derive(Debug, Clone)]
pub struct AccelRequest {
    /// `--cgroup`; `None` is the process's own cgroup (refused when that is the root).
    pub cgroup: Option<PathBuf>,
    /// warden's bpffs (mounted if it is not).
    pub bpffs: PathBuf,
    pub capture: Capture,
    pub legs: Legs,
    /// The uid whose connect()s are the sidecar's own (not captured).
    pub proxy_uid: u32,
    pub outbound_port: u16,
    pub inbound_port: u16,
    /// The pod's addresses: same-node sidecars connect straight to `inbound_port` there.
    pub pod_ips: Vec<IpAddr>,
    /// What eBPF capture captures (`warden capture`'s selections).
    pub scope: crate::Scope,
}

impl AccelRequest {
    /// Where eBPF capture sends the app's calls: the pod's first IPv4 address that is an
    /// address of this network namespace (the sidecar's; never one that would route out of
    /// the pod), else 127.0.0.1, where the app's sockets then show loopback as their own
    /// address (`warden accel enable` run outside the pod's namespace).
    pub fn app_dial(&self) -> std::net::Ipv4Addr {
        self.pod_ips
            .iter()
            .find_map(|ip| match ip {
                IpAddr::V4(v4) if std::net::UdpSocket::bind((*v4, 0)).is_ok() => Some(*v4),
                _ => None,
            })
            .unwrap_or(std::net::Ipv4Addr::LOCALHOST)
    }
}

/// Why acceleration is off: every missing piece, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub Vec<String>);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.join("; "))
    }
}

impl std::error::Error for Unavailable {}

/// Scrape-time text appended to `/stats/prometheus`.
pub type MetricsFn = Arc<dyn Fn(&mut String) + Send + Sync>;

pub struct Accelerator {
    inner: imp::Inner,
}

impl Accelerator {
    /// Probe, load and attach. The pod is not announced yet: see [`Accelerator::announce`].
    pub fn start(req: &AccelRequest) -> Result<Accelerator, Unavailable> {
        imp::Inner::start(req).map(|inner| Accelerator { inner })
    }

    /// Announce the pod's addresses (eBPF capture): from now on same-node sidecars connect
    /// to its inbound listener directly. Call once the listeners are up.
    pub fn announce(&mut self) {
        self.inner.announce()
    }

    /// Stop announcing the pod (before the listeners close).
    pub fn withdraw(&mut self) {
        self.inner.withdraw()
    }

    /// One line for the log: where, which capture and what that short-circuits.
    pub fn describe(&self) -> String {
        self.inner.describe()
    }

    pub fn counters(&self) -> Counters {
        self.inner.counters()
    }

    /// The counters as Prometheus text, read at each scrape.
    pub fn metrics(&self) -> MetricsFn {
        self.inner.metrics()
    }

    /// For the sidecar's plain TCP relays, when apps' sends can skip them: eBPF capture
    /// with the app legs in the map (only then does every leg's tuple mirror).
    pub fn splicer(&self) -> Option<crate::Splicer> {
        self.inner.splicer()
    }
}

#[cfg(not(warden_ebpf))]
mod imp {
    use super::*;

    pub enum Inner {}

    impl Inner {
        pub fn start(_: &AccelRequest) -> Result<Inner, Unavailable> {
            Err(Unavailable(vec![
                "this warden was built without eBPF support (warden-accel's `ebpf` feature is off, or not Linux)".into(),
            ]))
        }
        pub fn announce(&mut self) {
            match *self {}
        }
        pub fn withdraw(&mut self) {
            match *self {}
        }
        pub fn describe(&self) -> String {
            match *self {}
        }
        pub fn counters(&self) -> Counters {
            match *self {}
        }
        pub fn metrics(&self) -> MetricsFn {
            match *self {}
        }
        pub fn splicer(&self) -> Option<crate::Splicer> {
            match *self {}
        }
    }
}

#[cfg(warden_ebpf)]
pub(crate) mod imp {
    use super::*;
    use crate::cgroup::{self, CgroupTarget};
    use crate::loader::{self, Attachment, Settings};
    use crate::maps::{self, COUNTERS};
    use crate::{bpffs, links, probe};
    use aya::maps::{Array, MapData};
    use aya::Ebpf;

    /// Everything checked before loading: privileges, the target cgroup, kernel features,
    /// whether warden's bpffs can be mounted. All reasons at once.
    pub(crate) fn preflight(req: &AccelRequest) -> Result<CgroupTarget, Unavailable> {
        preflight_for(req, true)
    }

    /// [`preflight`]; `with_cgroup` false skips the target (`status` without `--cgroup`),
    /// and an unresolved target is then no reason.
    pub(crate) fn preflight_for(
        req: &AccelRequest,
        with_cgroup: bool,
    ) -> Result<CgroupTarget, Unavailable> {
        let mut missing = Vec::new();
        if let Err(e) = req.legs.with(req.capture) {
            missing.push(e);
        }
        let caps = probe::effective_capabilities();
        let privileges = probe::missing_privileges(caps, probe::euid());
        let privileged = privileges.is_empty();
        missing.extend(privileges);
        let root = cgroup::cgroup2_root();
        let target = match cgroup::resolve(req.cgroup.as_deref(), root.as_deref()) {
            Ok(t) => Some(t),
            Err(e) if with_cgroup || matches!(e, cgroup::CgroupError::NoCgroup2) => {
                missing.push(e.to_string());
                None
            }
            Err(_) => Some(CgroupTarget {
                path: root.clone().unwrap_or_default(),
                id: 0,
            }),
        };
        if privileged {
            missing.extend(
                probe::missing_kernel_features(req.capture == Capture::Ebpf)
                    .into_iter()
                    .map(|m| format!("kernel support for {m}")),
            );
        }
        if !bpffs::is_mounted(&req.bpffs) && !probe::may_mount(caps) {
            missing.push(format!(
                "CAP_SYS_ADMIN to mount warden's bpffs at {} (not mounted yet; `warden accel enable` as root mounts it)",
                req.bpffs.display()
            ));
        }
        match target {
            Some(t) if missing.is_empty() => Ok(t),
            _ => Err(Unavailable(missing)),
        }
    }

    pub(crate) struct Prepared {
        pub ebpf: Ebpf,
        pub target: CgroupTarget,
        pub attached: Vec<Attachment>,
        /// What was loaded, as `status` reads it back.
        pub entry: maps::CgroupEntry,
    }

    /// Preflight, mount, load, attach.
    pub(crate) fn prepare(req: &AccelRequest) -> Result<Prepared, Unavailable> {
        let one = |m: String| Unavailable(vec![m]);
        let target = preflight(req)?;
        let existing = links::cgroup_links(Some(target.id));
        if !existing.is_empty() {
            let names: Vec<&str> = existing.iter().map(|l| l.program.as_str()).collect();
            return Err(one(format!(
                "{} already has warden's programs attached ({}); not attaching twice (`warden accel disable --cgroup {}` detaches them)",
                target.path.display(),
                names.join(" "),
                target.path.display()
            )));
        }
        bpffs::ensure(
            &req.bpffs,
            probe::may_mount(probe::effective_capabilities()),
        )
        .map_err(|e| one(e.to_string()))?;
        let settings = Settings {
            proxy_uid: req.proxy_uid,
            outbound_port: req.outbound_port,
            inbound_port: req.inbound_port,
            capture: req.capture,
            legs: req.legs,
            outbound: req.scope.outbound,
            app_dial: req.app_dial(),
        };
        let entry = maps::CgroupEntry::of(req, settings.app_dial);
        let mut ebpf = loader::load(&req.bpffs, &settings).map_err(one)?;
        // Run as root for sidecars of another uid: let them open the shared maps.
        if probe::euid() == 0 && req.proxy_uid != 0 {
            bpffs::hand_to(&req.bpffs, req.proxy_uid).map_err(|e| one(e.to_string()))?;
        }
        let cg = std::fs::File::open(&target.path)
            .map_err(|e| one(format!("{}: {e}", target.path.display())))?;
        let attached = loader::attach(&mut ebpf, &cg, req.capture).map_err(one)?;
        maps::record_cgroup(&req.bpffs, target.id, &entry).map_err(one)?;
        Ok(Prepared {
            ebpf,
            target,
            attached,
            entry,
        })
    }

    pub struct Inner {
        // The cgroup links: closing them detaches the programs (also when the process dies).
        _links: Vec<Attachment>,
        _ebpf: Ebpf,
        target: CgroupTarget,
        req: AccelRequest,
        entry: maps::CgroupEntry,
        counters: Arc<Array<MapData, u64>>,
        splicer: Option<crate::Splicer>,
        announced: bool,
    }

    impl Inner {
        pub fn start(req: &AccelRequest) -> Result<Inner, Unavailable> {
            let prepared = prepare(req)?;
            let counters = maps::open(&req.bpffs, COUNTERS)
                .and_then(|m| Array::try_from(m).map_err(|e| e.to_string()))
                .map_err(|e| Unavailable(vec![format!("reading the counters map: {e}")]))?;
            let splicer = if req.capture == Capture::Ebpf && req.legs == Legs::All {
                Some(
                    crate::Splicer::open(&req.bpffs)
                        .map_err(|e| Unavailable(vec![format!("opening the splice map: {e}")]))?,
                )
            } else {
                None
            };
            Ok(Inner {
                splicer,
                _links: prepared.attached,
                _ebpf: prepared.ebpf,
                target: prepared.target,
                entry: prepared.entry,
                req: req.clone(),
                counters: Arc::new(counters),
                announced: false,
            })
        }

        pub fn announce(&mut self) {
            if self.req.capture != Capture::Ebpf || self.req.pod_ips.is_empty() || self.announced {
                return;
            }
            let result = maps::pods_map_at(&self.req.bpffs).and_then(|mut m| {
                // Pods whose sidecar died without withdrawing (SIGKILL) would send callers to a
                // closed port: a pod is live while its cgroup has warden's programs attached.
                for (ip, cgroup) in maps::prune_pods(&mut m, |id| !links::cgroup_links(Some(id)).is_empty()) {
                    tracing::info!("forgot stale meshed pod {ip} (cgroup id {cgroup} has no programs attached)");
                }
                maps::register_pods(
                    &mut m,
                    &self.req.pod_ips,
                    self.target.id,
                    self.req.inbound_port,
                    &self.req.scope.inbound,
                )
            });
            match result {
                Ok(()) => self.announced = true,
                Err(e) => tracing::warn!(
                    "same-node sidecars will not connect to this pod's inbound port directly: {e}"
                ),
            }
        }

        pub fn withdraw(&mut self) {
            if !self.announced {
                return;
            }
            if let Ok(mut m) = maps::pods_map_at(&self.req.bpffs) {
                maps::unregister_pods(&mut m, self.target.id);
            }
            self.announced = false;
        }

        pub fn describe(&self) -> String {
            let splice = if self.splicer.is_some() {
                "; plain TCP relays splice: once both sidecars of a same-node call relay \
                 bytes untouched, the apps' sends go app to app"
            } else {
                ""
            };
            let dial = if self.req.capture == Capture::Ebpf {
                format!("; {}", self.entry.dial_line())
            } else {
                String::new()
            };
            format!(
                "cgroup {} (id {}), capture {}, legs {}: {}{splice}{dial}; shared maps in {}",
                self.target.path.display(),
                self.target.id,
                self.req.capture.name(),
                self.req.legs.name(),
                self.req.legs.with(self.req.capture).unwrap_or_default(),
                self.req.bpffs.display()
            )
        }

        pub fn counters(&self) -> Counters {
            maps::read_counters(&self.counters)
        }

        pub fn splicer(&self) -> Option<crate::Splicer> {
            self.splicer.clone()
        }

        pub fn metrics(&self) -> MetricsFn {
            let counters = self.counters.clone();
            let capture = self.req.capture.name();
            let legs = self.req.legs.name();
            Arc::new(move |out: &mut String| {
                maps::read_counters(&counters).prometheus(out);
                out.push_str(
                    "# HELP warden_accel_attached Whether this sidecar's eBPF programs are loaded (by capture and legs).\n\
                     # TYPE warden_accel_attached gauge\n",
                );
                out.push_str(&format!(
                    "warden_accel_attached{{capture=\"{capture}\",legs=\"{legs}\"}} 1\n"
                ));
            })
        }
    }

    impl Drop for Inner {
        fn drop(&mut self) {
            self.withdraw();
            maps::forget_cgroup(&self.req.bpffs, self.target.id);
        }
    }
}
