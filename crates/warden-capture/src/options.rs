//! The choices one capture install is built from: the value types `--inbound-ports` and the
//! other list flags parse into, and [`CaptureConfig`], what [`crate::capture_rules`] reads.

use ipnet::IpNet;
use std::net::IpAddr;
use std::str::FromStr;

/// Istio's default `--exclude-inbound-ports`: Envoy's Prometheus port (15090), its health port
/// (15021) and the agent's merged metrics (15020). Always excluded, whatever the flag says,
/// because probes and scrapes of those must not be captured.
pub const ISTIO_EXCLUDED_INBOUND_PORTS: [u16; 3] = [15090, 15021, 15020];

/// The HBONE tunnel port: istio-iptables returns it first inbound and never redirects it to
/// itself on loopback.
pub const TUNNEL_PORT: u16 = 15008;

/// Which inbound ports are captured: `*` (all but the exclusions), or only those listed; an
/// empty list captures nothing inbound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortSelection {
    All,
    Only(Vec<u16>),
}

impl PortSelection {
    pub fn is_none(&self) -> bool {
        matches!(self, PortSelection::Only(ports) if ports.is_empty())
    }
}

impl FromStr for PortSelection {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim() == "*" {
            return Ok(PortSelection::All);
        }
        Ok(PortSelection::Only(s.parse::<PortList>()?.0))
    }
}

/// A comma-separated port list; `""` is the empty list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortList(pub Vec<u16>);

impl FromStr for PortList {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        items(s)
            .map(parse_port)
            .collect::<Result<_, _>>()
            .map(PortList)
    }
}

/// Which outbound destinations are captured: `*` (all but the exclusions), or only these
/// ranges; an empty list captures nothing outbound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CidrSelection {
    All,
    Only(Vec<IpNet>),
}

impl FromStr for CidrSelection {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim() == "*" {
            return Ok(CidrSelection::All);
        }
        Ok(CidrSelection::Only(s.parse::<CidrList>()?.0))
    }
}

/// A comma-separated list of CIDRs (a bare address is a /32 or /128); `""` is the empty list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CidrList(pub Vec<IpNet>);

impl FromStr for CidrList {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        items(s)
            .map(parse_cidr)
            .collect::<Result<_, _>>()
            .map(CidrList)
    }
}

fn items(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').map(str::trim).filter(|item| !item.is_empty())
}

fn parse_port(s: &str) -> Result<u16, String> {
    match s.parse::<u16>() {
        Ok(port) if port != 0 => Ok(port),
        _ => Err(format!("`{s}` is not a port (1-65535)")),
    }
}

fn parse_cidr(s: &str) -> Result<IpNet, String> {
    let net = IpNet::from_str(s)
        .or_else(|_| IpAddr::from_str(s).map(IpNet::from))
        .map_err(|_| format!("`{s}` is not a CIDR (e.g. 10.0.0.0/8) or an address"))?;
    // iptables stores the network address; keeping it that way lets an installed rule compare
    // equal to the one we would install.
    Ok(net.trunc())
}

/// A validated capture install: the proxy's identity and ports, and what is captured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureConfig {
    pub proxy_uid: u32,
    pub proxy_gid: u32,
    pub outbound_port: u16,
    pub inbound_port: u16,
    pub inbound_ports: PortSelection,
    /// As given; [`crate::rules::inbound_exclusions`] adds the always-excluded ports.
    pub exclude_inbound_ports: Vec<u16>,
    pub exclude_outbound_ports: Vec<u16>,
    pub exclude_outbound_cidrs: Vec<IpNet>,
    pub include_outbound_cidrs: CidrSelection,
    /// Also program ip6tables.
    pub ipv6: bool,
}

impl Default for CaptureConfig {
    /// `istio-iptables -p 15001 -z 15006 -u 1337 -m REDIRECT -i '*' -b '*' -d 15090,15021,15020`.
    fn default() -> Self {
        CaptureConfig {
            proxy_uid: 1337,
            proxy_gid: 1337,
            outbound_port: 15001,
            inbound_port: 15006,
            inbound_ports: PortSelection::All,
            exclude_inbound_ports: ISTIO_EXCLUDED_INBOUND_PORTS.to_vec(),
            exclude_outbound_ports: Vec::new(),
            exclude_outbound_cidrs: Vec::new(),
            include_outbound_cidrs: CidrSelection::All,
            ipv6: false,
        }
    }
}

impl CaptureConfig {
    /// Settings that would make the proxy capture its own traffic.
    pub fn validate(&self) -> Result<(), String> {
        if self.outbound_port == self.inbound_port {
            return Err(format!(
                "--outbound-port and --inbound-port are both {}; the proxy needs two listeners",
                self.outbound_port
            ));
        }
        if let PortSelection::Only(ports) = &self.inbound_ports {
            if let Some(port) = ports
                .iter()
                .find(|p| [self.outbound_port, self.inbound_port].contains(p))
            {
                return Err(format!(
                    "--inbound-ports lists {port}, one of the proxy's own ports: redirecting it would loop"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_selection_parses_star_list_and_empty() {
        assert_eq!("*".parse::<PortSelection>(), Ok(PortSelection::All));
        assert_eq!(
            "80, 8080".parse::<PortSelection>(),
            Ok(PortSelection::Only(vec![80, 8080]))
        );
        assert!("".parse::<PortSelection>().unwrap().is_none());
        assert!("0".parse::<PortList>().is_err());
        assert!("http".parse::<PortList>().is_err());
    }

    #[test]
    fn cidrs_are_normalised_to_the_network_iptables_stores() {
        let list: CidrList = "10.1.2.3/8,192.168.0.9,fd00::1/64".parse().unwrap();
        let shown: Vec<String> = list.0.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["10.0.0.0/8", "192.168.0.9/32", "fd00::/64"]);
        assert!("*".parse::<CidrList>().is_err());
        assert_eq!("*".parse::<CidrSelection>(), Ok(CidrSelection::All));
    }

    #[test]
    fn inbound_list_with_a_proxy_port_is_refused() {
        let cfg = CaptureConfig {
            inbound_ports: PortSelection::Only(vec![8080, 15006]),
            ..CaptureConfig::default()
        };
        assert!(cfg.validate().unwrap_err().contains("15006"));
    }
}
