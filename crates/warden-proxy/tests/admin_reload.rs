//! Admin endpoint, hot reload (explicit, under load, invalid, on file change), graceful
//! shutdown, access log and `check`.

mod common;

use common::*;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_proxy::{AccessLogTarget, ConfigSource, Proxy, ProxyOptions};
use warden_testkit::TempDir;

/// Direct response `body` on `/`, with `/slow` routed to an upstream that is not running.
fn direct_yaml(body: &str) -> String {
    with_upstream(body, "127.0.0.1:9".parse().unwrap())
}

fn routes_only(body: &str) -> String {
    format!(
        r#"{head}  - match: [{{uri: {{prefix: /slow}}}}]
    route: [{{destination: {{host: up.internal}}}}]
  - directResponse:
      status: 200
      body: {{string: "{body}"}}
"#,
        head = gateway_and_route_head(),
    )
}

fn with_upstream(body: &str, up: std::net::SocketAddr) -> String {
    format!(
        "{}{}",
        routes_only(body),
        service_entry("up.internal", &[up])
    )
}

/// Replace the file atomically, as config management tools do.
fn write_config(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_report_state() {
    let up = echo_http("up").await;
    let proxy = start(&with_upstream("v1", up.addr));
    let admin = format!("http://{}", proxy.admin_addr().unwrap());
    let c = client();
    let r = c.get(format!("{admin}/ready")).send().await.unwrap();
    assert_eq!(r.status(), 200);

    let _ = c
        .get(format!("http://{}/", addr(&proxy, 0)))
        .send()
        .await
        .unwrap();

    let listeners: serde_json::Value = c
        .get(format!("{admin}/listeners"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listeners[0]["addr"], addr(&proxy, 0).to_string());
    assert_eq!(listeners[0]["protocol"], "Http");

    let dump: serde_json::Value = c
        .get(format!("{admin}/config_dump"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(dump["clusters"][0]["name"], "outbound|80||up.internal");
    assert_eq!(dump["clusters"][0]["endpoints"][0], up.addr.to_string());
    assert_eq!(
        dump["config"]["virtual_services"][0]["metadata"]["name"],
        "vs"
    );

    let stats = c
        .get(format!("{admin}/stats/prometheus"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for needle in [
        "warden_http_requests_total{route=\"default/vs/1\",code=\"200\"} 1",
        "warden_http_request_duration_seconds_count 1",
        "warden_downstream_connections_active",
        "warden_config_reloads_total 0",
        "warden_config_reload_errors_total 0",
    ] {
        assert!(stats.contains(needle), "missing {needle} in\n{stats}");
    }
    assert_eq!(
        c.get(format!("{admin}/nope"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reload_under_load_has_zero_failures_and_invalid_reload_keeps_config() {
    let up = echo_http("up").await;
    let dir = TempDir::new("reload").unwrap();
    let file = dir.path().join("gw.yaml");
    write_config(&file, &with_upstream("v0", up.addr));
    let mut opts = ProxyOptions::loopback(ConfigSource::Paths(vec![file.clone()]));
    opts.concurrency = 2;
    let proxy = Arc::new(Proxy::start(opts).unwrap());
    let base = format!("http://{}", addr(&proxy, 0));

    let failures = Arc::new(AtomicU32::new(0));
    let ok = Arc::new(AtomicU32::new(0));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut load = Vec::new();
    for t in 0..4 {
        let (c, base, failures, ok) = (client(), base.clone(), failures.clone(), ok.clone());
        load.push(tokio::spawn(async move {
            for i in 0..250 {
                if Instant::now() > deadline {
                    break;
                }
                // Mix direct responses and proxied requests.
                let path = if (i + t) % 2 == 0 { "/" } else { "/slow/x" };
                match c.get(format!("{base}{path}")).send().await {
                    Ok(r) if r.status() == 200 => {
                        let _ = r.bytes().await;
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let reloads = 10;
    for n in 1..=reloads {
        write_config(&file, &with_upstream(&format!("v{n}"), up.addr));
        let p = proxy.clone();
        tokio::task::spawn_blocking(move || p.reload())
            .await
            .unwrap()
            .expect("valid config reloads");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    for l in load {
        l.await.unwrap();
    }
    assert_eq!(failures.load(Ordering::Relaxed), 0);
    assert!(ok.load(Ordering::Relaxed) > 0);
    let body = client()
        .get(format!("{base}/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, format!("v{reloads}"));
    assert_eq!(proxy.metrics().config_reloads, reloads);

    // An invalid config is rejected with its location, and the running one stays.
    write_config(&file, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: bad}\nspec:\n  http: [{route: 7}]\n");
    let p = proxy.clone();
    let err = tokio::task::spawn_blocking(move || p.reload())
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("gw.yaml"), "{err}");
    let body = client()
        .get(format!("{base}/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, format!("v{reloads}"));
    assert_eq!(proxy.metrics().config_reload_errors, 1);
    assert!(proxy
        .metrics_text()
        .contains("warden_config_reload_errors_total 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_change_triggers_reload() {
    let dir = TempDir::new("watch").unwrap();
    let file = dir.path().join("gw.yaml");
    write_config(&file, &direct_yaml("before"));
    let mut opts = ProxyOptions::loopback(ConfigSource::Paths(vec![dir.path().to_path_buf()]));
    opts.watch_config = true;
    let proxy = Proxy::start(opts).unwrap();
    let url = format!("http://{}/", addr(&proxy, 0));
    let c = client();
    assert_eq!(
        c.get(&url).send().await.unwrap().text().await.unwrap(),
        "before"
    );
    write_config(&file, &direct_yaml("after"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body = c.get(&url).send().await.unwrap().text().await.unwrap();
        // The reload is counted just after the new snapshot is swapped in: a request may see
        // the new config a moment before the counter does.
        if body == "after" && proxy.metrics().config_reloads >= 1 {
            break;
        }
        assert!(Instant::now() < deadline, "file change was not picked up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_in_flight_requests_then_refuses() {
    let up = echo_http("up").await;
    let proxy = start(&with_upstream("v", up.addr));
    let a = addr(&proxy, 0);
    let c = client();
    let in_flight = tokio::spawn({
        let c = c.clone();
        async move {
            let r = c
                .get(format!("http://{a}/slow/delay/500"))
                .send()
                .await
                .unwrap();
            (r.status(), r.headers()["x-upstream"].clone())
        }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let started = Instant::now();
    tokio::task::spawn_blocking(move || proxy.shutdown(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(4));
    let (status, upstream) = in_flight.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(upstream, "up");
    assert!(tokio::net::TcpStream::connect(a).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_log_writes_json_lines() {
    let dir = TempDir::new("log").unwrap();
    let log = dir.path().join("access.log");
    let mut opts = ProxyOptions::loopback(inline(&direct_yaml("logged")));
    opts.access_log = Some(AccessLogTarget::File(log.clone()));
    let proxy = Proxy::start(opts).unwrap();
    let c = client();
    let url = format!("http://{}/hello?x=1", addr(&proxy, 0));
    c.get(&url)
        .header("host", "site.test")
        .send()
        .await
        .unwrap();
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        if !text.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let line: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(line["method"], "GET");
    assert_eq!(line["authority"], "site.test");
    assert_eq!(line["path"], "/hello");
    assert_eq!(line["status"], 200);
    assert_eq!(line["client_ip"], "127.0.0.1");
    assert_eq!(line["route"], "default/vs/1");
    assert_eq!(line["response_flags"], "-");
    assert!(line["time"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn check_describes_config_and_fails_on_errors() {
    let loaded = warden_config::load_str("gw.yaml", &direct_yaml("x")).unwrap();
    let snap = warden_proxy::Snapshot::build(loaded, &Default::default(), None).unwrap();
    let text = warden_proxy::runtime::check::describe(&snap);
    assert!(text.contains("listeners (1):"), "{text}");
    assert!(
        text.contains("default/vs/1 [0 match(es)] direct response 200 (1 bytes)"),
        "{text}"
    );
    assert!(text.contains("upstreams (1):"), "{text}");

    let dir = TempDir::new("check").unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g}\nspec:\n  servers: [{port: {number: 80, protocol: HTTPS}}]\n").unwrap();
    let code = warden_proxy::cli::run_check(warden_proxy::cli::CheckArgs {
        config: vec![bad],
        namespace: None,
        labels: vec![],
        mesh_config: None,
        strict: false,
        skip_kinds: vec![],
        role: Default::default(),
    })
    .unwrap();
    assert_eq!(code, std::process::ExitCode::FAILURE);
}
