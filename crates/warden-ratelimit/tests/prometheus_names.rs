//! The Prometheus exposition keeps the series the reference's exporter makes of its stats
//! (`src/stats/prom/default_mapper.yaml`), so its dashboards and alerts keep working.

mod common;

use common::*;

const CONFIG: &str = "domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    descriptors:
      - key: path
        descriptors:
          - key: method
            rate_limit: {unit: minute, requests_per_unit: 100}
      - key: plan
        value: gold
        rate_limit: {unit: minute, requests_per_unit: 100}
  - key: client
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
";

async fn metrics(h: &Harness) -> String {
    reqwest::get(h.debug("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn series_names_and_labels_are_the_reference_exporters() {
    let mut h = start(&[("web.yaml", CONFIG)], None).await;
    let calls = [
        // One level: domain and key1 only; the address' dots become `_` (SanitizeStatName).
        req("web", vec![desc(&[("remote_address", "10.1.2.3")])]),
        req("web", vec![desc(&[("remote_address", "10.1.2.3")])]),
        // Three levels fold into the second one's series.
        req(
            "web",
            vec![desc(&[("tenant", "a"), ("path", "/x"), ("method", "GET")])],
        ),
        req("web", vec![desc(&[("tenant", "a"), ("plan", "gold")])]),
        // detailed_metric: the request's values; `:` becomes `_`.
        req("web", vec![desc(&[("client", "host:8080")])]),
        req("nowhere", vec![desc(&[("k", "v")])]),
    ];
    for r in calls {
        h.client.should_rate_limit(r).await.unwrap();
    }
    let _ = h.client.should_rate_limit(req("", vec![])).await;
    let text = metrics(&h).await;
    for line in [
        "# TYPE ratelimit_service_rate_limit_total_hits counter",
        r#"ratelimit_service_rate_limit_total_hits{domain="web",key1="remote_address"} 2"#,
        r#"ratelimit_service_rate_limit_over_limit{domain="web",key1="remote_address"} 1"#,
        r#"ratelimit_service_rate_limit_within_limit{domain="web",key1="remote_address"} 1"#,
        r#"ratelimit_service_rate_limit_total_hits{domain="web",key1="tenant",key2="path"} 1"#,
        r#"ratelimit_service_rate_limit_total_hits{domain="web",key1="tenant",key2="plan_gold"} 1"#,
        r#"ratelimit_service_rate_limit_total_hits{domain="web",key1="client_host_8080"} 1"#,
        "ratelimit_service_rate_limit_nowhere_domain_not_found 1",
        r#"ratelimit_service_should_rate_limit_error{err_type="service_error"} 1"#,
        r#"ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 7"#,
        r#"ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 7"#,
        "ratelimit_service_config_load_success 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing `{line}` in\n{text}"
        );
    }
    // No suffix or label the reference's series do not have.
    assert!(!text.contains("_total{"), "{text}");
    assert!(!text.contains("key2=\"\""), "{text}");
}

#[tokio::test]
async fn the_prometheus_listener_serves_the_same_series() {
    let mut h = start_with(
        &[("web.yaml", CONFIG)],
        None,
        |s| s.prometheus = Some(("127.0.0.1:0".parse().unwrap(), "/prom".into())),
        None,
    )
    .await;
    h.client
        .should_rate_limit(req("web", vec![desc(&[("remote_address", "10.1.2.3")])]))
        .await
        .unwrap();
    let addr = h.server.prometheus_addr().expect("prometheus listener");
    let text = reqwest::get(format!("http://{addr}/prom"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains(
            "ratelimit_service_rate_limit_total_hits{domain=\"web\",key1=\"remote_address\"} 1\n"
        ),
        "{text}"
    );
}
