//! AuthorizationPolicy through the proxy over real sockets: the 403 reply, source addresses
//! (clients bound to 127.0.0.1 and 127.0.0.2), XFF trust, metrics and access log, TCP first-byte
//! denial, and a 100k-address policy reloaded under load.

mod common;

use common::*;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden_proxy::{AccessLogTarget, ConfigSource, Proxy, ProxyOptions};

const LOCAL_1: &str = "127.0.0.1";
const LOCAL_2: &str = "127.0.0.2";

fn allow_ip_blocks(name: &str, field: &str, blocks: &[&str]) -> String {
    format!(
        "---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: {name}}}\nspec:\n  action: ALLOW\n  rules:\n  - from:\n    - source:\n        {field}: [{}]\n",
        blocks.join(", ")
    )
}

fn client_from(source: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .local_address(source.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

fn start_with(yaml: &str, num_trusted_proxies: u32) -> warden_proxy::RunningProxy {
    let mut opts = ProxyOptions::loopback(inline(yaml));
    opts.num_trusted_proxies = Some(num_trusted_proxies);
    Proxy::start(opts).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denial_is_403_rbac_text_and_named_in_metrics_and_log() {
    let up = counting_echo().await;
    let yaml = http_config(
        up.http_addr().unwrap(),
        "",
        &format!(
            "{}---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: no-admin}}\nspec:\n  action: DENY\n  rules:\n  - to: [{{operation: {{paths: [\"/admin*\"]}}}}]\n---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata:\n  name: try-post\n  annotations: {{istio.io/dry-run: \"true\"}}\nspec:\n  action: DENY\n  rules:\n  - to: [{{operation: {{paths: [\"/shadow\"]}}}}]\n",
            allow_ip_blocks("allow-two", "ipBlocks", &[LOCAL_2])
        ),
    );
    let dir = warden_testkit::TempDir::new("authz-log").unwrap();
    let log_path = dir.path().join("access.log");
    let mut opts = ProxyOptions::loopback(inline(&yaml));
    opts.access_log = Some(AccessLogTarget::File(log_path.clone()));
    let proxy = Proxy::start(opts).unwrap();
    let base = format!("http://{}", addr(&proxy, 0));

    // 127.0.0.1 is not in the ALLOW list: 403 from the proxy, nothing reaches the upstream.
    let r = client_from(LOCAL_1)
        .get(format!("{base}/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.headers()["content-type"], "text/plain");
    assert_eq!(r.headers()["content-length"], "19");
    assert_eq!(r.text().await.unwrap(), "RBAC: access denied");
    assert_eq!(up.total(), 0);

    // 127.0.0.2 is: forwarded.
    let two = client_from(LOCAL_2);
    let r = two.get(format!("{base}/x")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(up.total(), 1);

    // DENY wins over ALLOW; a dry-run DENY only counts.
    let r = two.get(format!("{base}/admin/x")).send().await.unwrap();
    assert_eq!(r.status(), 403);
    let r = two.get(format!("{base}/shadow")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(up.total(), 2);

    let text = proxy.metrics_text();
    for line in [
        "warden_authz_allowed_total 2",
        "warden_authz_denied_total{policy=\"none\"} 1",
        "warden_authz_denied_total{policy=\"ns[default]-policy[no-admin]-rule[0]\"} 1",
        "warden_authz_shadow_denied_total{policy=\"ns[default]-policy[try-post]-rule[0]\"} 1",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }

    // The access log names the denying policy, Envoy-style.
    let deadline = Instant::now() + Duration::from_secs(5);
    let log = loop {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        if log.lines().count() >= 4 || Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{log}");
    assert_eq!(lines[0]["status"], 403);
    assert_eq!(lines[0]["policy"], "none");
    assert_eq!(
        lines[0]["response_code_details"],
        "rbac_access_denied_matched_policy[none]"
    );
    assert!(lines[1].get("policy").is_none(), "{}", lines[1]);
    assert_eq!(lines[2]["policy"], "ns[default]-policy[no-admin]-rule[0]");
    assert_eq!(
        lines[3]["shadow_policy"],
        "ns[default]-policy[try-post]-rule[0]"
    );
    assert_eq!(lines[3]["status"], 200);
    tokio::task::spawn_blocking(move || proxy.shutdown(Duration::from_secs(1)))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_forwarded_for_cannot_spoof_ip_blocks() {
    let up = counting_echo().await;
    let yaml = http_config(
        up.http_addr().unwrap(),
        "",
        &allow_ip_blocks("allow-two", "ipBlocks", &[LOCAL_2]),
    );
    // Even with a trusted hop, ipBlocks look at the TCP peer only.
    for trusted in [0, 1] {
        let proxy = start_with(&yaml, trusted);
        let base = format!("http://{}", addr(&proxy, 0));
        let r = client_from(LOCAL_1)
            .get(format!("{base}/"))
            .header("x-forwarded-for", LOCAL_2)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "num_trusted_proxies {trusted}");
        let r = client_from(LOCAL_2)
            .get(format!("{base}/"))
            .header("x-forwarded-for", "198.51.100.9")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "num_trusted_proxies {trusted}");
        tokio::task::spawn_blocking(move || proxy.shutdown(Duration::from_secs(1)))
            .await
            .unwrap();
    }
    assert_eq!(up.total(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_ip_blocks_honour_num_trusted_proxies() {
    let up = counting_echo().await;
    let yaml = http_config(
        up.http_addr().unwrap(),
        "",
        &allow_ip_blocks("allow-client", "remoteIpBlocks", &["203.0.113.0/24"]),
    );
    let c = client_from(LOCAL_1);
    // One trusted hop: the client is the right-most x-forwarded-for entry.
    let proxy = start_with(&yaml, 1);
    let base = format!("http://{}", addr(&proxy, 0));
    for (xff, want) in [
        (Some("203.0.113.7"), 200),
        (Some("203.0.113.7, 198.51.100.1"), 403),
        (Some("198.51.100.1, 203.0.113.7"), 200),
        (None, 403),
    ] {
        let mut req = c.get(format!("{base}/"));
        if let Some(xff) = xff {
            req = req.header("x-forwarded-for", xff);
        }
        assert_eq!(req.send().await.unwrap().status(), want, "xff {xff:?}");
    }
    tokio::task::spawn_blocking(move || proxy.shutdown(Duration::from_secs(1)))
        .await
        .unwrap();

    // No trusted hop: the header is ignored, the client is the TCP peer.
    let proxy = start_with(&yaml, 0);
    let base = format!("http://{}", addr(&proxy, 0));
    let r = c
        .get(format!("{base}/"))
        .header("x-forwarded-for", "203.0.113.7")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    tokio::task::spawn_blocking(move || proxy.shutdown(Duration::from_secs(1)))
        .await
        .unwrap();
    assert_eq!(up.total(), 2);
}

async fn tcp_from(source: &str, to: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(source.parse().unwrap(), 0))
        .unwrap();
    socket.connect(to).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_listener_denies_on_first_byte_writing_nothing() {
    let up = echo_tcp().await;
    let yaml = format!(
        r#"{gw}
{tcp}---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: tcp-allow}}
spec:
  action: ALLOW
  rules:
  # HTTP-only fields: dropped on a TCP listener.
  - to: [{{operation: {{methods: [GET]}}}}]
  - from: [{{source: {{ipBlocks: ["{LOCAL_2}"]}}}}]
"#,
        gw = gateway(&[(0, "TCP")]),
        tcp = tcp_route(up.port()),
    );
    let proxy = start(&yaml);
    let to = addr(&proxy, 0);

    let mut denied = tcp_from(LOCAL_1, to).await;
    denied.write_all(b"hello").await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), denied.read_to_end(&mut got))
        .await
        .expect("denied connection is closed");
    // Closed (FIN or RST) with nothing written.
    assert!(got.is_empty(), "{got:?} ({read:?})");

    let mut allowed = tcp_from(LOCAL_2, to).await;
    allowed.write_all(b"hello").await.unwrap();
    allowed.shutdown().await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), allowed.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, b"hellobye");

    let text = proxy.metrics_text();
    assert!(
        text.contains("warden_authz_denied_total{policy=\"none\"} 1"),
        "{text}"
    );
    assert!(text.contains("warden_authz_allowed_total 1"), "{text}");
    tokio::task::spawn_blocking(move || proxy.shutdown(Duration::from_secs(1)))
        .await
        .unwrap();
}

/// `n` distinct addresses in 10.0.0.0/8 (offset by `shift`), plus `extra`.
fn big_allowlist(name: &str, n: u32, shift: u32, extra: &str) -> String {
    let mut y = format!(
        "---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: {name}}}\nspec:\n  action: ALLOW\n  rules:\n  - from:\n    - source:\n        ipBlocks:\n        - {extra}\n"
    );
    for i in 0..n {
        let v = (10u32 << 24) | (i + shift);
        y.push_str(&format!(
            "        - {}.{}.{}.{}\n",
            v >> 24,
            (v >> 16) & 255,
            (v >> 8) & 255,
            v & 255
        ));
    }
    y
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reloading_a_100k_address_policy_under_load_fails_no_request() {
    let up = counting_echo().await;
    let dir = warden_testkit::TempDir::new("authz-reload").unwrap();
    let version = |v: u32| {
        http_config(
            up.http_addr().unwrap(),
            "",
            &big_allowlist("big", 100_000, v, LOCAL_2),
        )
    };
    let file = dir.write("gw.yaml", &version(0)).unwrap();
    let mut opts = ProxyOptions::loopback(ConfigSource::Paths(vec![file.clone()]));
    opts.concurrency = 2;
    let proxy = Arc::new(Proxy::start(opts).unwrap());
    let base = format!("http://{}", addr(&proxy, 0));

    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut load = Vec::new();
    for _ in 0..4 {
        let (c, base, ok, failed, stop) = (
            client_from(LOCAL_2),
            base.clone(),
            ok.clone(),
            failed.clone(),
            stop.clone(),
        );
        load.push(tokio::spawn(async move {
            for _ in 0..5_000 {
                if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
                    break;
                }
                match c.get(format!("{base}/")).send().await {
                    Ok(r) if r.status() == 200 => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    let reloads = 2;
    for v in 1..=reloads {
        std::fs::write(&file, version(v)).unwrap();
        let p = proxy.clone();
        tokio::task::spawn_blocking(move || p.reload())
            .await
            .unwrap()
            .expect("reload");
    }
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0);
    assert!(ok.load(Ordering::Relaxed) > 0);
    assert_eq!(proxy.metrics().config_reloads, reloads as u64);
    // Still enforced after the reloads.
    let r = client_from(LOCAL_1)
        .get(format!("{base}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let p = Arc::try_unwrap(proxy).ok().unwrap();
    tokio::task::spawn_blocking(move || p.shutdown(Duration::from_secs(1)))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scope_follows_labels_namespace_and_gateway_target_refs() {
    let up = counting_echo().await;
    let deny_all = |name: &str, namespace: &str, scope: &str| {
        format!(
            "---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n{scope}  action: DENY\n  rules: [{{}}]\n"
        )
    };
    let cases = [
        // (policy, proxy labels, expected status)
        (
            deny_all("by-label", "default", "  selector: {matchLabels: {istio: ingressgateway}}\n"),
            vec![("istio", "ingressgateway")],
            403,
        ),
        (
            deny_all("by-label", "default", "  selector: {matchLabels: {istio: ingressgateway}}\n"),
            vec![("app", "other")],
            200,
        ),
        (deny_all("other-ns", "team-a", ""), vec![], 200),
        (deny_all("root-ns", "istio-system", ""), vec![], 403),
        (
            deny_all("by-gateway", "default", "  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n"),
            vec![],
            403,
        ),
        (
            deny_all("other-gateway", "default", "  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: elsewhere}]\n"),
            vec![],
            200,
        ),
    ];
    for (policy, labels, want) in cases {
        let mut opts =
            ProxyOptions::loopback(inline(&http_config(up.http_addr().unwrap(), "", &policy)));
        opts.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let proxy = Proxy::start(opts).unwrap();
        let r = client_from(LOCAL_1)
            .get(format!("http://{}/", addr(&proxy, 0)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), want, "{policy} labels {labels:?}");
        tokio::task::spawn_blocking(move || proxy.shutdown(Duration::from_secs(1)))
            .await
            .unwrap();
    }
}
