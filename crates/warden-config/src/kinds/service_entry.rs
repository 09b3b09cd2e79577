//! `networking.istio.io` ServiceEntry: the upstream clusters.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceEntry {
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default)]
    pub ports: Vec<ServicePort>,
    /// STATIC | DNS (NONE is treated as an error: warden needs addresses).
    #[serde(default)]
    pub resolution: Option<String>,
    #[serde(default)]
    pub location: Option<String>,
    #[serde(default)]
    pub endpoints: Vec<WorkloadEntry>,
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
}
