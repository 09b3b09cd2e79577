//! Access logs as Istio configures Envoy's, end to end: a proxy on loopback started from a
//! mesh config (`accessLogFile`, `accessLogEncoding`, `accessLogFormat`) as `warden proxy
//! --mesh-config` reads it, requests from curl and reqwest, the lines read back from the file.
//! Istio's default TEXT line is parsed by the field pattern of Istio's access log docs; the
//! JSON line has Istio's keys; a custom format exercises every operator; 429 and 403 lines name
//! the rule and the policy; upstream failures carry Envoy's flags and details.

mod common;

use common::*;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use warden_proxy::{Proxy, ProxyOptions, RunningProxy};

/// A proxy for `yaml` logging as the mesh config `mesh` (YAML, `LOG` replaced by the log file)
/// says; returns it and the log file.
fn start_logging(yaml: &str, mesh: &str, dir: &Path) -> (RunningProxy, PathBuf) {
    let log = dir.join("access.log");
    let mesh = mesh.replace("LOG", &log.display().to_string());
    let (config, _) =
        warden_config::mesh_config::parse_mesh_config(Path::new("mesh.yaml"), &mesh).unwrap();
    let (target, format) = warden_proxy::core::access_log::from_mesh(None, &config)
        .unwrap()
        .expect("the mesh config turns logging on");
    let mut opts = ProxyOptions::loopback(inline(yaml));
    opts.access_log = Some(target);
    opts.access_log_format = format;
    (Proxy::start(opts).unwrap(), log)
}

/// The log's lines once there are `n` of them.
async fn lines(log: &Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n || Instant::now() > deadline {
            assert_eq!(lines.len(), n, "{text}");
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn stop(proxy: RunningProxy) {
    tokio::task::spawn_blocking(move || proxy.shutdown(Duration::from_secs(1)))
        .await
        .unwrap();
}

fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// The `x-request-id` lines the upstream received, in order.
fn upstream_request_ids(seen: &Recording) -> Vec<String> {
    seen.lock()
        .unwrap()
        .requests
        .iter()
        .filter_map(|r| {
            r.lines().find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("x-request-id")
                    .then(|| value.trim().to_string())
            })
        })
        .collect()
}

