//! `envoy.config.cluster.v3.Cluster` as a CLUSTER patch ADDs it: the static cluster older
//! Istio docs define for the rate limit service (`rate_limit_cluster`), reduced to what warden
//! uses: its name and the addresses of `load_assignment`. The proxy resolves those addresses
//! through the registry, as it does `outbound|PORT||HOST` names.

use super::proto_json::{ProtoDuration, Uint};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct StaticCluster {
    pub name: String,
    /// `STATIC`, `STRICT_DNS`, `LOGICAL_DNS`: every one resolves the same way here.
    #[serde(default, rename = "type")]
    pub discovery: Option<String>,
    #[serde(default, alias = "connectTimeout")]
    pub connect_timeout: Option<ProtoDuration>,
    /// Only one connection per worker is made to the first endpoint, so the policy is moot.
    #[serde(default, alias = "lbPolicy")]
    pub lb_policy: Option<String>,
    /// The RLS is always spoken to over HTTP/2.
    #[serde(default, alias = "http2ProtocolOptions")]
    pub http2_protocol_options: Option<serde_json::Value>,
    #[serde(alias = "loadAssignment")]
    pub load_assignment: LoadAssignment,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct LoadAssignment {
    #[serde(default, alias = "clusterName")]
    pub cluster_name: Option<String>,
    #[serde(default)]
    pub endpoints: Vec<LocalityEndpoints>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct LocalityEndpoints {
    #[serde(default, alias = "lbEndpoints")]
    pub lb_endpoints: Vec<LbEndpoint>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct LbEndpoint {
    pub endpoint: EndpointAddress,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct EndpointAddress {
    pub address: Address,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Address {
    #[serde(alias = "socketAddress")]
    pub socket_address: SocketAddress,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct SocketAddress {
    pub address: String,
    #[serde(alias = "portValue")]
    pub port_value: Uint,
}

impl StaticCluster {
    /// `(host or IP, port)` of every endpoint, in order.
    pub fn addresses(&self) -> Vec<(&str, u16)> {
        self.load_assignment
            .endpoints
            .iter()
            .flat_map(|l| &l.lb_endpoints)
            .map(|e| {
                let s = &e.endpoint.address.socket_address;
                // `check` made sure every port fits.
                (
                    s.address.as_str(),
                    u16::try_from(s.port_value.0).unwrap_or(0),
                )
            })
            .collect()
    }

    /// Envoy's validation of what warden reads; errors are `(field path, message)`.
    pub fn check(&self) -> Result<(), (String, String)> {
        if self.name.is_empty() {
            return Err((".name".into(), "a cluster needs a name".into()));
        }
        if let Some(t) = self.discovery.as_deref() {
            if !matches!(t, "STATIC" | "STRICT_DNS" | "LOGICAL_DNS") {
                return Err((
                    ".type".into(),
                    format!(
                        "cluster type {t:?} is not supported (STATIC, STRICT_DNS, LOGICAL_DNS)"
                    ),
                ));
            }
        }
        let mut any = false;
        for (i, l) in self.load_assignment.endpoints.iter().enumerate() {
            for (j, e) in l.lb_endpoints.iter().enumerate() {
                any = true;
                let s = &e.endpoint.address.socket_address;
                let at = format!(
                    ".load_assignment.endpoints[{i}].lb_endpoints[{j}].endpoint.address.socket_address"
                );
                if s.address.is_empty() {
                    return Err((format!("{at}.address"), "address is empty".into()));
                }
                if s.port_value.0 == 0 || s.port_value.0 > u64::from(u16::MAX) {
                    return Err((
                        format!("{at}.port_value"),
                        format!("{} is not a port", s.port_value.0),
                    ));
                }
            }
        }
        if !any {
            return Err((
                ".load_assignment.endpoints".into(),
                "the cluster has no endpoints".into(),
            ));
        }
        Ok(())
    }
}
