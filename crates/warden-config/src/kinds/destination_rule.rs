//! `networking.istio.io` DestinationRule: load balancing and connection pool limits.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DestinationRule {
    pub host: String,
    #[serde(default)]
    pub traffic_policy: Option<TrafficPolicy>,
    /// Named groups of the host's endpoints, by labels, each with its own policy.
    #[serde(default)]
    pub subsets: Vec<Subset>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Subset {
    pub name: String,
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    /// Overrides the rule's `trafficPolicy` field by field.
    #[serde(default)]
    pub traffic_policy: Option<TrafficPolicy>,
}

impl DestinationRule {
    pub fn subset(&self, name: &str) -> Option<&Subset> {
        self.subsets.iter().find(|s| s.name == name)
    }

    /// The policy of `subset` (or of the whole host): the subset's fields where it sets them,
    /// else the rule's, as Istio merges them.
    pub fn policy_for(&self, subset: Option<&Subset>) -> Option<TrafficPolicy> {
        let top = self.traffic_policy.as_ref();
        let sub = subset.and_then(|s| s.traffic_policy.as_ref());
        if top.is_none() && sub.is_none() {
            return None;
        }
        Some(TrafficPolicy {
            load_balancer: sub
                .and_then(|p| p.load_balancer.clone())
                .or_else(|| top.and_then(|p| p.load_balancer.clone())),
            connection_pool: sub
                .and_then(|p| p.connection_pool.clone())
                .or_else(|| top.and_then(|p| p.connection_pool.clone())),
            outlier_detection: sub
                .and_then(|p| p.outlier_detection.clone())
                .or_else(|| top.and_then(|p| p.outlier_detection.clone())),
            tls: sub
                .and_then(|p| p.tls.clone())
                .or_else(|| top.and_then(|p| p.tls.clone())),
            port_level_settings: sub
                .map(|p| p.port_level_settings.clone())
                .filter(|v| !v.is_empty())
                .or_else(|| top.map(|p| p.port_level_settings.clone()))
                .unwrap_or_default(),
        })
    }
}

impl TrafficPolicy {
    /// The TLS settings for connections to `port`: its `portLevelSettings` entry's, else the
    /// policy's.
    pub fn tls_for_port(&self, port: u16) -> Option<&ClientTls> {
        self.port_level_settings
            .iter()
            .find(|p| p.port.as_ref().is_some_and(|s| s.number == Some(port)))
            .and_then(|p| p.tls.as_ref())
            .or(self.tls.as_ref())
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TrafficPolicy {
    #[serde(default)]
    pub load_balancer: Option<LoadBalancer>,
    #[serde(default)]
    pub connection_pool: Option<ConnectionPool>,
    #[serde(default)]
    pub outlier_detection: Option<OutlierDetection>,
    /// TLS to the upstream.
    #[serde(default)]
    pub tls: Option<ClientTls>,
    /// Per-port settings; warden reads their `tls` (the other fields are warned about).
    #[serde(default)]
    pub port_level_settings: Vec<PortTrafficPolicy>,
}

/// `outlierDetection`: Envoy's passive health checking, endpoints ejected after consecutive
/// errors. Unset counts follow Envoy (5 consecutive 5xx) as Istio leaves them.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OutlierDetection {
    #[serde(default, rename = "consecutive5xxErrors")]
    pub consecutive_5xx_errors: Option<u32>,
    #[serde(default)]
    pub consecutive_gateway_errors: Option<u32>,
    /// Deprecated: gateway errors.
    #[serde(default)]
    pub consecutive_errors: Option<u32>,
    /// Rejected: warden does not split local origin errors from upstream ones.
    #[serde(default)]
    pub split_external_local_origin_errors: Option<bool>,
    #[serde(default)]
    pub consecutive_local_origin_failures: Option<u32>,
    #[serde(default)]
    pub interval: Option<String>,
    #[serde(default)]
    pub base_ejection_time: Option<String>,
    #[serde(default)]
    pub max_ejection_percent: Option<u32>,
    #[serde(default)]
    pub min_health_percent: Option<u32>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PortTrafficPolicy {
    #[serde(default)]
    pub port: Option<PortNumber>,
    #[serde(default)]
    pub tls: Option<ClientTls>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PortNumber {
    #[serde(default)]
    pub number: Option<u16>,
}

/// Istio's ClientTLSSettings.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClientTls {
    /// DISABLE | SIMPLE | MUTUAL | ISTIO_MUTUAL.
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub client_certificate: Option<String>,
    #[serde(default)]
    pub private_key: Option<String>,
    #[serde(default)]
    pub ca_certificates: Option<String>,
    /// A folder of `--credentials-dir` (tls.crt, tls.key, ca.crt).
    #[serde(default)]
    pub credential_name: Option<String>,
    #[serde(default)]
    pub subject_alt_names: Vec<String>,
    #[serde(default)]
    pub sni: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: Option<bool>,
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
