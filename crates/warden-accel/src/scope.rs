//! What eBPF capture captures: `warden capture`'s selections (istio-iptables' `-b -d -x -o
//! -i`, set by Istio's `traffic.sidecar.istio.io/*` pod annotations), in the shapes the
//! programs hold them. The outbound part is a global of each cgroup's load (the pod's own
//! calls); the inbound part travels with the pod's entry in `wd_local_pods`, for the sidecars
//! of other pods of this node that connect to it. Lists are bounded (the programs loop over
//! fixed arrays); a longer one is refused, never cut.

use crate::maps::ip_key;
use ipnet::IpNet;
use warden_capture::{
    inbound_exclusions, CaptureConfig, CidrSelection, PortSelection, SelectionArgs,
};

/// Ports per list (`PORTS_MAX`) and CIDRs per list (`CIDRS_MAX`), as bpf/accel.bpf.c.
pub const PORTS_MAX: usize = 24;
pub const CIDRS_MAX: usize = 16;

/// `struct cidr`: an address and its mask, each word in network order (IPv4 v4-mapped).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cidr {
    pub ip: [u32; 4],
    pub mask: [u32; 4],
}

/// `struct out_scope`: the pod's calls that connect4/6 send to the outbound listener.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboundScope {
    pub n_ports: u32,
    /// Destination ports never captured.
    pub ports: [u16; PORTS_MAX],
    pub n_excluded: u32,
    /// Destinations never captured.
    pub excluded: [Cidr; CIDRS_MAX],
    /// 1: every destination not excluded; 0: only those in `included`.
    pub included_all: u32,
    pub n_included: u32,
    pub included: [Cidr; CIDRS_MAX],
}

/// `struct in_scope`: the ports of a pod that its sidecar's inbound listener serves.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboundScope {
    /// 1: every port not excluded; 0: only those in `ports`.
    pub all_ports: u32,
    pub n_ports: u32,
    pub ports: [u16; PORTS_MAX],
    pub n_excluded: u32,
    /// Never captured: Istio's own ports, the proxy's, and the pod's exclusions.
    pub excluded: [u16; PORTS_MAX],
}

impl Default for OutboundScope {
    /// Everything captured.
    fn default() -> Self {
        OutboundScope {
            n_ports: 0,
            ports: [0; PORTS_MAX],
            n_excluded: 0,
            excluded: [Cidr::default(); CIDRS_MAX],
            included_all: 1,
            n_included: 0,
            included: [Cidr::default(); CIDRS_MAX],
        }
    }
}

fn cidr(net: &IpNet) -> Cidr {
    // IPv4 is v4-mapped: its prefix sits under the 96 bits of ::ffff:0:0/96.
    let (ip, bits) = match net {
        IpNet::V4(v4) => (
            std::net::IpAddr::V4(v4.network()),
            96 + u32::from(v4.prefix_len()),
        ),
        IpNet::V6(v6) => (
            std::net::IpAddr::V6(v6.network()),
            u32::from(v6.prefix_len()),
        ),
    };
    let mask: [u32; 4] = std::array::from_fn(|i| {
        let keep = bits.saturating_sub(32 * i as u32).min(32);
        let host = if keep == 0 {
            0
        } else {
            u32::MAX << (32 - keep)
        };
        host.to_be()
    });
    Cidr {
        ip: ip_key(ip),
        mask,
    }
}

fn ports<const N: usize>(what: &str, list: &[u16]) -> Result<(u32, [u16; N]), String> {
    if list.len() > N {
        return Err(format!(
            "eBPF capture takes at most {N} {what}, {} given (iptables capture takes any number)",
            list.len()
        ));
    }
    let mut out = [0; N];
    out[..list.len()].copy_from_slice(list);
    Ok((list.len() as u32, out))
}

fn cidrs(what: &str, list: &[IpNet]) -> Result<(u32, [Cidr; CIDRS_MAX]), String> {
    if list.len() > CIDRS_MAX {
        return Err(format!(
            "eBPF capture takes at most {CIDRS_MAX} {what}, {} given (iptables capture takes any number)",
            list.len()
        ));
    }
    let mut out = [Cidr::default(); CIDRS_MAX];
    for (slot, net) in out.iter_mut().zip(list) {
        *slot = cidr(net);
    }
    Ok((list.len() as u32, out))
}

impl OutboundScope {
    pub fn of(cfg: &CaptureConfig) -> Result<OutboundScope, String> {
        let (n_ports, ports) = ports("--exclude-outbound-ports", &cfg.exclude_outbound_ports)?;
        let (n_excluded, excluded) =
            cidrs("--exclude-outbound-cidrs", &cfg.exclude_outbound_cidrs)?;
        let (included_all, list) = match &cfg.include_outbound_cidrs {
            CidrSelection::All => (1, &[][..]),
            CidrSelection::Only(list) => (0, &list[..]),
        };
        let (n_included, included) = cidrs("--include-outbound-cidrs", list)?;
        Ok(OutboundScope {
            n_ports,
            ports,
            n_excluded,
            excluded,
            included_all,
            n_included,
            included,
        })
    }
}

