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

/// Load balancing policy of `trafficPolicy.loadBalancer.simple`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub enum LbPolicy {
    RoundRobin,
    /// `LEAST_REQUEST` (also the deprecated `LEAST_CONN`); Istio's default when unset or
    /// `UNSPECIFIED`.
    #[default]
    LeastRequest,
    Random,
}

impl LbPolicy {
    /// Parse a `simple` value; `None` for values validation rejects.
    pub fn parse(simple: &str) -> Option<Self> {
        match simple {
            "ROUND_ROBIN" => Some(LbPolicy::RoundRobin),
            "LEAST_REQUEST" | "LEAST_CONN" | "UNSPECIFIED" => Some(LbPolicy::LeastRequest),
            "RANDOM" => Some(LbPolicy::Random),
            _ => None,
        }
    }
}

impl DestinationRule {
    /// The configured policy (least request, Istio's default, when unset).
    pub fn lb_policy(&self) -> LbPolicy {
        self.traffic_policy
            .as_ref()
            .and_then(|t| t.load_balancer.as_ref())
            .and_then(|lb| lb.simple.as_deref())
            .and_then(LbPolicy::parse)
            .unwrap_or_default()
    }
}
