//! Who is on each side of an edge, as Istio's metadata exchange tells Envoy: a workload's
//! labels from the registry (its Pod, else the WorkloadEntry or endpoint labels) found by
//! address or by SPIFFE identity; the proxy's own from its identity. Resolved once per
//! cluster or peer ([`crate::core::istio_metrics::Edge`]), never per request.

use crate::core::identity::ProxyIdentity;
use crate::core::istio_metrics::{Service, Workload, UNKNOWN};
use std::collections::BTreeMap;
use warden_config::document::Doc;
use warden_config::kinds::kubernetes::Pod;
use warden_config::mesh_registry::CLUSTER_DOMAIN;
use warden_config::ConfigSet;

/// Istio's default cluster id (`values.global.multiCluster.clusterName`).
pub const CLUSTER_ID: &str = "Kubernetes";
/// Istio's default trust domain.
pub const TRUST_DOMAIN: &str = "cluster.local";

/// What the registry knows of one workload instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instance<'a> {
    /// The pod's name, or a WorkloadEntry's.
    pub name: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub labels: Option<&'a BTreeMap<String, String>>,
    pub service_account: Option<&'a str>,
}

/// A Deployment's pod `reviews-v1-5b4c8d6f9-x7k2p` (its `pod-template-hash` label
/// `5b4c8d6f9`) is workload `reviews-v1`, as Istio names it from the owner chain; other
/// pods keep their name.
pub fn workload_name<'a>(pod: &'a str, labels: &BTreeMap<String, String>) -> &'a str {
    labels
        .get("pod-template-hash")
        .and_then(|hash| {
            let (owner, _) = pod.rsplit_once('-')?;
            owner.strip_suffix(hash.as_str())?.strip_suffix('-')
        })
        .unwrap_or(pod)
}

/// Istio's labels of an instance (`canonical_*` as the injector sets them: the
/// `service.istio.io/canonical-*` labels, else `app.kubernetes.io/*`, else `app`/`version`,
/// else the workload name and `latest`).
pub fn workload(instance: &Instance<'_>, trust_domain: &str) -> Workload {
    let empty = BTreeMap::new();
    let labels = instance.labels.unwrap_or(&empty);
    let get = |keys: &[&str]| keys.iter().find_map(|k| labels.get(*k)).cloned();
    let name = match instance.name {
        Some(n) => workload_name(n, labels).to_owned(),
        None => get(&["app"]).unwrap_or_else(|| UNKNOWN.to_owned()),
    };
    let namespace = instance.namespace.unwrap_or(UNKNOWN).to_owned();
    let principal = match (instance.namespace, instance.service_account) {
        (Some(ns), sa) => format!(
            "spiffe://{trust_domain}/ns/{ns}/sa/{}",
            sa.unwrap_or("default")
        ),
        (None, _) => UNKNOWN.to_owned(),
    };
    Workload {
        canonical_service: get(&[
            "service.istio.io/canonical-name",
            "app.kubernetes.io/name",
            "app",
        ])
        .unwrap_or_else(|| name.clone()),
        canonical_revision: get(&[
            "service.istio.io/canonical-revision",
            "app.kubernetes.io/version",
            "version",
        ])
        .unwrap_or_else(|| "latest".to_owned()),
        app: get(&["app"]).unwrap_or_else(|| UNKNOWN.to_owned()),
        version: get(&["version"]).unwrap_or_else(|| UNKNOWN.to_owned()),
        workload: name,
        namespace,
        principal,
        cluster: CLUSTER_ID.to_owned(),
    }
}

/// The trust domain of this proxy's mesh certificate, else Istio's default.
pub fn trust_domain(identity: &ProxyIdentity) -> &str {
    identity
        .mesh
        .as_ref()
        .map_or(TRUST_DOMAIN, |m| m.trust_domain.as_str())
}

fn pod_at<'a>(config: &'a ConfigSet, ip: &str) -> Option<&'a Doc<Pod>> {
    config.pods.iter().find(|p| p.spec.ips().contains(&ip))
}

