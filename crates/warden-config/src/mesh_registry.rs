//! The mesh's service registry as ServiceEntries: Kubernetes Services (with their
//! EndpointSlices, Endpoints or selected Pods) become one ServiceEntry each, and ServiceEntries
//! with a `workloadSelector` get the WorkloadEntries and Pods they select as endpoints. Routes,
//! clusters and validation then see one kind of service, whatever the source.

use crate::document::Doc;
use crate::kinds::kubernetes::{IntOrString, KubePort, Pod, Service};
use crate::kinds::service_entry::{ServiceEntry, ServicePort, WorkloadEntry};
use crate::ConfigSet;
use std::collections::BTreeMap;

/// The DNS suffix of Kubernetes services (Istio's default trust domain's cluster).
pub const CLUSTER_DOMAIN: &str = "svc.cluster.local";

/// The label EndpointSlices name their Service with.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// `name.namespace.svc.cluster.local`.
pub fn service_fqdn(name: &str, namespace: &str) -> String {
    format!("{name}.{namespace}.{CLUSTER_DOMAIN}")
}

/// A host as written in a VirtualService or DestinationRule of `namespace`: a short name
/// (no dot) is a Kubernetes service of that namespace, as Istio reads it.
pub fn expand_host<'a>(host: &'a str, namespace: &str) -> std::borrow::Cow<'a, str> {
    if host.contains('.') || host.contains('*') || host.is_empty() {
        std::borrow::Cow::Borrowed(host)
    } else {
        std::borrow::Cow::Owned(service_fqdn(host, namespace))
    }
}

/// Add the Kubernetes Services as ServiceEntries (kind `Service`, so problems name the
/// Service) and fill the endpoints of selector-based ServiceEntries.
pub(crate) fn complete(set: &mut ConfigSet) {
    for se in &mut set.service_entries {
        let Some(selector) = se.spec.workload_selector.as_ref() else {
            continue;
        };
        if !se.spec.endpoints.is_empty() {
            continue;
        }
        let ns = se.metadata.namespace_or_default().to_owned();
        let selector = selector.labels.clone();
        let mut endpoints: Vec<WorkloadEntry> = set
            .workload_entries
            .iter()
            .filter(|we| we.metadata.namespace_or_default() == ns)
            .filter(|we| labels_match(&selector, &we.spec.labels, &we.metadata.labels))
            .map(|we| {
                let mut entry = we.spec.clone();
                let mut labels = we.metadata.labels.clone();
                labels.extend(we.spec.labels.clone());
                entry.labels = labels;
                entry
            })
            .collect();
        for pod in set.pods.iter().filter(|p| {
            p.metadata.namespace_or_default() == ns
                && labels_match(&selector, &p.metadata.labels, &BTreeMap::new())
        }) {
            endpoints.extend(pod_endpoints(pod));
        }
        se.spec.endpoints = endpoints;
    }
    let services: Vec<Doc<ServiceEntry>> = set
        .services
        .iter()
        .filter_map(|svc| service_entry_of(svc, set))
        .collect();
    set.service_entries.extend(services);
}

/// Every selector label is among `a` or `b` with the same value.
fn labels_match(
    selector: &BTreeMap<String, String>,
    a: &BTreeMap<String, String>,
    b: &BTreeMap<String, String>,
) -> bool {
    selector
        .iter()
        .all(|(k, v)| a.get(k).or_else(|| b.get(k)) == Some(v))
}

/// The ServiceEntry name of a Service port: its name, else its number.
fn port_name(p: &KubePort) -> String {
    p.name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| p.port.to_string())
}

fn service_entry_of(svc: &Doc<Service>, set: &ConfigSet) -> Option<Doc<ServiceEntry>> {
    let ns = svc.metadata.namespace_or_default();
    let name = &svc.metadata.name;
    let spec = &svc.spec.spec;
    let tcp_ports: Vec<&KubePort> = spec.ports.iter().filter(|p| p.is_tcp()).collect();
    let ports: Vec<ServicePort> = tcp_ports
        .iter()
        .map(|p| ServicePort {
            number: p.port,
            protocol: p.istio_protocol(),
            name: Some(port_name(p)),
            target_port: match &p.target_port {
                Some(IntOrString::Int(n)) => Some(*n),
                _ => None,
            },
        })
        .collect();
    let mut addresses: Vec<String> = if spec.cluster_ips.is_empty() {
        spec.cluster_ip.iter().cloned().collect()
    } else {
        spec.cluster_ips.clone()
    };
    addresses.retain(|a| a != "None" && !a.is_empty());
    let external = spec
        .service_type
        .as_deref()
        .is_some_and(|t| t == "ExternalName");
    let (resolution, endpoints) = match (&spec.external_name, external) {
        (Some(target), true) => (
            "DNS",
            vec![WorkloadEntry {
                address: target.clone(),
                ..WorkloadEntry::default()
            }],
        ),
        _ => ("STATIC", kube_endpoints(svc, &tcp_ports, set)),
    };
    Some(Doc {
        file: svc.file.clone(),
        index: svc.index,
        api_version: svc.api_version.clone(),
        kind: svc.kind.clone(),
        metadata: svc.metadata.clone(),
        spec: ServiceEntry {
            hosts: vec![service_fqdn(name, ns)],
            addresses,
            ports,
            resolution: Some(resolution.into()),
            location: Some("MESH_INTERNAL".into()),
            endpoints,
            workload_selector: None,
        },
    })
}

