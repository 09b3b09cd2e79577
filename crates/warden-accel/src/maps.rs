//! The shapes of the maps' keys and values as the C programs declare them, and reading the
//! pinned maps from any process (counters, sockets in the map, registered pods).

use std::net::IpAddr;

/// `struct pair` of bpf/accel.bpf.c: a socket's 4-tuple as that socket sees it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Pair {
    pub netns: u64,
    pub sip: [u32; 4],
    pub dip: [u32; 4],
    pub sport: u16,
    pub dport: u16,
    pub pad: u32,
}

/// `struct pod`: a meshed pod of this node whose sidecar serves `inbound_port`, for the
/// ports `scope` captures.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodEntry {
    pub cgroup: u64,
    pub inbound_port: u32,
    pub pad: u32,
    pub scope: crate::scope::InboundScope,
    pub pad2: u32,
}

/// `struct cgroup_cfg`: what one cgroup's load was given, for `status`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupEntry {
    /// 0 iptables, 1 ebpf.
    pub capture: u32,
    /// 0 all, 1 sidecars.
    pub legs: u32,
    pub proxy_uid: u32,
    pub outbound_port: u16,
    pub inbound_port: u16,
    /// Where the app's captured calls go (host order).
    pub app_dial: u32,
    pub outbound: crate::scope::OutboundScope,
    pub inbound: crate::scope::InboundScope,
}

impl CgroupEntry {
    /// `req`'s settings, its apps' calls going to `app_dial`.
    pub fn of(req: &crate::AccelRequest, app_dial: std::net::Ipv4Addr) -> CgroupEntry {
        CgroupEntry {
            capture: u32::from(req.capture == crate::Capture::Ebpf),
            legs: u32::from(req.legs == crate::Legs::Sidecars),
            proxy_uid: req.proxy_uid,
            outbound_port: req.outbound_port,
            inbound_port: req.inbound_port,
            app_dial: u32::from(app_dial),
            outbound: req.scope.outbound,
            inbound: req.scope.inbound,
        }
    }

    pub fn capture(&self) -> crate::Capture {
        if self.capture == 1 {
            crate::Capture::Ebpf
        } else {
            crate::Capture::Iptables
        }
    }

    /// Where eBPF capture sends the apps' calls, for `enable`, `status` and the proxy's log.
    pub fn dial_line(&self) -> String {
        format!(
            "apps' captured calls go to {}:{}",
            std::net::Ipv4Addr::from(self.app_dial),
            self.outbound_port
        )
    }

    pub fn legs(&self) -> crate::Legs {
        if self.legs == 1 {
            crate::Legs::Sidecars
        } else {
            crate::Legs::All
        }
    }
}

/// An address as the programs store it: IPv6, IPv4 v4-mapped, each 32-bit word in network
/// byte order (as the kernel's context fields hold them).
pub fn ip_key(ip: IpAddr) -> [u32; 4] {
    let v6 = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    let o = v6.octets();
    std::array::from_fn(|i| {
        u32::from_ne_bytes([o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]])
    })
}

/// The address of an [`ip_key`], IPv4 when v4-mapped.
pub fn key_ip(key: [u32; 4]) -> IpAddr {
    let mut o = [0u8; 16];
    for (i, w) in key.iter().enumerate() {
        o[4 * i..4 * i + 4].copy_from_slice(&w.to_ne_bytes());
    }
    let v6 = std::net::Ipv6Addr::from(o);
    v6.to_ipv4_mapped()
        .map(IpAddr::V4)
        .unwrap_or(IpAddr::V6(v6))
}

pub const SOCK_PAIRS: &str = "wd_sock_pairs";
pub const LOCAL_PODS: &str = "wd_local_pods";
pub const COUNTERS: &str = "wd_counters";
pub const CGROUPS: &str = "wd_cgroups";

#[cfg(warden_ebpf)]
mod pinned {
    use super::*;
    use crate::counters::{Counter, Counters};
    use aya::maps::{Array, HashMap, Map, MapData, SockHash};
    use std::path::Path;

    // SAFETY: plain integers with explicit padding, the same layout as the C structs.
    unsafe impl aya::Pod for Pair {}
    unsafe impl aya::Pod for PodEntry {}
    unsafe impl aya::Pod for crate::scope::OutboundScope {}
    unsafe impl aya::Pod for CgroupEntry {}