fn pod_instance(pod: &Doc<Pod>) -> Instance<'_> {
    Instance {
        name: Some(&pod.metadata.name),
        namespace: Some(pod.metadata.namespace_or_default()),
        labels: Some(&pod.metadata.labels),
        service_account: pod.spec.spec.service_account_name.as_deref(),
    }
}

/// The workload at `ip`: its Pod, else a registry endpoint with that address.
pub fn at_address(config: &ConfigSet, ip: &str, trust_domain: &str) -> Option<Workload> {
    if let Some(pod) = pod_at(config, ip) {
        return Some(workload(&pod_instance(pod), trust_domain));
    }
    if let Some(we) = config
        .workload_entries
        .iter()
        .find(|w| w.spec.address == ip)
    {
        let mut labels = we.metadata.labels.clone();
        labels.extend(we.spec.labels.clone());
        return Some(workload(
            &Instance {
                name: Some(&we.metadata.name),
                namespace: Some(we.metadata.namespace_or_default()),
                labels: Some(&labels),
                service_account: we.spec.service_account.as_deref(),
            },
            trust_domain,
        ));
    }
    config.service_entries.iter().find_map(|se| {
        let ep = se.spec.endpoints.iter().find(|e| e.address == ip)?;
        Some(workload(
            &Instance {
                name: None,
                namespace: Some(se.metadata.namespace_or_default()),
                labels: Some(&ep.labels),
                service_account: ep.service_account.as_deref(),
            },
            trust_domain,
        ))
    })
}

/// This proxy: the registry's pod at one of its addresses, else its own namespace and labels.
pub fn own(identity: &ProxyIdentity, config: &ConfigSet) -> Workload {
    let td = trust_domain(identity);
    if let Some(w) = identity
        .pod_ips
        .iter()
        .find_map(|ip| at_address(config, &ip.to_string(), td))
    {
        return w;
    }
    workload(
        &Instance {
            name: None,
            namespace: Some(&identity.namespace),
            labels: Some(&identity.labels),
            service_account: identity.service_account.as_deref(),
        },
        td,
    )
}

/// The peer with SPIFFE principal `td/ns/NS/sa/SA` (as [`warden_tls::PeerIdentity`] gives
/// it): the registry's pods of that namespace and service account; `unknown` for what the
/// registry does not hold but the principal says.
pub fn of_principal(config: &ConfigSet, principal: &str) -> Workload {
    let mut parts = principal.split('/');
    let (td, ns, sa) = match (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) {
        (Some(td), Some("ns"), Some(ns), Some("sa"), Some(sa)) => (td, ns, sa),
        _ => return Workload::unknown(),
    };
    let pod = config.pods.iter().find(|p| {
        p.metadata.namespace_or_default() == ns
            && p.spec
                .spec
                .service_account_name
                .as_deref()
                .unwrap_or("default")
                == sa
    });
    match pod {
        Some(pod) => workload(&pod_instance(pod), td),
        None => Workload {
            namespace: ns.to_owned(),
            principal: format!("spiffe://{principal}"),
            ..Workload::unknown()
        },
    }
}

/// A service host's name and namespace: `name.ns.svc.cluster.local`, else the ServiceEntry
/// that declares it.
pub fn service(config: &ConfigSet, host: &str) -> Service {
    if let Some((name, ns)) = host
        .strip_suffix(CLUSTER_DOMAIN)
        .and_then(|h| h.strip_suffix('.'))
        .and_then(|h| h.split_once('.'))
    {
        return Service {
            host: host.to_owned(),
            name: name.to_owned(),
            namespace: ns.to_owned(),
        };
    }
    let namespace = config
        .service_entries
        .iter()
        .find(|se| se.spec.hosts.iter().any(|h| h == host))
        .map_or(UNKNOWN, |se| se.metadata.namespace_or_default());
    Service {
        host: host.to_owned(),
        name: host.to_owned(),
        namespace: namespace.to_owned(),
    }
}

