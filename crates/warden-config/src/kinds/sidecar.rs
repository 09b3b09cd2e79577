//! `networking.istio.io` Sidecar: which workload it configures and its outbound traffic policy.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Sidecar {
    #[serde(default)]
    pub workload_selector: Option<SidecarSelector>,
    #[serde(default)]
    pub outbound_traffic_policy: Option<OutboundTrafficPolicy>,
    /// Kept raw: a Sidecar that applies to this proxy and sets them is rejected (they would
    /// change which services it can reach or how inbound ports are served).
    #[serde(default)]
    pub egress: Option<serde_json::Value>,
    #[serde(default)]
    pub ingress: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct SidecarSelector {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// `outboundTrafficPolicy` of a Sidecar or of the mesh config.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct OutboundTrafficPolicy {
    /// ALLOW_ANY (Istio's default) | REGISTRY_ONLY.
    #[serde(default)]
    pub mode: Option<String>,
}

/// Where an unknown destination goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub enum OutboundMode {
    /// Passed through to the original destination (Envoy's PassthroughCluster).
    #[default]
    AllowAny,
    /// Refused: 502 for HTTP, closed for TCP (Envoy's BlackHoleCluster).
    RegistryOnly,
}

impl OutboundMode {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "ALLOW_ANY" => Ok(OutboundMode::AllowAny),
            "REGISTRY_ONLY" => Ok(OutboundMode::RegistryOnly),
            other => Err(format!(
                "unknown outboundTrafficPolicy mode {other:?} (ALLOW_ANY or REGISTRY_ONLY)"
            )),
        }
    }
}