    pub fn open(bpffs: &Path, name: &str) -> Result<Map, String> {
        let path = bpffs.join(name);
        let data = MapData::from_pin(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Map::from_map_data(data).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn read_counters(array: &Array<MapData, u64>) -> Counters {
        let mut c = Counters::default();
        for counter in Counter::ALL {
            c.0[counter as usize] = array.get(&counter.slot(), 0).unwrap_or(0);
        }
        c
    }

    pub fn counters_at(bpffs: &Path) -> Result<Counters, String> {
        let array =
            Array::<MapData, u64>::try_from(open(bpffs, COUNTERS)?).map_err(|e| e.to_string())?;
        Ok(read_counters(&array))
    }

    /// How many sockets the socket map holds now.
    pub fn sockets_at(bpffs: &Path) -> Result<usize, String> {
        let hash = SockHash::<MapData, Pair>::try_from(open(bpffs, SOCK_PAIRS)?)
            .map_err(|e| e.to_string())?;
        Ok(hash.keys().flatten().count())
    }

    pub fn pods_at(bpffs: &Path) -> Result<Vec<(IpAddr, PodEntry)>, String> {
        let map = HashMap::<MapData, [u32; 4], PodEntry>::try_from(open(bpffs, LOCAL_PODS)?)
            .map_err(|e| e.to_string())?;
        Ok(map.iter().flatten().map(|(k, v)| (key_ip(k), v)).collect())
    }

    /// Register this pod's addresses (its sidecar's inbound port) for same-node callers.
    pub fn register_pods(
        map: &mut HashMap<MapData, [u32; 4], PodEntry>,
        ips: &[IpAddr],
        cgroup: u64,
        inbound_port: u16,
        scope: &crate::scope::InboundScope,
    ) -> Result<(), String> {
        for ip in ips {
            let entry = PodEntry {
                cgroup,
                inbound_port: inbound_port.into(),
                pad: 0,
                scope: *scope,
                pad2: 0,
            };
            map.insert(ip_key(*ip), entry, 0)
                .map_err(|e| format!("registering pod {ip}: {e}"))?;
        }
        Ok(())
    }

    /// Remove the pods `cgroup` registered; returns their addresses.
    pub fn unregister_pods(
        map: &mut HashMap<MapData, [u32; 4], PodEntry>,
        cgroup: u64,
    ) -> Vec<IpAddr> {
        let mine: Vec<[u32; 4]> = map
            .iter()
            .flatten()
            .filter(|(_, v)| v.cgroup == cgroup)
            .map(|(k, _)| k)
            .collect();
        mine.into_iter()
            .filter(|k| map.remove(k).is_ok())
            .map(key_ip)
            .collect()
    }

    /// Remove pods whose registering cgroup is no longer `live`; returns them.
    pub fn prune_pods(
        map: &mut HashMap<MapData, [u32; 4], PodEntry>,
        live: impl Fn(u64) -> bool,
    ) -> Vec<(IpAddr, u64)> {
        let stale: Vec<([u32; 4], u64)> = map
            .iter()
            .flatten()
            .filter(|(_, v)| !live(v.cgroup))
            .map(|(k, v)| (k, v.cgroup))
            .collect();
        stale
            .into_iter()
            .filter(|(k, _)| map.remove(k).is_ok())
            .map(|(k, c)| (key_ip(k), c))
            .collect()
    }

    fn cgroups_map_at(bpffs: &Path) -> Result<HashMap<MapData, u64, CgroupEntry>, String> {
        HashMap::try_from(open(bpffs, CGROUPS)?).map_err(|e| e.to_string())
    }

    /// Note what `cgroup`'s programs were loaded with (replacing a dead load's note).
    pub fn record_cgroup(bpffs: &Path, cgroup: u64, entry: &CgroupEntry) -> Result<(), String> {
        cgroups_map_at(bpffs)?
            .insert(cgroup, *entry, 0)
            .map_err(|e| format!("noting cgroup {cgroup}'s settings: {e}"))
    }

    pub fn forget_cgroup(bpffs: &Path, cgroup: u64) {
        if let Ok(mut m) = cgroups_map_at(bpffs) {
            let _ = m.remove(&cgroup);
        }
    }

    /// What `cgroup`'s programs were loaded with; `None` for a load that did not say (an
    /// older warden's).
    pub fn cgroup_at(bpffs: &Path, cgroup: u64) -> Option<CgroupEntry> {
        cgroups_map_at(bpffs).ok()?.get(&cgroup, 0).ok()
    }

    /// The kernel ids of the maps pinned in `bpffs`: a program using one of them belongs
    /// to this bpffs.
    pub fn map_ids_at(bpffs: &Path) -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir(bpffs) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("wd_"))
            .filter_map(|e| MapData::from_pin(e.path()).ok()?.info().ok())
            .map(|i| i.id())
            .collect()
    }

    pub fn pods_map_at(bpffs: &Path) -> Result<HashMap<MapData, [u32; 4], PodEntry>, String> {
        HashMap::try_from(open(bpffs, LOCAL_PODS)?).map_err(|e| e.to_string())
    }
}

#[cfg(warden_ebpf)]
pub use pinned::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_has_the_c_layout() {
        assert_eq!(std::mem::size_of::<Pair>(), 48);
        assert_eq!(std::mem::offset_of!(Pair, sport), 40);
        assert_eq!(std::mem::size_of::<PodEntry>(), 128);
        assert_eq!(std::mem::size_of::<CgroupEntry>(), 20 + 1088 + 108);
    }

    #[test]
    fn ipv4_is_stored_v4_mapped_in_network_order() {
        let k = ip_key("10.231.1.2".parse().unwrap());
        assert_eq!(k[0], 0);
        assert_eq!(k[1], 0);
        assert_eq!(k[2].to_ne_bytes(), [0, 0, 0xff, 0xff]);
        assert_eq!(k[3].to_ne_bytes(), [10, 231, 1, 2]);
        assert_eq!(key_ip(k), "10.231.1.2".parse::<IpAddr>().unwrap());
        let v6: IpAddr = "fd00::7".parse().unwrap();
        assert_eq!(key_ip(ip_key(v6)), v6);
    }
}
