//! `networking.istio.io` ServiceEntry: the upstream clusters.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceEntry {
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Virtual IPs (or CIDRs) a sidecar's outbound listener recognises as this service.
    #[serde(default)]
    pub addresses: Vec<String>,
    #[serde(default)]
    pub ports: Vec<ServicePort>,
    /// STATIC | DNS (NONE is treated as an error: warden needs addresses).
    #[serde(default)]
    pub resolution: Option<String>,
    #[serde(default)]
    pub location: Option<String>,
    #[serde(default)]
    pub endpoints: Vec<WorkloadEntry>,
    /// Endpoints are the WorkloadEntries (and Pods) of the namespace with these labels.
    #[serde(default)]
    pub workload_selector: Option<crate::kinds::sidecar::SidecarSelector>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    pub number: u16,
    #[serde(default)]
    pub protocol: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub target_port: Option<u16>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadEntry {
    pub address: String,
    /// Port name -> endpoint port.
    #[serde(default)]
    pub ports: BTreeMap<String, u16>,
    #[serde(default)]
    pub weight: Option<u32>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    // Informational for routing: identity and topology.
    #[serde(default)]
    pub service_account: Option<String>,
    #[serde(default)]
    pub network: Option<String>,
    #[serde(default)]
    pub locality: Option<String>,
}

/// How a ServiceEntry's endpoints are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Resolution {
    /// Endpoints are IP addresses given in `endpoints`.
    Static,
    /// Endpoint addresses (or the hosts themselves, without endpoints) are resolved by DNS
    /// (`DNS`, `DNS_ROUND_ROBIN`).
    Dns,
    /// Istio's default: no endpoints; a connection goes to its original destination (which
    /// only a sidecar's captured connections have).
    None,
}

impl ServiceEntry {
    /// The resolution (unset is Istio's `NONE`), or `None` for a value validation rejects.
    pub fn resolution_kind(&self) -> Option<Resolution> {
        match self.resolution.as_deref() {
            None | Some("NONE") => Some(Resolution::None),
            Some("STATIC") => Some(Resolution::Static),
            Some("DNS") | Some("DNS_ROUND_ROBIN") => Some(Resolution::Dns),
            _ => None,
        }
    }

    /// The port a destination selects: `number` if given, else the only port.
    pub fn port(&self, number: Option<u16>) -> Option<&ServicePort> {
        match number {
            Some(n) => self.ports.iter().find(|p| p.number == n),
            None if self.ports.len() == 1 => self.ports.first(),
            None => None,
        }
    }
}

impl WorkloadEntry {
    /// The port to connect to on this endpoint for `port`: the endpoint's own mapping for the
    /// port's name, else the port's `targetPort`, else its number (Istio's rule).
    pub fn port_for(&self, port: &ServicePort) -> u16 {
        port.name
            .as_deref()
            .and_then(|name| self.ports.get(name).copied())
            .or(port.target_port)
            .unwrap_or(port.number)
    }
}

impl ServicePort {
    /// The protocol spoken to the upstream, `None` when unset (the route decides: HTTP routes
    /// speak HTTP/1.1, TCP routes copy bytes). Invalid values are rejected by validation.
    pub fn app_protocol(&self) -> Option<crate::kinds::gateway::ListenerProtocol> {
        use crate::kinds::gateway::ListenerProtocol;
        match self.protocol.as_deref()?.to_ascii_uppercase().as_str() {
            "HTTP" => Some(ListenerProtocol::Http),
            "HTTP2" | "GRPC" => Some(ListenerProtocol::Http2),
            "TCP" => Some(ListenerProtocol::Tcp),
            _ => None,
        }
    }
}
