//! `networking.istio.io` EnvoyFilter: only the rate limit patches of the seeds are understood.
//!
//! `patch.value` is free-form protobuf JSON (`@type` + fields, or a TypedStruct with `type_url`
//! and `value`), so it is kept as a JSON value here and interpreted, with errors naming the
//! field path, by `warden-local-ratelimit::envoy_filter`. Match fields accept Istio's camelCase
//! and protobuf's snake_case spellings.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EnvoyFilter {
    #[serde(default, alias = "workload_selector")]
    pub workload_selector: Option<WorkloadSelector>,
    #[serde(default)]
    pub priority: i32,
    #[serde(default, alias = "config_patches")]
    pub config_patches: Vec<ConfigPatch>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSelector {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigPatch {
    /// `HTTP_FILTER`, `NETWORK_FILTER`, `VIRTUAL_HOST`, `HTTP_ROUTE`, `CLUSTER`, ...
    #[serde(alias = "apply_to")]
    pub apply_to: String,
    #[serde(default, rename = "match")]
    pub matches: Option<PatchMatch>,
    pub patch: Patch,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PatchMatch {
    /// `ANY`, `SIDECAR_INBOUND`, `SIDECAR_OUTBOUND`, `GATEWAY`.
    #[serde(default)]
    pub context: Option<String>,
    #[serde(default)]
    pub proxy: Option<serde_json::Value>,
    #[serde(default)]
    pub listener: Option<ListenerMatch>,
    #[serde(default, alias = "route_configuration")]
    pub route_configuration: Option<RouteConfigurationMatch>,
    #[serde(default)]
    pub cluster: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ListenerMatch {
    #[serde(default, alias = "port_number")]
    pub port_number: Option<u32>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, alias = "filter_chain")]
    pub filter_chain: Option<FilterChainMatch>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FilterChainMatch {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub sni: Option<String>,
    #[serde(default, alias = "transport_protocol")]
    pub transport_protocol: Option<String>,
    #[serde(default, alias = "destination_port")]
    pub destination_port: Option<u32>,
    #[serde(default)]
    pub filter: Option<FilterMatch>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FilterMatch {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, alias = "sub_filter")]
    pub sub_filter: Option<SubFilterMatch>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SubFilterMatch {
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteConfigurationMatch {
    #[serde(default, alias = "port_number")]
    pub port_number: Option<u32>,
    #[serde(default, alias = "port_name")]
    pub port_name: Option<String>,
    #[serde(default)]
    pub gateway: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub vhost: Option<VirtualHostMatch>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VirtualHostMatch {
    /// Empty or absent matches every virtual host.
    #[serde(default)]
    pub name: Option<String>,
    /// One of the virtual host's domains; empty or absent matches every virtual host.
    #[serde(default, alias = "domain_name")]
    pub domain_name: Option<String>,
    #[serde(default)]
    pub route: Option<RouteMatch>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteMatch {
    #[serde(default)]
    pub name: Option<String>,
    /// `ANY`, `ROUTE`, `REDIRECT`, `DIRECT_RESPONSE`.
    #[serde(default)]
    pub action: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Patch {
    /// `MERGE`, `ADD`, `REMOVE`, `INSERT_BEFORE`, `INSERT_AFTER`, `INSERT_FIRST`, `REPLACE`.
    pub operation: String,
    /// Free-form protobuf JSON; interpreted by the crate that implements the patched filter.
    #[serde(default)]
    pub value: Option<serde_json::Value>,
    #[serde(default, alias = "filter_class")]
    pub filter_class: Option<String>,
}
