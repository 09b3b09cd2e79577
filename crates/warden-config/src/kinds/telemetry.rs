//! Telemetry (telemetry.istio.io) as far as its `metrics` go: which of Istio's standard
//! metrics are reported (`overrides[].disabled`) and which labels they drop
//! (`tagOverrides` REMOVE), for client (a gateway, a sidecar's outbound side) or server
//! (a sidecar's inbound side) reporting. `tracing` (`telemetry_tracing`) and `accessLogging`
//! (`telemetry_access_logging`) are read by their own modules; only `selector` and `metrics`
//! are decoded here.

use crate::kinds::authorization_policy::WorkloadSelector;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Telemetry {
    #[serde(default)]
    pub selector: Option<WorkloadSelector>,
    #[serde(default)]
    pub metrics: Vec<Metrics>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Metrics {
    /// Empty: the default provider (`prometheus`), the only one warden has.
    #[serde(default)]
    pub providers: Vec<ProviderRef>,
    #[serde(default)]
    pub overrides: Vec<MetricsOverrides>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct ProviderRef {
    pub name: String,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MetricsOverrides {
    #[serde(default, rename = "match")]
    pub selector: Option<MetricSelector>,
    #[serde(default)]
    pub disabled: Option<bool>,
    #[serde(default)]
    pub tag_overrides: BTreeMap<String, TagOverride>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MetricSelector {
    /// Unset: every metric (`ALL_METRICS`).
    #[serde(default)]
    pub metric: Option<IstioMetric>,
    #[serde(default)]
    pub mode: Option<WorkloadMode>,
}

/// Istio's standard metrics, as the Telemetry API names them.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum IstioMetric {
    AllMetrics,
    RequestCount,
    RequestDuration,
    RequestSize,
    ResponseSize,
    TcpOpenedConnections,
    TcpClosedConnections,
    TcpSentBytes,
    TcpReceivedBytes,
    GrpcRequestMessages,
    GrpcResponseMessages,
}

/// Which reporting an override applies to.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WorkloadMode {
    #[default]
    ClientAndServer,
    Client,
    Server,
}

impl WorkloadMode {
    /// Whether an override of this mode applies to a proxy reporting as `client`.
    pub fn covers(self, client: bool) -> bool {
        match self {
            WorkloadMode::ClientAndServer => true,
            WorkloadMode::Client => client,
            WorkloadMode::Server => !client,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TagOverride {
    #[serde(default)]
    pub operation: Option<TagOperation>,
    /// UPSERT's CEL expression.
    #[serde(default)]
    pub value: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TagOperation {
    #[default]
    Upsert,
    Remove,
}
