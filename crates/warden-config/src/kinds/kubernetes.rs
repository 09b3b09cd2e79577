//! The Kubernetes objects a user can dump with `kubectl get svc,endpointslices,pods -o yaml`,
//! read as a service registry for mesh routing: only the fields that registry needs.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `v1` Service.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Service {
    #[serde(default)]
    pub spec: ServiceSpec,
    #[serde(default)]
    pub status: serde_json::Value,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// `None` (headless), an address, or unset.
    #[serde(default, rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    #[serde(default, rename = "clusterIPs")]
    pub cluster_ips: Vec<String>,
    #[serde(default)]
    pub ports: Vec<KubePort>,
    #[serde(default)]
    pub selector: BTreeMap<String, String>,
    /// ClusterIP | NodePort | LoadBalancer | ExternalName.
    #[serde(default, rename = "type")]
    pub service_type: Option<String>,
    #[serde(default)]
    pub external_name: Option<String>,
    // Bookkeeping kubectl prints; nothing the registry acts on.
    #[serde(default)]
    pub session_affinity: Option<String>,
    #[serde(default)]
    pub ip_families: Vec<String>,
    #[serde(default)]
    pub ip_family_policy: Option<String>,
    #[serde(default)]
    pub internal_traffic_policy: Option<String>,
    #[serde(default)]
    pub external_traffic_policy: Option<String>,
}

/// A Service port, or an EndpointSlice / Endpoints port (which have no `targetPort`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KubePort {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub port: u16,
    #[serde(default)]
    pub target_port: Option<IntOrString>,
    /// TCP | UDP | SCTP (TCP when unset).
    #[serde(default)]
    pub protocol: Option<String>,
    #[serde(default)]
    pub app_protocol: Option<String>,
    #[serde(default)]
    pub node_port: Option<u16>,
}

/// Kubernetes' `IntOrString` (a `targetPort` number or a container port name).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum IntOrString {
    Int(u16),
    String(String),
}

/// `discovery.k8s.io/v1` EndpointSlice (its fields sit at the top level, not under `spec`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSlice {
    #[serde(default)]
    pub address_type: Option<String>,
    #[serde(default)]
    pub endpoints: Vec<SliceEndpoint>,
    #[serde(default)]
    pub ports: Vec<KubePort>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SliceEndpoint {
    #[serde(default)]
    pub addresses: Vec<String>,
    #[serde(default)]
    pub conditions: EndpointConditions,
    #[serde(default)]
    pub target_ref: Option<ObjectRef>,
    #[serde(default)]
    pub node_name: Option<String>,
    #[serde(default)]
    pub zone: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointConditions {
    /// Unset means ready (the API's rule).
    #[serde(default)]
    pub ready: Option<bool>,
    #[serde(default)]
    pub serving: Option<bool>,
    #[serde(default)]
    pub terminating: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub uid: Option<String>,
    #[serde(default)]
    pub resource_version: Option<String>,
}

/// `v1` Endpoints (the older form of EndpointSlice; named after its Service).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Endpoints {
    #[serde(default)]
    pub subsets: Vec<EndpointSubset>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSubset {
    #[serde(default)]
    pub addresses: Vec<EndpointAddress>,
    /// Not ready: not routed to, as kube-proxy does.
    #[serde(default)]
    pub not_ready_addresses: Vec<EndpointAddress>,
    #[serde(default)]
    pub ports: Vec<KubePort>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointAddress {
    pub ip: String,
    #[serde(default)]
    pub target_ref: Option<ObjectRef>,
    #[serde(default)]
    pub node_name: Option<String>,
    #[serde(default)]
    pub hostname: Option<String>,
}

/// `v1` Pod: its labels (metadata), addresses and named container ports.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Pod {
    #[serde(default)]
    pub spec: PodSpec,
    #[serde(default)]
    pub status: PodStatus,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default)]
    pub containers: Vec<Container>,
    #[serde(default)]
    pub service_account_name: Option<String>,
    /// Everything else a Pod spec holds (volumes, node selection...) means nothing to routing.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub ports: Vec<ContainerPort>,
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPort {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub container_port: u16,
    #[serde(default)]
    pub protocol: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default, rename = "podIP")]
    pub pod_ip: Option<String>,
    #[serde(default, rename = "podIPs")]
    pub pod_ips: Vec<PodIp>,
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct PodIp {
    pub ip: String,
}