/// The host of an Envoy-style cluster name `outbound|port|subset|host`.
pub fn cluster_host(cluster: &str) -> Option<&str> {
    let mut parts = cluster.split('|');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("outbound" | "inbound"), Some(_), Some(_), Some(host)) if !host.is_empty() => {
            Some(host)
        }
        _ => None,
    }
}

/// The service this pod serves on `port`: a registry service with one of `pod_ips` as an
/// endpoint and `port` as its service or target port.
pub fn own_service(config: &ConfigSet, pod_ips: &[std::net::IpAddr], port: u16) -> Service {
    let ips: Vec<String> = pod_ips.iter().map(|ip| ip.to_string()).collect();
    let found = config.service_entries.iter().find(|se| {
        se.spec.endpoints.iter().any(|e| {
            ips.contains(&e.address)
                && (e.ports.values().any(|p| *p == port)
                    || se
                        .spec
                        .ports
                        .iter()
                        .any(|p| p.number == port || p.target_port == Some(port)))
        })
    });
    match found.and_then(|se| se.spec.hosts.first()) {
        Some(host) => service(config, host),
        None => Service::unknown(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn workload_names_follow_the_owner_chain() {
        let hashed = labels(&[("pod-template-hash", "5b4c8d6f9")]);
        let cases = [
            ("reviews-v1-5b4c8d6f9-x7k2p", &hashed, "reviews-v1"),
            ("reviews-v1-other-x7k2p", &hashed, "reviews-v1-other-x7k2p"),
            ("httpbin-1", &BTreeMap::new(), "httpbin-1"),
        ];
        for (pod, l, want) in cases {
            assert_eq!(workload_name(pod, l), want, "{pod}");
        }
    }

    #[test]
    fn canonical_labels_fall_back_as_istio_does() {
        let l = labels(&[("app", "reviews"), ("version", "v2")]);
        let w = workload(
            &Instance {
                name: Some("reviews-v2"),
                namespace: Some("bookinfo"),
                labels: Some(&l),
                service_account: Some("bookinfo-reviews"),
            },
            "cluster.local",
        );
        assert_eq!(w.workload, "reviews-v2");
        assert_eq!(w.canonical_service, "reviews");
        assert_eq!(w.canonical_revision, "v2");
        assert_eq!(w.app, "reviews");
        assert_eq!(
            w.principal,
            "spiffe://cluster.local/ns/bookinfo/sa/bookinfo-reviews"
        );
        let bare = workload(
            &Instance {
                name: Some("x"),
                namespace: Some("n"),
                ..Instance::default()
            },
            "td",
        );
        assert_eq!(
            (
                bare.canonical_service.as_str(),
                bare.canonical_revision.as_str(),
                bare.app.as_str(),
                bare.principal.as_str()
            ),
            ("x", "latest", UNKNOWN, "spiffe://td/ns/n/sa/default")
        );
    }

    #[test]
    fn hosts_and_cluster_names() {
        let config = ConfigSet::default();
        let s = service(&config, "reviews.bookinfo.svc.cluster.local");
        assert_eq!(
            (s.name.as_str(), s.namespace.as_str()),
            ("reviews", "bookinfo")
        );
        let e = service(&config, "api.example.com");
        assert_eq!(
            (e.name.as_str(), e.namespace.as_str()),
            ("api.example.com", UNKNOWN)
        );
        assert_eq!(
            cluster_host("outbound|80|v1|reviews.bookinfo.svc.cluster.local"),
            Some("reviews.bookinfo.svc.cluster.local")
        );
        assert_eq!(cluster_host("PassthroughCluster"), None);
        assert_eq!(
            of_principal(&config, "cluster.local/ns/foo/sa/sleep").principal,
            "spiffe://cluster.local/ns/foo/sa/sleep"
        );
        assert_eq!(of_principal(&config, "garbage").namespace, UNKNOWN);
    }
}
