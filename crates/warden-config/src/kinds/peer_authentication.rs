//! `security.istio.io` PeerAuthentication: whether a sidecar's inbound side requires mutual
//! TLS (STRICT), takes both TLS and plaintext on the same port (PERMISSIVE: the first bytes
//! tell) or plaintext only (DISABLE), for the workloads it selects and per port.

use crate::kinds::authorization_policy::WorkloadSelector;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PeerAuthentication {
    #[serde(default)]
    pub selector: Option<WorkloadSelector>,
    #[serde(default)]
    pub mtls: Option<MutualTls>,
    /// Keyed by the workload's (container) port number, as a string in YAML.
    #[serde(default)]
    pub port_level_mtls: BTreeMap<String, MutualTls>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct MutualTls {
    /// UNSET | DISABLE | PERMISSIVE | STRICT.
    #[serde(default)]
    pub mode: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub enum PeerMode {
    /// Inherit from the less specific policy (mesh default: PERMISSIVE).
    #[default]
    Unset,
    Disable,
    Permissive,
    Strict,
}

impl MutualTls {
    /// `None` for a value validation rejects.
    pub fn peer_mode(&self) -> Option<PeerMode> {
        match self.mode.as_deref().map(str::to_ascii_uppercase).as_deref() {
            None | Some("UNSET") => Some(PeerMode::Unset),
            Some("DISABLE") => Some(PeerMode::Disable),
            Some("PERMISSIVE") => Some(PeerMode::Permissive),
            Some("STRICT") => Some(PeerMode::Strict),
            _ => None,
        }
    }
}
