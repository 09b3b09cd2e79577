//! Routes to what nothing defines (a host, a DestinationRule subset, a service port): the
//! config loads with Istio's analyzer warning (IST0101) and, as in Envoy, only those routes
//! fail: 503 with no body and response flag `NC` (no cluster), counted; every other route
//! serves.

mod common;

use common::*;
use std::time::Duration;
use warden_proxy::{AccessLogTarget, Proxy, ProxyOptions};
use warden_testkit::TempDir;

fn config(up: std::net::SocketAddr) -> String {
    format!(
        r#"{gw}
{se}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: echo}}
spec:
  host: echo.internal
  subsets:
  - name: v1
    labels: {{}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: site}}
spec:
  hosts: ["*"]
  gateways: [gw]
  http:
  - name: no-host
    match: [{{uri: {{prefix: /no-host}}}}]
    route: [{{destination: {{host: reviews.default.svc.cluster.local}}}}]
  - name: no-subset
    match: [{{uri: {{prefix: /no-subset}}}}]
    route: [{{destination: {{host: echo.internal, subset: v9}}}}]
  - name: no-port
    match: [{{uri: {{prefix: /no-port}}}}]
    route: [{{destination: {{host: echo.internal, port: {{number: 9999}}}}}}]
  - name: v1
    match: [{{uri: {{prefix: /v1}}}}]
    route: [{{destination: {{host: echo.internal, subset: v1}}}}]
  - name: all
    route: [{{destination: {{host: echo.internal}}}}]
"#,
        gw = gateway(&[(0, "HTTP")]),
        se = service_entry("echo.internal", &[up]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_routes_to_undefined_destinations_answer_503_nc() {
    let up = echo_http("echo").await;
    let yaml = config(up.addr);
    let loaded = warden_config::load_str("site.yaml", &yaml).expect("loads, as Istio accepts it");
    let codes: Vec<(&str, String)> = loaded
        .warnings
        .iter()
        .filter_map(|w| Some((w.code?.id(), w.location.field.clone())))
        .collect();
    for field in [
        "spec.http[0].route[0].destination",
        "spec.http[1].route[0].destination",
        "spec.http[2].route[0].destination",
    ] {
        assert!(
            codes
                .iter()
                .any(|(c, f)| *c == "IST0101" && f.starts_with(field)),
            "IST0101 at {field}: {codes:?}"
        );
    }

    let dir = TempDir::new("dangling").unwrap();
    let log = dir.path().join("access.log");
    let mut opts = ProxyOptions::loopback(inline(&yaml));
    opts.access_log = Some(AccessLogTarget::File(log.clone()));
    let proxy = Proxy::start(opts).expect("proxy starts");
    let base = format!("http://{}", addr(&proxy, 0));
    let c = client();
    for path in ["/no-host", "/no-subset", "/no-port"] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 503, "{path}");
        assert_eq!(
            r.text().await.unwrap(),
            "",
            "{path}: Envoy's NC reply has no body"
        );
    }
    for path in ["/v1", "/", "/anything"] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.headers()["x-upstream"], "echo", "{path}");
    }

    let mut lines = Vec::new();
    for _ in 0..100 {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        lines = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .collect();
        if lines.len() >= 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let flags: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            (
                l["path"].as_str().unwrap_or("").to_owned(),
                l["response_flags"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    for (path, want) in [
        ("/no-host", "NC"),
        ("/no-subset", "NC"),
        ("/no-port", "NC"),
        ("/v1", "-"),
        ("/", "-"),
    ] {
        assert!(
            flags.iter().any(|(p, f)| p == path && f == want),
            "{path} logged with {want}: {flags:?}"
        );
    }
    let metrics = proxy.metrics_text();
    assert!(
        metrics.contains("warden_upstream_errors_total{kind=\"no_cluster\"} 3"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("upstream_errors"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let described = warden_proxy::runtime::check::describe(&proxy_snapshot(&yaml));
    assert!(
        described.contains("outbound|80|v9|echo.internal")
            && described.contains("its routes answer 503, response flag NC"),
        "{described}"
    );
}

fn proxy_snapshot(yaml: &str) -> warden_proxy::Snapshot {
    let loaded = warden_config::load_str("site.yaml", yaml).expect("loads");
    warden_proxy::Snapshot::build(loaded, &Default::default(), None).expect("builds")
}