impl InboundScope {
    pub fn of(cfg: &CaptureConfig) -> Result<InboundScope, String> {
        let (all_ports, list) = match &cfg.inbound_ports {
            PortSelection::All => (1, &[][..]),
            PortSelection::Only(list) => (0, &list[..]),
        };
        let (n_ports, ports) = ports("--inbound-ports", list)?;
        let (n_excluded, excluded) = self::ports(
            "excluded inbound ports (--exclude-inbound-ports with Istio's and the proxy's own)",
            &inbound_exclusions(cfg),
        )?;
        Ok(InboundScope {
            all_ports,
            n_ports,
            ports,
            n_excluded,
            excluded,
        })
    }

    /// What the programs decide for `port` (the tests' model of bpf/accel.bpf.c).
    pub fn captures(&self, port: u16) -> bool {
        let has = |n: u32, list: &[u16]| list[..n as usize].contains(&port);
        !has(self.n_excluded, &self.excluded)
            && (self.all_ports == 1 || has(self.n_ports, &self.ports))
    }
}

impl OutboundScope {
    /// What connect4/6 decide for a destination that is not loopback (the tests' model).
    pub fn captures(&self, ip: std::net::IpAddr, port: u16) -> bool {
        let key = ip_key(ip);
        let within = |c: &Cidr| (0..4).all(|i| key[i] & c.mask[i] == c.ip[i]);
        !self.ports[..self.n_ports as usize].contains(&port)
            && !self.excluded[..self.n_excluded as usize].iter().any(within)
            && (self.included_all == 1
                || self.included[..self.n_included as usize].iter().any(within))
    }
}

impl Cidr {
    /// The network this holds (IPv4 when v4-mapped).
    pub fn net(&self) -> IpNet {
        let bits: u32 = self
            .mask
            .iter()
            .map(|w| u32::from_be(*w).count_ones())
            .sum();
        match crate::maps::key_ip(self.ip) {
            std::net::IpAddr::V4(v4) => IpNet::V4(
                ipnet::Ipv4Net::new(v4, bits.saturating_sub(96) as u8).unwrap_or_default(),
            ),
            std::net::IpAddr::V6(v6) => {
                IpNet::V6(ipnet::Ipv6Net::new(v6, bits as u8).unwrap_or_default())
            }
        }
    }
}

fn joined<T: std::fmt::Display>(items: impl Iterator<Item = T>) -> String {
    items.map(|i| i.to_string()).collect::<Vec<_>>().join(" ")
}

impl OutboundScope {
    /// The pod's calls this captures, in `warden capture`'s words.
    pub fn describe(&self) -> String {
        let mut out = if self.included_all == 1 {
            "every call".to_string()
        } else if self.n_included == 0 {
            "no call (--include-outbound-cidrs is empty)".to_string()
        } else {
            format!(
                "calls to {}",
                joined(
                    self.included[..self.n_included as usize]
                        .iter()
                        .map(Cidr::net)
                )
            )
        };
        if self.n_ports > 0 {
            out.push_str(&format!(
                "; not to ports {}",
                joined(self.ports[..self.n_ports as usize].iter())
            ));
        }
        if self.n_excluded > 0 {
            out.push_str(&format!(
                "; not to {}",
                joined(
                    self.excluded[..self.n_excluded as usize]
                        .iter()
                        .map(Cidr::net)
                )
            ));
        }
        out
    }
}

impl InboundScope {
    /// The pod's ports this captures.
    pub fn describe(&self) -> String {
        let mut out = if self.all_ports == 1 {
            "every port".to_string()
        } else {
            format!(
                "ports {}",
                joined(self.ports[..self.n_ports as usize].iter())
            )
        };
        if self.n_excluded > 0 {
            out.push_str(&format!(
                " but {}",
                joined(self.excluded[..self.n_excluded as usize].iter())
            ));
        }
        out
    }
}

/// Both parts, for one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope {
    pub outbound: OutboundScope,
    pub inbound: InboundScope,
}

impl Default for Scope {
    /// `warden capture`'s defaults: every outbound call, every inbound port but Istio's own.
    fn default() -> Self {
        Scope::of(&CaptureConfig::default()).expect("Istio's default exclusions fit the lists")
    }
}

impl Scope {
    pub fn of(cfg: &CaptureConfig) -> Result<Scope, String> {
        Ok(Scope {
            outbound: OutboundScope::of(cfg)?,
            inbound: InboundScope::of(cfg)?,
        })
    }

