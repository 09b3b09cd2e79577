//! `networking.istio.io` DestinationRule: load balancing and connection pool limits.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DestinationRule {
    pub host: String,
    #[serde(default)]
    pub traffic_policy: Option<TrafficPolicy>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TrafficPolicy {
    #[serde(default)]
    pub load_balancer: Option<LoadBalancer>,
    #[serde(default)]
    pub connection_pool: Option<ConnectionPool>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancer {
    /// ROUND_ROBIN | LEAST_REQUEST | RANDOM | PASSTHROUGH(rejected)
    #[serde(default)]
    pub simple: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionPool {
    #[serde(default)]
    pub tcp: Option<TcpSettings>,
    #[serde(default)]
    pub http: Option<HttpSettings>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TcpSettings {
    #[serde(default)]
    pub max_connections: Option<u32>,
    #[serde(default)]
    pub connect_timeout: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpSettings {
    #[serde(default)]
    pub http1_max_pending_requests: Option<u32>,
    #[serde(default)]
    pub http2_max_requests: Option<u32>,
    #[serde(default)]
    pub max_requests_per_connection: Option<u32>,
    #[serde(default)]
    pub idle_timeout: Option<String>,
    /// DEFAULT | DO_NOT_UPGRADE | UPGRADE (UPGRADE = speak HTTP/2 to the upstream).
    #[serde(default)]
    pub h2_upgrade_policy: Option<String>,
}
