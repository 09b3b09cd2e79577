//! `kubectl get svc,endpointslices,pods -o yaml` (a `kind: List`) is a usable registry: each
//! Service becomes a ServiceEntry with its VIP, ports (protocol as Istio picks it) and the
//! endpoints of its EndpointSlice, or of the Pods its selector picks.

const DUMP: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: reviews, namespace: bookinfo, uid: abc}
  spec:
    clusterIP: 10.96.0.20
    clusterIPs: [10.96.0.20]
    ports:
    - {name: http, port: 9080, targetPort: 9080, protocol: TCP}
    - {name: metrics, port: 9090, targetPort: web, protocol: TCP}
    - {name: dns, port: 53, protocol: UDP}
    selector: {app: reviews}
    type: ClusterIP
  status: {loadBalancer: {}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: reviews-abcde
    namespace: bookinfo
    labels: {kubernetes.io/service-name: reviews}
  addressType: IPv4
  endpoints:
  - addresses: [10.244.0.5]
    conditions: {ready: true}
    targetRef: {kind: Pod, name: reviews-v1-1, namespace: bookinfo}
  - addresses: [10.244.0.6]
    conditions: {ready: false}
  ports:
  - {name: http, port: 9080, protocol: TCP}
  - {name: metrics, port: 9091, protocol: TCP}
- apiVersion: v1
  kind: Pod
  metadata: {name: reviews-v1-1, namespace: bookinfo, labels: {app: reviews, version: v1}}
  spec:
    serviceAccountName: bookinfo-reviews
    containers: [{name: reviews, image: x, ports: [{containerPort: 9080}]}]
  status: {podIP: 10.244.0.5, phase: Running}
- apiVersion: v1
  kind: Service
  metadata: {name: ratings, namespace: bookinfo}
  spec:
    clusterIP: 10.96.0.21
    ports: [{port: 9080, targetPort: web}]
    selector: {app: ratings}
- apiVersion: v1
  kind: Pod
  metadata: {name: ratings-1, namespace: bookinfo, labels: {app: ratings}}
  spec:
    containers: [{name: r, ports: [{containerPort: 8000, name: web}]}]
  status: {podIP: 10.244.0.9}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: reviews-v1, namespace: bookinfo}
  spec: {replicas: 1}
"#;

#[test]
fn a_kubectl_list_becomes_service_entries() {
    let loaded = warden_config::load_str("dump.yaml", DUMP).unwrap();
    let set = &loaded.set;
    assert_eq!(set.services.len(), 2);
    assert_eq!(set.pods.len(), 2);
    let reviews = set.service_in("reviews", "bookinfo").expect("reviews");
    assert_eq!(reviews.kind, "Service");
    assert_eq!(reviews.spec.hosts, ["reviews.bookinfo.svc.cluster.local"]);
    assert_eq!(reviews.spec.addresses, ["10.96.0.20"]);
    // UDP is not carried; `http` is HTTP by its name, `metrics` is left to detection.
    let ports: Vec<_> = reviews
        .spec
        .ports
        .iter()
        .map(|p| (p.number, p.protocol.clone()))
        .collect();
    assert_eq!(ports, [(9080, Some("HTTP".into())), (9090, None)]);
    // The ready endpoint only, with its pod's labels and the slice's resolved ports.
    assert_eq!(
        reviews.spec.endpoints.len(),
        1,
        "{:?}",
        reviews.spec.endpoints
    );
    let ep = &reviews.spec.endpoints[0];
    assert_eq!(ep.address, "10.244.0.5");
    assert_eq!(ep.labels.get("version").map(String::as_str), Some("v1"));
    assert_eq!(ep.port_for(&reviews.spec.ports[1]), 9091);
    assert_eq!(ep.service_account.as_deref(), Some("bookinfo-reviews"));

    // No EndpointSlice: the selector's pods, named targetPort resolved on the pod.
    let ratings = set.service_in("ratings", "bookinfo").expect("ratings");
    assert_eq!(ratings.spec.endpoints.len(), 1);
    assert_eq!(ratings.spec.endpoints[0].address, "10.244.0.9");
    assert_eq!(
        ratings.spec.endpoints[0].port_for(&ratings.spec.ports[0]),
        8000
    );

    // The Deployment is skipped with a warning naming it.
    assert!(
        loaded
            .warnings
            .iter()
            .any(|w| w.location.object == "Deployment/reviews-v1"
                && w.message.contains("not used by warden")),
        "{:?}",
        loaded.warnings
    );
    // Every item keeps its own line for problems.
    let line = set.source_lines.line_of(
        &reviews.file,
        reviews.index,
        &warden_config::FieldPath::keys(&["spec", "ports"]),
    );
    assert_eq!(line, Some(12));
}

#[test]
fn a_service_entry_selector_picks_workload_entries_of_its_namespace() {
    let yaml = r#"
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vms, namespace: shop}
spec:
  hosts: [vm.shop.internal]
  addresses: [10.99.0.1]
  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]
  resolution: STATIC
  workloadSelector: {labels: {app: vm}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-1, namespace: shop}
spec: {address: 192.0.2.10, labels: {app: vm, version: v2}, serviceAccount: vm}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-other-ns, namespace: other}
spec: {address: 192.0.2.11, labels: {app: vm}}
"#;
    let loaded = warden_config::load_str("se.yaml", yaml).unwrap();
    let se = loaded
        .set
        .service_entry_for_host("vm.shop.internal")
        .unwrap();
    let addrs: Vec<_> = se
        .spec
        .endpoints
        .iter()
        .map(|e| e.address.as_str())
        .collect();
    assert_eq!(addrs, ["192.0.2.10"]);
    assert_eq!(se.spec.endpoints[0].port_for(&se.spec.ports[0]), 8080);
    assert_eq!(se.spec.addresses, ["10.99.0.1"]);
}