impl KubePort {
    /// TCP unless set otherwise; the mesh carries TCP only.
    pub fn is_tcp(&self) -> bool {
        self.protocol
            .as_deref()
            .is_none_or(|p| p.eq_ignore_ascii_case("TCP"))
    }

    /// The protocol Istio picks for this port: `appProtocol`, else the port name's prefix
    /// (`http`, `http-*`, `http2-*`, `grpc-*`, `tcp-*`...), else `None` (detected from the
    /// first bytes). The names are ServiceEntry protocol names (`HTTP`, `HTTP2`, `GRPC`, `TCP`,
    /// `HTTPS`, `TLS`...).
    pub fn istio_protocol(&self) -> Option<String> {
        let from = |text: &str| -> Option<String> {
            let lower = text.to_ascii_lowercase();
            let proto = match lower.as_str() {
                "http" => "HTTP",
                "http2" | "kubernetes.io/h2c" => "HTTP2",
                "grpc" | "grpc-web" => "GRPC",
                "tcp" | "mongo" | "mysql" | "redis" => "TCP",
                "https" => "HTTPS",
                "tls" => "TLS",
                _ => return None,
            };
            Some(proto.to_owned())
        };
        if let Some(p) = self.app_protocol.as_deref().and_then(from) {
            return Some(p);
        }
        let name = self.name.as_deref()?;
        let prefix = name.split('-').next().unwrap_or(name);
        from(prefix)
    }
}

impl Pod {
    /// Every address of the pod (`podIPs`, else `podIP`).
    pub fn ips(&self) -> Vec<&str> {
        if self.status.pod_ips.is_empty() {
            self.status.pod_ip.as_deref().into_iter().collect()
        } else {
            self.status.pod_ips.iter().map(|p| p.ip.as_str()).collect()
        }
    }

    /// The number of the container port named `name`.
    pub fn named_port(&self, name: &str) -> Option<u16> {
        self.spec
            .containers
            .iter()
            .flat_map(|c| &c.ports)
            .find(|p| p.name.as_deref() == Some(name))
            .map(|p| p.container_port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(name: Option<&str>, app: Option<&str>) -> KubePort {
        KubePort {
            name: name.map(Into::into),
            app_protocol: app.map(Into::into),
            port: 80,
            ..KubePort::default()
        }
    }

    #[test]
    fn protocol_as_istio_selects_it() {
        assert_eq!(
            port(Some("http"), None).istio_protocol().as_deref(),
            Some("HTTP")
        );
        assert_eq!(
            port(Some("http-web"), None).istio_protocol().as_deref(),
            Some("HTTP")
        );
        assert_eq!(
            port(Some("http2-x"), None).istio_protocol().as_deref(),
            Some("HTTP2")
        );
        assert_eq!(
            port(Some("grpc-api"), None).istio_protocol().as_deref(),
            Some("GRPC")
        );
        assert_eq!(
            port(Some("tcp-db"), None).istio_protocol().as_deref(),
            Some("TCP")
        );
        assert_eq!(port(Some("web"), None).istio_protocol(), None);
        assert_eq!(port(None, None).istio_protocol(), None);
        // appProtocol wins over the name.
        assert_eq!(
            port(Some("http"), Some("tcp")).istio_protocol().as_deref(),
            Some("TCP")
        );
        assert_eq!(
            port(Some("x"), Some("kubernetes.io/h2c"))
                .istio_protocol()
                .as_deref(),
            Some("HTTP2")
        );
    }
}