/// A Service's endpoints: its EndpointSlices, else its Endpoints, else the Pods its selector
/// picks (a dump without endpoint objects).
fn kube_endpoints(svc: &Doc<Service>, ports: &[&KubePort], set: &ConfigSet) -> Vec<WorkloadEntry> {
    let ns = svc.metadata.namespace_or_default();
    let name = &svc.metadata.name;
    let pod_named = |target: Option<&crate::kinds::kubernetes::ObjectRef>| {
        let target = target?;
        if target.kind.as_deref() != Some("Pod") {
            return None;
        }
        set.pods.iter().find(|p| {
            p.metadata.namespace_or_default() == target.namespace.as_deref().unwrap_or(ns)
                && Some(p.metadata.name.as_str()) == target.name.as_deref()
        })
    };
    let entry = |address: &str, slice_ports: &[KubePort], pod: Option<&Doc<Pod>>| {
        let mut by_name = BTreeMap::new();
        for sp in ports {
            // A slice's port carries the Service port's name and the resolved target number.
            let resolved = slice_ports
                .iter()
                .find(|p| p.name.as_deref().unwrap_or("") == sp.name.as_deref().unwrap_or(""))
                .map(|p| p.port);
            if let Some(n) = resolved {
                by_name.insert(port_name(sp), n);
            }
        }
        WorkloadEntry {
            address: address.to_owned(),
            ports: by_name,
            labels: pod.map(|p| p.metadata.labels.clone()).unwrap_or_default(),
            service_account: pod.and_then(|p| p.spec.spec.service_account_name.clone()),
            ..WorkloadEntry::default()
        }
    };
    let slices: Vec<_> = set
        .endpoint_slices
        .iter()
        .filter(|s| {
            s.metadata.namespace_or_default() == ns
                && s.metadata.labels.get(SERVICE_NAME_LABEL) == Some(name)
        })
        .collect();
    if !slices.is_empty() {
        let mut out = Vec::new();
        for slice in slices {
            for ep in &slice.spec.endpoints {
                if ep.conditions.ready == Some(false) {
                    continue;
                }
                let pod = pod_named(ep.target_ref.as_ref());
                for address in &ep.addresses {
                    out.push(entry(address, &slice.spec.ports, pod));
                }
            }
        }
        return out;
    }
    if let Some(eps) = set
        .endpoints
        .iter()
        .find(|e| e.metadata.namespace_or_default() == ns && e.metadata.name == *name)
    {
        let mut out = Vec::new();
        for subset in &eps.spec.subsets {
            for a in &subset.addresses {
                out.push(entry(
                    &a.ip,
                    &subset.ports,
                    pod_named(a.target_ref.as_ref()),
                ));
            }
        }
        return out;
    }
    let selector = &svc.spec.spec.selector;
    if selector.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for pod in set.pods.iter().filter(|p| {
        p.metadata.namespace_or_default() == ns
            && labels_match(selector, &p.metadata.labels, &BTreeMap::new())
    }) {
        for mut e in pod_endpoints(pod) {
            // Resolve each Service port's targetPort on this pod.
            e.ports = ports
                .iter()
                .filter_map(|sp| {
                    let n = match &sp.target_port {
                        Some(IntOrString::Int(n)) => Some(*n),
                        Some(IntOrString::String(named)) => pod.spec.named_port(named),
                        None => Some(sp.port),
                    }?;
                    Some((port_name(sp), n))
                })
                .collect();
            out.push(e);
        }
    }
    out
}

/// One endpoint per pod address, labelled with the pod's labels.
fn pod_endpoints(pod: &Doc<Pod>) -> Vec<WorkloadEntry> {
    pod.spec
        .ips()
        .into_iter()
        .map(|ip| WorkloadEntry {
            address: ip.to_owned(),
            labels: pod.metadata.labels.clone(),
            service_account: pod.spec.spec.service_account_name.clone(),
            ..WorkloadEntry::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_services_of_the_namespace() {
        assert_eq!(
            expand_host("reviews", "bookinfo"),
            "reviews.bookinfo.svc.cluster.local"
        );
        assert_eq!(
            expand_host("reviews.other.svc.cluster.local", "x"),
            "reviews.other.svc.cluster.local"
        );
        assert_eq!(expand_host("*.example.com", "x"), "*.example.com");
    }
}