/// Istio's default TEXT format, field by field as Istio's docs list them (`"` quoted fields
/// may hold spaces).
const ISTIO_TEXT_PATTERN: &str = r#"^\[(?P<start_time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)\] "(?P<method>\S+) (?P<path>\S+) (?P<protocol>\S+)" (?P<response_code>\d{3}) (?P<response_flags>\S+) (?P<response_code_details>\S+) (?P<connection_termination_details>\S+) "(?P<upstream_transport_failure_reason>[^"]*)" (?P<bytes_received>\d+) (?P<bytes_sent>\d+) (?P<duration>\d+) (?P<upstream_service_time>\S+) "(?P<x_forwarded_for>[^"]*)" "(?P<user_agent>[^"]*)" "(?P<request_id>[^"]*)" "(?P<authority>[^"]*)" "(?P<upstream_host>[^"]*)" (?P<upstream_cluster>\S+) (?P<upstream_local_address>\S+) (?P<downstream_local_address>\S+) (?P<downstream_remote_address>\S+) (?P<requested_server_name>\S+) (?P<route_name>\S+)$"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istios_default_text_line_parses_with_istios_fields() {
    let (up, seen) = recording_upstream().await;
    let dir = warden_testkit::TempDir::new("al-text").unwrap();
    let (proxy, log) = start_logging(&http_config(up, "", ""), "accessLogFile: LOG\n", dir.path());
    let at = addr(&proxy, 0);
    // curl, as an operator would try it; it sends no x-request-id, so the proxy makes one.
    let (ok, out) = run(
        "curl",
        vec![
            "-sS".into(),
            "-o".into(),
            "/dev/null".into(),
            "-w".into(),
            "%{http_code}".into(),
            "-A".into(),
            "istio-test/1.0".into(),
            "-H".into(),
            "host: shop.example".into(),
            format!("http://{at}/items?id=7"),
        ],
    )
    .await;
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "200");
    let line = lines(&log, 1).await.remove(0);
    let re = regex::Regex::new(ISTIO_TEXT_PATTERN).unwrap();
    let m = re
        .captures(&line)
        .unwrap_or_else(|| panic!("no match: {line}"));
    let field = |n: &str| m.name(n).map_or("", |v| v.as_str()).to_string();
    let ids = upstream_request_ids(&seen);
    let want = [
        ("method", "GET".to_string()),
        ("path", "/items?id=7".into()),
        ("protocol", "HTTP/1.1".into()),
        ("response_code", "200".into()),
        ("response_flags", "-".into()),
        ("response_code_details", "via_upstream".into()),
        ("connection_termination_details", "-".into()),
        ("upstream_transport_failure_reason", "-".into()),
        ("bytes_received", "0".into()),
        ("bytes_sent", "2".into()),
        ("upstream_service_time", "-".into()),
        // The peer, as a gateway appends it.
        ("x_forwarded_for", "127.0.0.1".into()),
        ("user_agent", "istio-test/1.0".into()),
        ("request_id", ids.first().cloned().unwrap_or_default()),
        ("authority", "shop.example".into()),
        ("upstream_host", up.to_string()),
        ("upstream_cluster", "outbound|80||echo.internal".into()),
        ("downstream_local_address", at.to_string()),
        ("requested_server_name", "-".into()),
        ("route_name", "default/site/all".into()),
    ];
    for (name, value) in want {
        assert_eq!(field(name), value, "{name} in {line}");
    }
    // The proxy's end of the upstream connection.
    let local: std::net::SocketAddr = field("upstream_local_address").parse().expect(&line);
    assert_eq!(local.ip().to_string(), "127.0.0.1", "{line}");
    // The id the line names is the one the upstream got: a UUID the proxy made.
    assert_eq!(field("request_id").len(), 36, "{line}");
    assert!(field("downstream_remote_address").starts_with("127.0.0.1:"));
    stop(proxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_encoding_writes_istios_keys() {
    let (up, seen) = recording_upstream().await;
    let dir = warden_testkit::TempDir::new("al-json").unwrap();
    let (proxy, log) = start_logging(
        &http_config(up, "", ""),
        "accessLogFile: LOG\naccessLogEncoding: JSON\n",
        dir.path(),
    );
    let base = format!("http://{}", addr(&proxy, 0));
    let r = client()
        .get(format!("{base}/a"))
        .header("x-request-id", "kept-1")
        .header("x-forwarded-for", "10.9.8.7")
        .header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .header("tracestate", "congo=t61rcWkgMzE")
        .header("b3", "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let line: serde_json::Value = serde_json::from_str(&lines(&log, 1).await[0]).unwrap();
    let keys: Vec<&str> = line
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut want: Vec<&str> = vec![
        "start_time",
        "route_name",
        "method",
        "path",
        "protocol",
        "response_code",
        "response_flags",
        "response_code_details",
        "connection_termination_details",
        "bytes_received",
        "bytes_sent",
        "duration",
        "upstream_service_time",
        "x_forwarded_for",
        "user_agent",
        "request_id",
        "authority",
        "upstream_host",
        "upstream_cluster",
        "upstream_local_address",
        "downstream_local_address",
        "downstream_remote_address",
        "requested_server_name",
        "upstream_transport_failure_reason",
    ];
    want.sort_unstable();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(keys, want);
    assert_eq!(line["response_code"], 200);
    assert_eq!(line["bytes_sent"], 2);
    assert_eq!(line["method"], "GET");
    assert_eq!(line["response_flags"], "-");
    assert_eq!(line["x_forwarded_for"], "10.9.8.7, 127.0.0.1");
    assert_eq!(line["request_id"], "kept-1");
    let local = line["upstream_local_address"].as_str().unwrap_or_default();
    assert!(local.starts_with("127.0.0.1:"), "{line}");
    assert_eq!(upstream_request_ids(&seen), ["kept-1"]);
    // With no tracer, trace context passes through untouched, as Envoy passes it.
    let request = seen.lock().unwrap().requests[0].to_ascii_lowercase();
    for line in [
        "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate: congo=t61rcwkgmze",
        "b3: 80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1",
    ] {
        assert!(request.contains(line), "{line} in {request}");
    }
    stop(proxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_format_writes_every_operator() {
    let (up, _seen) = recording_upstream().await;
    let dir = warden_testkit::TempDir::new("al-custom").unwrap();
    let format = [
        "%START_TIME(%Y/%m/%d %s)%",
        "%REQ(:METHOD)%",
        "%REQ(:PATH)%",
        "%REQ(:AUTHORITY)%",
        "%REQ(X-MISSING?USER-AGENT):5%",
        "%RESP(CONTENT-LENGTH)%",
        "%RESP(:STATUS)%",
        "%PROTOCOL%",
        "%RESPONSE_CODE%",
        "%RESPONSE_FLAGS%",
        "%RESPONSE_CODE_DETAILS%",
        "%CONNECTION_TERMINATION_DETAILS%",
        "%BYTES_RECEIVED%",
        "%BYTES_SENT%",
        "%DURATION%",
        "%UPSTREAM_HOST%",
        "%UPSTREAM_CLUSTER%",
        "%UPSTREAM_LOCAL_ADDRESS%",
        "%UPSTREAM_TRANSPORT_FAILURE_REASON%",
        "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%",
        "%DOWNSTREAM_LOCAL_ADDRESS%",
        "%REQUESTED_SERVER_NAME%",
        "%ROUTE_NAME%",
        "%DYNAMIC_METADATA(none:key)%",
        "%FILTER_STATE(warden.rule:PLAIN)%",
    ]
    .join(" # ");
    let (proxy, log) = start_logging(
        &http_config(up, "", ""),
        &format!("accessLogFile: LOG\naccessLogFormat: '{format}'\n"),
        dir.path(),
    );
    let at = addr(&proxy, 0);
    let r = client()
        .post(format!("http://{at}/p?q=1"))
        .header("user-agent", "agent-007")
        .body("12345")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let line = lines(&log, 1).await.remove(0);
    let fields: Vec<&str> = line.split(" # ").collect();
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (date, epoch) = fields[0].split_once(' ').unwrap();
    assert_eq!(date.len(), 10, "{line}");
    assert!(secs.abs_diff(epoch.parse().unwrap()) < 60, "{line}");
    let duration: u64 = fields[14].parse().unwrap();
    assert!(duration < 10_000, "{line}");
    let want = [
        (1, "POST".to_string()),
        (2, "/p?q=1".into()),
        (3, at.to_string()),
        (4, "agent".into()),
        (5, "2".into()),
        (6, "200".into()),
        (7, "HTTP/1.1".into()),
        (8, "200".into()),
        (9, "-".into()),
        (10, "via_upstream".into()),
        (11, "-".into()),
        (12, "5".into()),
        (13, "2".into()),
        (15, up.to_string()),
        (16, "outbound|80||echo.internal".into()),
        (18, "-".into()),
        (19, "127.0.0.1".into()),
        (20, at.to_string()),
        (21, "-".into()),
        (22, "default/site/all".into()),
        (23, "-".into()),
        (24, "-".into()),
    ];
    for (i, value) in want {
        assert_eq!(fields[i], value, "field {i} of {line}");
    }
    assert_eq!(fields.len(), 25, "{line}");
    // The proxy's side of its connection to the upstream: a loopback address the upstream's
    // peer was.
    let local: std::net::SocketAddr = fields[17].parse().expect(&line);
    assert_eq!(local.ip().to_string(), "127.0.0.1", "{line}");
    assert_ne!(local.port(), 0, "{line}");
    assert_ne!(local, up, "{line}");
    stop(proxy).await;
}

/// A TLS origination the upstream's certificate fails: Envoy's `UF` with the handshake's
/// reason in `%UPSTREAM_TRANSPORT_FAILURE_REASON%` (spaces as `_`), and no upstream local
/// address; the same cluster with the right CA logs the connection's address and no reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_tls_origination_logs_its_reason() {
    let theirs = warden_testkit::pki::Pki::new("al-upstream");
    let other = warden_testkit::pki::Pki::new("al-other");
    let backend = tls_backend(&theirs, "tls.internal").await;
    let dr = |name: &str, host: &str, ca: &Path| {
        format!(
            "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: {name}}}\nspec:\n  host: {host}\n  trafficPolicy:\n    tls: {{mode: SIMPLE, caCertificates: {}}}\n",
            ca.display()
        )
    };
    let routes = r#"
  - name: wrong-ca
    match: [{uri: {prefix: /wrong}}]
    retries: {attempts: 0}
    route: [{destination: {host: tls-wrong.internal}}]
  - name: right-ca
    match: [{uri: {prefix: /right}}]
    retries: {attempts: 0}
    route: [{destination: {host: tls.internal}}]"#;
    let yaml = format!(
        "{}{}{}{}{}",
        http_config(backend, routes, ""),
        service_entry("tls.internal", &[backend]),
        service_entry("tls-wrong.internal", &[backend]),
        dr("wrong", "tls-wrong.internal", &other.ca_path),
        dr("right", "tls.internal", &theirs.ca_path),
    );
    let dir = warden_testkit::TempDir::new("al-tls").unwrap();
    let (proxy, log) = start_logging(
        &yaml,
        "accessLogFile: LOG\naccessLogFormat: '%RESPONSE_CODE% %RESPONSE_FLAGS% %UPSTREAM_TRANSPORT_FAILURE_REASON% %UPSTREAM_LOCAL_ADDRESS%'\n",
        dir.path(),
    );
    let base = format!("http://{}", addr(&proxy, 0));
    let wrong = client().get(format!("{base}/wrong")).send().await.unwrap();
    assert_eq!(wrong.status(), 503);
    let right = client().get(format!("{base}/right")).send().await.unwrap();
    let lines = lines(&log, 2).await;
    assert_eq!(right.status(), 200, "{lines:?}");
    let failed: Vec<&str> = lines[0].split(' ').collect();
    assert_eq!(&failed[..2], ["503", "UF"], "{lines:?}");
    assert!(
        failed[2].starts_with("TLS_error:|invalid_peer_certificate:")
            && failed[2].contains("UnknownIssuer")
            && failed[2].ends_with(":TLS_error_end"),
        "{lines:?}"
    );
    assert_eq!(failed[3], "-", "{lines:?}");
    let ok: Vec<&str> = lines[1].split(' ').collect();
    assert_eq!(&ok[..3], ["200", "-", "-"], "{lines:?}");
    let local: std::net::SocketAddr = ok[3].parse().expect(&lines[1]);
    assert_eq!(local.ip().to_string(), "127.0.0.1", "{lines:?}");
    stop(proxy).await;
}

/// Every line: code, flags, details and the rule that decided.
const DECISION_FORMAT: &str =
    "accessLogFile: LOG\naccessLogFormat: '%RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %FILTER_STATE(warden.rule)%'\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_names_the_rule_and_a_403_the_policy() {
    let (up, _seen) = recording_upstream().await;
    let policies = r#"---
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: one-per-ip}
spec:
  local:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
        path: {type: Exact, value: /limited}
      limit: {requests: 1, unit: Day}
---
apiVersion: warden.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: global-one}
spec:
  global:
    rules:
    - clientSelectors:
      - sourceCIDR: {type: Distinct, value: 0.0.0.0/0}
        path: {type: Exact, value: /global}
      limit: {requests: 1, unit: Day}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-admin}
