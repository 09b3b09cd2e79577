//! Kubernetes objects as a namespace dump gives them, for tests that load published Gateway
//! API or istio.io YAML: fixtures read unchanged, Services with their EndpointSlices, Pods
//! behind them (labels for DestinationRule subsets).

use std::net::SocketAddr;

/// `tests/fixtures/{dir}/{name}` as published (each folder's NOTICE.md names the source).
pub fn fixture(dir: &str, name: &str) -> String {
    let path = format!("{}/tests/fixtures/{dir}/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A Service `name` in `ns` on `port` (port name `http`), its endpoint the server at `at`.
pub fn service(ns: &str, name: &str, port: u16, at: SocketAddr) -> String {
    service_with_port_name(ns, name, "http", port, at)
}

/// [`service`] with the port named `port_name` (its prefix is the protocol Istio infers).
pub fn service_with_port_name(
    ns: &str,
    name: &str,
    port_name: &str,
    port: u16,
    at: SocketAddr,
) -> String {
    format!(
        "---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec:
  ports: [{{name: {port_name}, port: {port}, protocol: TCP, targetPort: {target}}}]
{}",
        endpoint_slice(
            ns,
            name,
            &format!("{name}-abcde"),
            Some(port_name),
            at,
            None
        ),
        target = at.port(),
    )
}

/// An EndpointSlice `slice` of Service `service` with one ready endpoint at `at` (the port
/// named `port_name`, as the Service names it), naming Pod `pod` when given.
pub fn endpoint_slice(
    ns: &str,
    service: &str,
    slice: &str,
    port_name: Option<&str>,
    at: SocketAddr,
    pod: Option<&str>,
) -> String {
    let target_ref = pod.map_or(String::new(), |p| {
        format!("\n  targetRef: {{kind: Pod, name: {p}, namespace: {ns}}}")
    });
    let port_name = port_name.map_or(String::new(), |n| format!("name: {n}, "));
    format!(
        "---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {slice}
  namespace: {ns}
  labels: {{kubernetes.io/service-name: {service}}}
addressType: IPv4
endpoints:
- addresses: [\"{ip}\"]
  conditions: {{ready: true}}{target_ref}
ports: [{{{port_name}port: {port}, protocol: TCP}}]
",
        ip = at.ip(),
        port = at.port(),
    )
}

/// A running Pod `name` in `ns` with `labels` at `at`'s address.
pub fn pod(ns: &str, name: &str, labels: &[(&str, &str)], at: SocketAddr) -> String {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!(
        "---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
  labels: {{{}}}
spec:
  containers: [{{name: app, image: app}}]
status:
  podIP: {ip}
  podIPs: [{{ip: {ip}}}]
",
        labels.join(", "),
        ip = at.ip(),
    )
}
