//! Where the rate limit service is: the global filter's `envoy_grpc.cluster_name` resolved
//! through the same registry routes use, before DNS.
//!
//! The name is an Istio cluster `outbound|PORT|SUBSET|HOST`, the name of a static cluster a
//! CLUSTER patch ADDs (`rate_limit_cluster` in older Istio docs), or `HOST:PORT`. A host the
//! registry knows (ServiceEntry, WorkloadEntry, Kubernetes Service) resolves to its first
//! endpoint on that port; an IP is used as is; any other host is left to DNS at connect time,
//! which is what Envoy's STRICT_DNS cluster or Istio's DNS-resolved ServiceEntry does.

use warden_config::kinds::service_entry::ServiceEntry;
use warden_config::{ConfigSet, Doc};
use warden_local_ratelimit::envoy::cluster_config::StaticCluster;
use warden_local_ratelimit::envoy::global_config::EnvoyGrpc;
use warden_local_ratelimit::envoy::patches::Patched;

/// A resolved RLS reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlsTarget {
    /// `cluster_name` as written.
    pub reference: String,
    /// `host:port` the proxy connects to.
    pub address: String,
    /// How it was found, for `warden check`: `ServiceEntry ns/name`, `DNS`, ...
    pub via: String,
}

/// Resolve `grpc.cluster_name` against the registry and the CLUSTER patches in scope.
pub fn resolve(
    set: &ConfigSet,
    grpc: &EnvoyGrpc,
    clusters: &[&Patched<StaticCluster>],
) -> Result<RlsTarget, String> {
    let reference = grpc.cluster_name.clone();
    let target = |(address, via): (String, String)| RlsTarget {
        reference: reference.clone(),
        address,
        via,
    };
    if let Some((host, port)) = grpc.istio_host_port() {
        return match registry_address(set, host, port)? {
            Some(found) => Ok(target(found)),
            None => Ok(target((
                join(host, port),
                format!("DNS: no ServiceEntry or Service for {host} in the registry"),
            ))),
        };
    }
    if let Some(c) = clusters.iter().find(|c| c.config.name == reference) {
        let Some(&(host, port)) = c.config.addresses().first() else {
            return Err(format!("cluster {reference:?} has no endpoints"));
        };
        let of = format!("{} {}", c.origin.filter, c.origin.field);
        return Ok(target(match registry_address(set, host, port)? {
            Some((address, via)) => (address, format!("cluster of {of}, {via}")),
            None if host.parse::<std::net::IpAddr>().is_ok() => {
                (join(host, port), format!("cluster of {of}"))
            }
            None => (
                join(host, port),
                format!("cluster of {of}, DNS: {host} is not in the registry"),
            ),
        }));
    }
    if let Some((host, port)) = reference
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
    {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        return Ok(target(match registry_address(set, host, port)? {
            Some(found) => found,
            None => (join(host, port), "as written".into()),
        }));
    }
    let known: Vec<&str> = clusters.iter().map(|c| c.config.name.as_str()).collect();
    Err(format!(
        "cluster {reference:?} is neither `outbound|PORT||HOST`, `HOST:PORT` nor a cluster a \
         CLUSTER patch ADDs ({})",
        if known.is_empty() {
            "there is none".to_string()
        } else {
            format!("there are: {}", known.join(", "))
        }
    ))
}

fn join(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The first endpoint of registry service `host` on service port `port`, and what it came
/// from; `None` when the registry has no such host. A host it has without that port is an error.
pub(crate) fn registry_address(
    set: &ConfigSet,
    host: &str,
    port: u16,
) -> Result<Option<(String, String)>, String> {
    let Some(se) = set.service_entry_for_host(host) else {
        return Ok(None);
    };
    let what = describe(se);
    let Some(svc_port) = se.spec.ports.iter().find(|p| p.number == port) else {
        let ports: Vec<String> = se.spec.ports.iter().map(|p| p.number.to_string()).collect();
        return Err(format!(
            "{what} has no port {port} (ports: {})",
            ports.join(", ")
        ));
    };
    if let Some(ep) = se.spec.endpoints.first() {
        let to = ep.port_for(svc_port);
        let address = match ep.address.parse::<std::net::IpAddr>() {
            Ok(ip) => std::net::SocketAddr::new(ip, to).to_string(),
            Err(_) => join(&ep.address, to),
        };
        let more = se.spec.endpoints.len() - 1;
        let note = if more > 0 {
            format!(" (first of {} endpoints)", more + 1)
        } else {
            String::new()
        };
        return Ok(Some((address, format!("{what}{note}"))));
    }
    let resolution = se.spec.resolution.as_deref().unwrap_or("STATIC");
    if resolution == "DNS" {
        let to = svc_port.target_port.unwrap_or(svc_port.number);
        return Ok(Some((join(host, to), format!("{what}, DNS"))));
    }
    Err(format!(
        "{what} has no endpoints (resolution {resolution}); the rate limit service would be \
         unreachable"
    ))
}

fn describe(se: &Doc<ServiceEntry>) -> String {
    format!(
        "{} {}/{}",
        se.kind,
        se.metadata.namespace_or_default(),
        se.metadata.name
    )
}