spec:
  action: DENY
  rules:
  - to: [{operation: {paths: ["/admin*"]}}]
"#;
    let dir = warden_testkit::TempDir::new("al-decisions").unwrap();
    let (proxy, log) = start_logging(&http_config(up, "", policies), DECISION_FORMAT, dir.path());
    let base = format!("http://{}", addr(&proxy, 0));
    let c = client_from("127.0.0.3");
    let mut codes = Vec::new();
    for path in ["/limited", "/limited", "/global", "/global", "/admin/x"] {
        codes.push(
            c.get(format!("{base}{path}"))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    assert_eq!(codes, [200, 429, 200, 429, 403]);
    let lines = lines(&log, 5).await;
    assert_eq!(lines[0], "200 - via_upstream -");
    assert_eq!(
        lines[1],
        "429 RL local_rate_limited RateLimitPolicy/one-per-ip spec.local.rules[0]"
    );
    assert_eq!(lines[2], "200 - via_upstream -");
    let (head, rule) = lines[3].split_once(" descriptor[").unwrap();
    assert_eq!(head, "429 RL request_rate_limited", "{}", lines[3]);
    assert!(
        rule.contains("127.0.0.3") && rule.contains("-limit[1/day]"),
        "the global descriptor and limit: {}",
        lines[3]
    );
    assert_eq!(
        lines[4],
        "403 - rbac_access_denied_matched_policy[ns[default]-policy[no-admin]-rule[0]] \
         ns[default]-policy[no-admin]-rule[0]"
    );
    stop(proxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_carry_envoys_flags_and_details() {
    let closed = closed_port().await;
    let retried = r#"
  - name: retried
    match: [{uri: {prefix: /retried}}]
    retries: {attempts: 2, retryOn: connect-failure}
    route: [{destination: {host: gone.internal}}]
  - name: once
    match: [{uri: {prefix: /once}}]
    retries: {attempts: 0}
    route: [{destination: {host: gone.internal}}]
  - name: nowhere
    match: [{uri: {prefix: /nowhere}}]
    route: [{destination: {host: missing.internal}}]
  - name: faulty
    match: [{uri: {prefix: /faulty}}]
    fault:
      delay: {fixedDelay: 1ms, percentage: {value: 100}}
      abort: {httpStatus: 418, percentage: {value: 100}}
    route: [{destination: {host: gone.internal}}]
  - name: garbled
    match: [{uri: {prefix: /garbled}}]
    retries: {attempts: 0}
    route: [{destination: {host: garbled.internal}}]"#;
    let garbled = raw_upstream(|_| b"NOT-HTTP 200 fine\r\n\r\n".to_vec()).await;
    let yaml = format!(
        "{}{}{}",
        http_config(closed.addr(), retried, "").replace(
            "  - name: all\n",
            "  - name: all\n    match: [{uri: {prefix: /all}}]\n"
        ),
        service_entry("gone.internal", &[closed.addr()]),
        service_entry("garbled.internal", &[garbled]),
    );
    let dir = warden_testkit::TempDir::new("al-failures").unwrap();
    let (proxy, log) = start_logging(&yaml, DECISION_FORMAT, dir.path());
    let base = format!("http://{}", addr(&proxy, 0));
    let c = client();
    let mut codes = Vec::new();
    // `/retried` is Istio's default too (2 attempts on connect failures): `URX` once they ran
    // out; `/once` has none.
    for path in [
        "/retried", "/once", "/nowhere", "/none", "/garbled", "/faulty",
    ] {
        codes.push(
            c.get(format!("{base}{path}"))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    assert_eq!(codes, [503, 503, 503, 404, 503, 418]);
    let lines = lines(&log, 6).await;
    assert_eq!(
        lines,
        [
            "503 UF,URX upstream_reset_before_response_started{remote_connection_failure} -",
            "503 UF upstream_reset_before_response_started{remote_connection_failure} -",
            "503 NC cluster_not_found -",
            "404 NR route_not_found -",
            "503 UPE upstream_reset_before_response_started{protocol_error} -",
            // A fault's delay, then its abort: both flags, in Envoy's order.
            "418 DI,FI fault_filter_abort -",
        ]
    );
    stop(proxy).await;
}

#[test]
fn a_format_warden_cannot_write_names_the_mesh_config_field() {
    let mesh = "accessLogFile: /dev/stdout\naccessLogEncoding: TEXT\naccessLogFormat: '%START_TIME% %UPSTREAM_PEER_CERT%'\n";
    let (config, _) =
        warden_config::mesh_config::parse_mesh_config(Path::new("mesh.yaml"), mesh).unwrap();
    let problem = warden_proxy::core::access_log::from_mesh(None, &config).unwrap_err();
    let text = problem.to_string();
    assert!(
        text.contains("mesh.yaml:3") && text.contains("accessLogFormat"),
        "{text}"
    );
    assert!(
        text.contains("`UPSTREAM_PEER_CERT` is not supported"),
        "{text}"
    );
    // `--access-log` alone keeps warden's JSON line.
    let plain = warden_config::mesh_config::MeshConfig::default();
    let (_, format) = warden_proxy::core::access_log::from_mesh(Some("-"), &plain)
        .unwrap()
        .unwrap();
    assert_eq!(format, warden_proxy::core::access_log::LineFormat::Warden);
    // No file, no flag: no log.
    assert!(warden_proxy::core::access_log::from_mesh(None, &plain)
        .unwrap()
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_filters_and_disables_the_log() {
    let (up, _seen) = recording_upstream().await;
    let errors_only = r#"---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: mesh-default, namespace: istio-system}
spec:
  accessLogging:
  - providers: [{name: envoy}]
    filter: {expression: "response.code >= 400"}
"#;
    let yaml = http_config(up, "", errors_only).replace(
        "  - name: all\n",
        "  - name: all\n    match: [{uri: {prefix: /ok}}]\n",
    );
    let dir = warden_testkit::TempDir::new("al-telemetry").unwrap();
    let (proxy, log) = start_logging(&yaml, DECISION_FORMAT, dir.path());
    let base = format!("http://{}", addr(&proxy, 0));
    let c = client();
    let mut codes = Vec::new();
    for path in ["/ok", "/missing", "/ok"] {
        codes.push(
            c.get(format!("{base}{path}"))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    assert_eq!(codes, [200, 404, 200]);
    assert_eq!(lines(&log, 1).await, ["404 NR route_not_found -"]);
    stop(proxy).await;

    // The proxy's own namespace turns it off; the mesh's filter no longer applies.
    let off = format!(
        "{errors_only}---\napiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {{name: quiet, namespace: default}}\nspec:\n  accessLogging:\n  - disabled: true\n"
    );
    let dir = warden_testkit::TempDir::new("al-telemetry-off").unwrap();
    let yaml = http_config(up, "", &off);
    let (proxy, log) = start_logging(&yaml, DECISION_FORMAT, dir.path());
    let base = format!("http://{}", addr(&proxy, 0));
    assert_eq!(
        c.get(format!("{base}/x")).send().await.unwrap().status(),
        200
    );
    assert_eq!(
        c.get(format!("{base}/x")).send().await.unwrap().status(),
        200
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(std::fs::read_to_string(&log).unwrap_or_default(), "");
    stop(proxy).await;
}

#[test]
fn telemetry_expressions_warden_cannot_read_are_errors_naming_the_field() {
    let yaml = "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: t, namespace: istio-system}\nspec:\n  accessLogging:\n  - filter:\n      expression: \"request.headers['x'] == 'y'\"\n";
    let err = warden_config::load_str("t.yaml", yaml)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("t.yaml:7")
            && err.contains("spec.accessLogging[0].filter.expression")
            && err.contains("not other CEL"),
        "{err}"
    );
}

/// An upstream that takes requests and never answers; each request head read is reported.
async fn silent_upstream() -> (
    std::net::SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<()>,
) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tx.send(());
                // Hold the connection, answering nothing, until the proxy closes it.
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    (at, rx)
}

/// A client that closes its connection while the upstream has not answered: Envoy's
/// `0 DC downstream_remote_disconnect` line with nothing sent, on the fast path (a body-less
/// GET) and on hyper's (a POST with a body), and Istio's `istio_requests_total` counts both
/// with `response_code="0"` and `response_flags="DC"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_before_the_answer_is_logged_dc() {
    use tokio::io::AsyncWriteExt;
    let (up, mut requests) = silent_upstream().await;
    let dir = warden_testkit::TempDir::new("al-dc").unwrap();
    let (proxy, log) = start_logging(
        &http_config(up, "", ""),
        "accessLogFile: LOG\naccessLogFormat: '%REQ(:METHOD)% %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %BYTES_SENT% %UPSTREAM_CLUSTER%'\n",
        dir.path(),
    );
    let at = addr(&proxy, 0);
    for request in [
        &b"GET /slow HTTP/1.1\r\nhost: shop.example\r\n\r\n"[..],
        b"POST /slow HTTP/1.1\r\nhost: shop.example\r\ncontent-length: 3\r\n\r\nabc",
    ] {
        let mut client = tokio::net::TcpStream::connect(at).await.unwrap();
        client.write_all(request).await.unwrap();
        // The upstream has the request: the proxy is waiting for its answer.
        requests.recv().await.unwrap();
        drop(client);
    }
    let lines = lines(&log, 2).await;
    assert_eq!(
        lines,
        [
            "GET 0 DC downstream_remote_disconnect 0 outbound|80||echo.internal",
            "POST 0 DC downstream_remote_disconnect 0 outbound|80||echo.internal",
        ]
    );
    let text = proxy.metrics_text();
    let dc: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("istio_requests_total{")
                && l.contains(r#"response_code="0""#)
                && l.contains(r#"response_flags="DC""#)
        })
        .collect();
    assert_eq!(dc.len(), 1, "{text}");
    assert!(dc[0].ends_with(" 2"), "{text}");
    stop(proxy).await;
}

/// An HTTP/1.1 upstream answering chunked bodies by path: `/whole` two chunks and the end,
/// `/cut` one chunk then a closed connection, `/stall` one chunk then nothing (held open).
async fn chunked_upstream() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                // Requests come one at a time (body-less): one head per read loop.
                loop {
                    let mut head = Vec::new();
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let start =
                        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n";
                    let _ = s.write_all(start.as_bytes()).await;
                    if head.contains(" /whole ") {
                        let _ = s.write_all(b"6\r\n world\r\n0\r\n\r\n").await;
                    } else if head.contains(" /cut ") {
                        return;
                    } else {
                        while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
                        return;
                    }
                }
            });
        }
    });
    at
}

/// `%BYTES_SENT%` is what the client was sent of a streamed body (a chunked answer has no
/// length to declare), and a body cut short says who cut it: the upstream (`UC`, Envoy's
/// `upstream_reset_after_response_started{...}`), or the client resetting its HTTP/2 stream
/// (`DC`), with the bytes sent until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_sent_counts_what_a_streamed_body_sent() {
    let up = chunked_upstream().await;
    let dir = warden_testkit::TempDir::new("al-sent").unwrap();
    let (proxy, log) = start_logging(
        &http_config(up, "", ""),
        "accessLogFile: LOG\naccessLogFormat: '%REQ(:PATH)% %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %BYTES_SENT%'\n",
        dir.path(),
    );
    let base = format!("http://{}", addr(&proxy, 0));
    let whole = client().get(format!("{base}/whole")).send().await.unwrap();
    assert_eq!(whole.text().await.unwrap(), "hello world");
    assert_eq!(lines(&log, 1).await[0], "/whole 200 - via_upstream 11");
    let cut = client().get(format!("{base}/cut")).send().await.unwrap();
    assert!(cut.bytes().await.is_err(), "the client sees the body cut");
    assert_eq!(
        lines(&log, 2).await[1],
        "/cut 200 UC upstream_reset_after_response_started{connection_termination} 5"
    );
    let mut stalled = h2_client()
        .get(format!("{base}/stall"))
        .send()
        .await
        .unwrap();
    assert_eq!(stalled.chunk().await.unwrap().unwrap(), "hello");
    // Dropping the response resets the stream.
    drop(stalled);
    assert_eq!(
        lines(&log, 3).await[2],
        "/stall 200 DC downstream_remote_disconnect 5"
    );
    stop(proxy).await;
}
