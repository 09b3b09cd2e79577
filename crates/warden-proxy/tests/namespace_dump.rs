//! A whole namespace as `kubectl get deploy,rs,svc,endpointslices,pods,cm,sa,sidecars,
//! peerauthentications,gateways,virtualservices,destinationrules -o yaml` prints it (one
//! `kind: List`), loaded unchanged but for addresses and ports (the pods are echo servers on
//! loopback): the gateway serves bookinfo's routes (samples/bookinfo/networking/
//! bookinfo-gateway.yaml) from the dump's Services and Pods; the kinds warden does not act on
//! are skipped with a warning each; the mesh-only VirtualService and its subsets validate
//! without failing the load; one VirtualService routing to a Service the dump lacks loads with
//! IST0101 and only its route answers 503.

mod common;

use common::*;

fn dump(productpage: std::net::SocketAddr, reviews_v1: std::net::SocketAddr) -> String {
    format!(
        r#"apiVersion: v1
kind: List
metadata:
  resourceVersion: ""
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: productpage-v1
    namespace: bookinfo
    labels: {{app: productpage, version: v1}}
  spec:
    replicas: 1
    selector: {{matchLabels: {{app: productpage, version: v1}}}}
    template:
      metadata: {{labels: {{app: productpage, version: v1}}}}
      spec:
        serviceAccountName: bookinfo-productpage
        containers:
        - name: productpage
          image: docker.io/istio/examples-bookinfo-productpage-v1:1.20.2
          ports: [{{containerPort: 9080}}]
- apiVersion: apps/v1
  kind: ReplicaSet
  metadata: {{name: productpage-v1-5d9b5b6c8, namespace: bookinfo}}
  spec: {{replicas: 1}}
- apiVersion: v1
  kind: ServiceAccount
  metadata: {{name: bookinfo-productpage, namespace: bookinfo}}
- apiVersion: v1
  kind: ConfigMap
  metadata: {{name: istio-ca-root-cert, namespace: bookinfo}}
  data: {{root-cert.pem: "-----BEGIN CERTIFICATE-----"}}
- apiVersion: v1
  kind: Service
  metadata:
    name: productpage
    namespace: bookinfo
    labels: {{app: productpage, service: productpage}}
  spec:
    clusterIP: 10.96.14.20
    clusterIPs: [10.96.14.20]
    type: ClusterIP
    ports:
    - {{name: http, port: 9080, protocol: TCP, targetPort: web}}
    selector: {{app: productpage}}
    sessionAffinity: None
  status: {{loadBalancer: {{}}}}
- apiVersion: v1
  kind: Service
  metadata: {{name: reviews, namespace: bookinfo, labels: {{app: reviews}}}}
  spec:
    clusterIP: 10.96.14.21
    ports:
    - {{name: http, port: 9080, protocol: TCP, targetPort: 9080}}
    selector: {{app: reviews}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: reviews-7xk2p
    namespace: bookinfo
    labels: {{kubernetes.io/service-name: reviews}}
  addressType: IPv4
  endpoints:
  - addresses: ["{rv1_ip}"]
    conditions: {{ready: true, serving: true, terminating: false}}
    targetRef: {{kind: Pod, name: reviews-v1-1, namespace: bookinfo}}
  ports:
  - {{name: http, port: {rv1_port}, protocol: TCP}}
- apiVersion: v1
  kind: Pod
  metadata:
    name: productpage-v1-5d9b5b6c8-abcde
    namespace: bookinfo
    labels: {{app: productpage, version: v1, security.istio.io/tlsMode: istio}}
    annotations: {{sidecar.istio.io/status: '{{"initContainers":["istio-init"]}}'}}
  spec:
    serviceAccountName: bookinfo-productpage
    containers:
    - name: productpage
      ports: [{{containerPort: {pp_port}, name: web, protocol: TCP}}]
    - name: istio-proxy
      ports: [{{containerPort: 15090, name: http-envoy-prom, protocol: TCP}}]
  status: {{phase: Running, podIP: "{pp_ip}", podIPs: [{{ip: "{pp_ip}"}}]}}
- apiVersion: v1
  kind: Pod
  metadata:
    name: reviews-v1-1
    namespace: bookinfo
    labels: {{app: reviews, version: v1}}
  spec:
    serviceAccountName: bookinfo-reviews
    containers: [{{name: reviews, ports: [{{containerPort: 9080}}]}}]
  status: {{phase: Running, podIP: "{rv1_ip}"}}
- apiVersion: networking.istio.io/v1
  kind: Sidecar
  metadata: {{name: default, namespace: bookinfo}}
  spec:
    egress:
    - hosts: ["./*", "istio-system/*"]
- apiVersion: security.istio.io/v1
  kind: PeerAuthentication
  metadata: {{name: default, namespace: bookinfo}}
  spec:
    mtls: {{mode: PERMISSIVE}}
- apiVersion: telemetry.istio.io/v1
  kind: Telemetry
  metadata: {{name: mesh-default, namespace: bookinfo}}
  spec:
    accessLogging: [{{providers: [{{name: envoy}}]}}]
- apiVersion: networking.istio.io/v1
  kind: Gateway
  metadata: {{name: bookinfo-gateway, namespace: bookinfo}}
  spec:
    selector: {{istio: ingressgateway}}
    servers:
    - port: {{number: 0, name: http, protocol: HTTP}}
      hosts: ["*"]
- apiVersion: networking.istio.io/v1
  kind: VirtualService
  metadata: {{name: bookinfo, namespace: bookinfo}}
  spec:
    hosts: ["*"]
    gateways: [bookinfo-gateway]
    http:
    - match:
      - uri: {{exact: /productpage}}
      - uri: {{prefix: /static}}
      - uri: {{exact: /login}}
      - uri: {{exact: /logout}}
      - uri: {{prefix: /api/v1/products}}
      route:
      - destination:
          host: productpage
          port: {{number: 9080}}
- apiVersion: networking.istio.io/v1
  kind: VirtualService
  metadata: {{name: reviews, namespace: bookinfo}}
  spec:
    hosts: [reviews]
    http:
    - match: [{{headers: {{end-user: {{exact: jason}}}}}}]
      route: [{{destination: {{host: reviews, subset: v2}}}}]
    - route: [{{destination: {{host: reviews, subset: v1}}}}]
- apiVersion: networking.istio.io/v1
  kind: VirtualService
  metadata: {{name: ratings-gateway, namespace: bookinfo}}
  spec:
    hosts: ["*"]
    gateways: [bookinfo-gateway]
    http:
    - match: [{{uri: {{prefix: /ratings}}}}]
      route: [{{destination: {{host: ratings, port: {{number: 9080}}}}}}]
- apiVersion: networking.istio.io/v1
  kind: DestinationRule
  metadata: {{name: reviews, namespace: bookinfo}}
  spec:
    host: reviews
    subsets:
    - {{name: v1, labels: {{version: v1}}}}
    - {{name: v2, labels: {{version: v2}}}}
"#,
        pp_ip = productpage.ip(),
        pp_port = productpage.port(),
        rv1_ip = reviews_v1.ip(),
        rv1_port = reviews_v1.port(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_dump_serves_its_gateway_routes() {
    let productpage = echo_http("productpage-v1").await;
    let reviews = echo_http("reviews-v1").await;
    let yaml = dump(productpage.addr, reviews.addr);

    let loaded = warden_config::load_str("bookinfo-dump.yaml", &yaml).expect("the dump loads");
    for skipped in [
        "Deployment/productpage-v1",
        "ReplicaSet/productpage-v1-5d9b5b6c8",
        "ServiceAccount/bookinfo-productpage",
        "ConfigMap/istio-ca-root-cert",
    ] {
        assert!(
            loaded.warnings.iter().any(|w| w.location.object == skipped),
            "no warning for {skipped}: {:#?}",
            loaded.warnings
        );
    }

    // The one dangling VirtualService (no `ratings` Service in the dump) loads with Istio's
    // IST0101 at its destination; only its route fails at runtime.
    assert!(
        loaded.warnings.iter().any(|w| {
            w.location.object == "VirtualService/ratings-gateway"
                && w.code.is_some_and(|c| c.id() == "IST0101")
        }),
        "IST0101 for the dangling VirtualService: {:#?}",
        loaded.warnings
    );

    // The Telemetry's access logging is read (no warning).
    assert_eq!(loaded.set.telemetry_access_logging.len(), 1);
    assert!(!loaded
        .warnings
        .iter()
        .any(|w| w.location.object == "Telemetry/mesh-default"));

    let mut opts = warden_proxy::ProxyOptions::loopback(inline(&yaml));
    opts.namespace = "bookinfo".into();
    opts.labels.insert("istio".into(), "ingressgateway".into());
    opts.labels
        .insert("app".into(), "istio-ingressgateway".into());
    let proxy = warden_proxy::Proxy::start(opts).expect("proxy starts");
    let base = format!("http://{}", addr(&proxy, 0));
    let c = client();
    for path in [
        "/productpage",
        "/static/img/logo.png",
        "/login",
        "/api/v1/products/1",
    ] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        // The Service's named targetPort resolved on the Pod: the productpage echo.
        assert_eq!(r.headers()["x-upstream"], "productpage-v1", "{path}");
    }
    let r = c.get(format!("{base}/reviews/1")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    // The dangling route answers as Envoy does (503, no body: NC); the others above served.
    let r = c.get(format!("{base}/ratings/1")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.text().await.unwrap(), "");
}
