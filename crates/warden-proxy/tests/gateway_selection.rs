//! Istio's Gateway selection: a Gateway's `selector` picks the gateway proxies it configures by
//! their labels. An ingress and an egress Gateway in one config, two proxies with different
//! labels: each opens and serves its own Gateway's port only, and `warden check` says which
//! Gateways it serves and why it skips the others.

mod common;

use common::*;
use warden_proxy::{Proxy, ProxyIdentity, ProxyOptions};

fn config(ingress_port: u16, egress_port: u16) -> String {
    format!(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: ingress, namespace: istio-system}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: {ingress_port}, name: http, protocol: HTTP}}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: egress, namespace: istio-system}}
spec:
  selector: {{istio: egressgateway}}
  servers:
  - port: {{number: {egress_port}, name: http, protocol: HTTP}}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: in, namespace: istio-system}}
spec:
  hosts: ["*"]
  gateways: [ingress]
  http:
  - directResponse: {{status: 200, body: {{string: ingress}}}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: out, namespace: istio-system}}
spec:
  hosts: ["*"]
  gateways: [egress]
  http:
  - directResponse: {{status: 200, body: {{string: egress}}}}
"#
    )
}

fn labelled(value: &str) -> std::collections::BTreeMap<String, String> {
    [("istio".to_string(), value.to_string())].into()
}

fn free_port() -> u16 {
    warden_testkit::free_port().expect("a free port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_gateway_proxy_serves_only_the_gateway_that_selects_it() {
    let (ingress_port, egress_port) = (free_port(), free_port());
    let yaml = config(ingress_port, egress_port);
    let start = |label: &str| {
        let mut opts = ProxyOptions::loopback(inline(&yaml));
        opts.labels = labelled(label);
        Proxy::start(opts).expect("proxy starts")
    };
    let ingress = start("ingressgateway");
    let egress = start("egressgateway");
    assert!(
        ingress.listener_addr(egress_port).is_none(),
        "egress port not opened"
    );
    assert!(
        egress.listener_addr(ingress_port).is_none(),
        "ingress port not opened"
    );
    let c = client();
    for (proxy, port, body) in [
        (&ingress, ingress_port, "ingress"),
        (&egress, egress_port, "egress"),
    ] {
        let r = c
            .get(format!("http://{}/", addr(proxy, port)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), body);
    }
}

#[test]
fn check_lists_the_gateways_served_and_skipped() {
    let yaml = config(8080, 8081);
    let describe = |labels| {
        let loaded = warden_config::load_str("gw.yaml", &yaml).expect("loads");
        let identity = ProxyIdentity {
            labels,
            ..ProxyIdentity::default()
        };
        let snapshot = warden_proxy::Snapshot::build(loaded, &identity, None).expect("builds");
        let ports: Vec<u16> = snapshot.listeners.iter().map(|l| l.port).collect();
        (ports, warden_proxy::runtime::check::describe(&snapshot))
    };
    let (ports, text) = describe(labelled("ingressgateway"));
    assert_eq!(ports, [8080]);
    assert!(
        text.contains(
            "gateways served (1, this proxy has labels {istio=ingressgateway}): \
             istio-system/ingress"
        ) && text.contains(
            "skipped istio-system/egress: its selector {istio=egressgateway} does not match \
             this proxy's labels {istio=ingressgateway}"
        ),
        "{text}"
    );
    // No labels: warden's standalone default, every Gateway.
    let (ports, text) = describe(Default::default());
    assert_eq!(ports, [8080, 8081]);
    assert!(
        text.contains(
            "gateways served (2, this proxy has no labels: every Gateway): \
             istio-system/ingress, istio-system/egress"
        ),
        "{text}"
    );
}