    /// The selection flags (as `warden capture` takes them) for a proxy of `proxy_uid` with
    /// these listeners.
    pub fn from_args(
        selection: &SelectionArgs,
        proxy_uid: u32,
        outbound_port: u16,
        inbound_port: u16,
    ) -> Result<Scope, String> {
        let cfg = selection
            .apply(CaptureConfig {
                proxy_uid,
                proxy_gid: proxy_uid,
                outbound_port,
                inbound_port,
                ..CaptureConfig::default()
            })
            .map_err(|e| e.to_string())?;
        Scope::of(&cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(f: impl FnOnce(&mut CaptureConfig)) -> CaptureConfig {
        let mut c = CaptureConfig::default();
        f(&mut c);
        c
    }

    #[test]
    fn layouts_match_the_c_structs() {
        assert_eq!(std::mem::size_of::<Cidr>(), 32);
        assert_eq!(
            std::mem::size_of::<OutboundScope>(),
            4 + 48 + 4 + 512 + 8 + 512
        );
        assert_eq!(std::mem::offset_of!(OutboundScope, excluded), 56);
        assert_eq!(std::mem::size_of::<InboundScope>(), 8 + 48 + 4 + 48);
    }

    #[test]
    fn outbound_exclusions_and_inclusions_as_istio_iptables() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert!(OutboundScope::default().captures(ip("10.1.2.3"), 80));
        let s = OutboundScope::of(&cfg(|c| {
            c.exclude_outbound_ports = vec![5432];
            c.exclude_outbound_cidrs = vec!["10.96.0.0/12".parse().unwrap()];
            c.include_outbound_cidrs = CidrSelection::Only(vec!["10.0.0.0/8".parse().unwrap()]);
        }))
        .unwrap();
        assert!(s.captures(ip("10.1.2.3"), 80));
        assert!(!s.captures(ip("10.1.2.3"), 5432));
        assert!(!s.captures(ip("10.100.0.1"), 80)); // in 10.96.0.0/12
        assert!(s.captures(ip("10.112.0.1"), 80)); // just past it
        assert!(!s.captures(ip("192.168.1.1"), 80)); // not included
        let none = OutboundScope::of(&cfg(|c| {
            c.include_outbound_cidrs = CidrSelection::Only(vec![])
        }))
        .unwrap();
        assert!(!none.captures(ip("10.1.2.3"), 80));
        let all = OutboundScope::of(&cfg(|c| {
            c.include_outbound_cidrs = CidrSelection::Only(vec!["0.0.0.0/0".parse().unwrap()])
        }))
        .unwrap();
        assert!(all.captures(ip("192.168.1.1"), 80));
    }

    #[test]
    fn inbound_ports_keep_istios_exclusions() {
        let s = InboundScope::of(&cfg(|c| c.exclude_inbound_ports.push(9080))).unwrap();
        assert!(s.captures(8080));
        for port in [9080, 15090, 15021, 15020, 15008, 15001, 15006] {
            assert!(!s.captures(port), "{port}");
        }
        let only =
            InboundScope::of(&cfg(|c| c.inbound_ports = PortSelection::Only(vec![8080]))).unwrap();
        assert!(only.captures(8080) && !only.captures(8078));
        let none =
            InboundScope::of(&cfg(|c| c.inbound_ports = PortSelection::Only(vec![]))).unwrap();
        assert!(!none.captures(8080));
    }

    #[test]
    fn descriptions_name_the_selections() {
        let s = Scope::of(&cfg(|c| {
            c.exclude_outbound_ports = vec![5432, 9078];
            c.exclude_outbound_cidrs = vec!["10.96.0.0/12".parse().unwrap()];
            c.include_outbound_cidrs = CidrSelection::Only(vec![
                "10.0.0.0/8".parse().unwrap(),
                "fd00::/64".parse().unwrap(),
            ]);
            c.exclude_inbound_ports = vec![9080];
        }))
        .unwrap();
        assert_eq!(
            s.outbound.describe(),
            "calls to 10.0.0.0/8 fd00::/64; not to ports 5432 9078; not to 10.96.0.0/12"
        );
        assert!(
            s.inbound.describe().starts_with("every port but ")
                && s.inbound.describe().contains(" 9080"),
            "{}",
            s.inbound.describe()
        );
        assert_eq!(OutboundScope::default().describe(), "every call");
    }

    #[test]
    fn longer_lists_are_refused_not_cut() {
        let err =
            OutboundScope::of(&cfg(|c| c.exclude_outbound_ports = (1..=30).collect())).unwrap_err();
        assert!(
            err.contains("at most 24 --exclude-outbound-ports, 30 given"),
            "{err}"
        );
    }
}
