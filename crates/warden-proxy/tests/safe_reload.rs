//! Safe reloads: a config file truncated at a document boundary, emptied to 0 bytes, or left
//! without listeners is refused and counted while clients keep being served; a file that is
//! still being written is read only once it has settled; `allow_empty_config` lets such a
//! reload through.

mod common;

use common::*;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_proxy::{ConfigSource, Proxy, ProxyOptions, RunningProxy};
use warden_testkit::TempDir;

/// Gateway, then a VirtualService (`/` answers `body`, `/up/` goes to `up`), then the
/// ServiceEntry: three documents, so a truncation at a boundary leaves the Gateway alone.
fn full_config(body: &str, up: std::net::SocketAddr) -> String {
    format!(
        r#"{head}  - match: [{{uri: {{prefix: /up/}}}}]
    route: [{{destination: {{host: up.internal}}}}]
  - directResponse:
      status: 200
      body: {{string: "{body}"}}
{se}"#,
        head = gateway_and_route_head(),
        se = service_entry("up.internal", &[up]),
    )
}

/// The text up to (not including) the second document: the Gateway only.
fn first_document(text: &str) -> &str {
    let end = text.find("\n---\n").expect("several documents");
    &text[..end + 1]
}

/// Rewrite the file in place, as a writer that truncates and then writes does (the watcher
/// sees the empty file, then the new text).
fn rewrite_in_place(path: &Path, text: &str) {
    let mut f = std::fs::File::create(path).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let (a, b) = text.as_bytes().split_at(text.len() / 2);
    f.write_all(a).unwrap();
    f.flush().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    f.write_all(b).unwrap();
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn refused(proxy: &RunningProxy, reason: &str) -> bool {
    proxy.metrics_text().contains(&format!(
        "warden_config_reload_refused_total{{reason=\"{reason}\"}}"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_and_empty_files_are_refused_under_a_steady_client() {
    let up = echo_http("up").await;
    let dir = TempDir::new("safe-reload").unwrap();
    let file = dir.path().join("gw.yaml");
    let v1 = full_config("v1", up.addr);
    std::fs::write(&file, &v1).unwrap();
    let mut opts = ProxyOptions::loopback(ConfigSource::Paths(vec![file.clone()]));
    opts.watch_config = true;
    let proxy = Proxy::start(opts).unwrap();
    let base = format!("http://{}", addr(&proxy, 0));

    // One steady client, direct responses and proxied requests in turn, until told to stop
    // (or its bounded count runs out).
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let steady = {
        let (stop, ok, failed, base) = (stop.clone(), ok.clone(), failed.clone(), base.clone());
        tokio::spawn(async move {
            let c = client();
            for i in 0..20_000u32 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let path = if i % 2 == 0 { "/" } else { "/up/x" };
                match c.get(format!("{base}{path}")).send().await {
                    Ok(r) if r.status() == 200 => {
                        let counter = if r.bytes().await.is_ok() {
                            &ok
                        } else {
                            &failed
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                    other => {
                        eprintln!("failed request {path}: {other:?}");
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };

    // Truncated after the Gateway: the listener would lose every route.
    rewrite_in_place(&file, first_document(&v1));
    wait_until("the truncated file to be refused", || {
        refused(&proxy, "listener_without_routes")
    })
    .await;
    // Emptied to 0 bytes.
    std::fs::File::create(&file).unwrap();
    wait_until("the empty file to be refused", || {
        refused(&proxy, "empty_file")
    })
    .await;
    let refusals = proxy.metrics().config_reloads_refused;
    assert!(refusals >= 2, "{refusals}");
    assert_eq!(proxy.metrics().config_reloads, 0);

    // A good config written in place is read once it has settled, and applies.
    rewrite_in_place(&file, &full_config("v2", up.addr));
    let c = client();
    wait_until("the restored config to apply", || {
        proxy.metrics().config_reloads >= 1
    })
    .await;
    let body = c.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(body.text().await.unwrap(), "v2");

    stop.store(true, Ordering::Relaxed);
    steady.await.unwrap();
    assert_eq!(failed.load(Ordering::Relaxed), 0, "failed requests");
    assert!(ok.load(Ordering::Relaxed) > 50, "the client kept going");
    let m = proxy.metrics();
    assert!(m.config_reload_errors >= m.config_reloads_refused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refusal_has_its_reason_and_allow_empty_config_overrides() {
    let up = echo_http("up").await;
    let dir = TempDir::new("guard").unwrap();
    let file = dir.path().join("gw.yaml");
    let full = full_config("v1", up.addr);
    std::fs::write(&file, &full).unwrap();
    let source = ConfigSource::Paths(vec![dir.path().to_path_buf()]);
    let proxy = Proxy::start(ProxyOptions::loopback(source.clone())).unwrap();
    let url = format!("http://{}/", addr(&proxy, 0));

    // The ServiceEntry alone: valid, and no Gateway at all.
    let no_gateway = &full[full.rfind("\n---\n").unwrap() + 5..];
    for (text, reason) in [
        ("", "empty_file"),
        ("\n  \n", "empty_file"),
        (first_document(&full), "listener_without_routes"),
        (no_gateway, "no_listeners"),
    ] {
        std::fs::write(&file, text).unwrap();
        let err = proxy.reload().unwrap_err().to_string();
        assert!(err.contains("reload refused"), "{reason}: {err}");
        assert!(refused(&proxy, reason), "{reason}");
        let body = client()
            .get(&url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(body, "v1", "the running config stays after {reason}");
    }
    assert_eq!(proxy.metrics().config_reloads_refused, 4);
    assert_eq!(proxy.metrics().config_reload_errors, 4);
    // A second, empty file next to a good one is refused too (a ConfigMap sync gone wrong).
    std::fs::write(&file, &full).unwrap();
    std::fs::write(dir.path().join("extra.yaml"), "").unwrap();
    assert!(proxy.reload().is_err());
    std::fs::remove_file(dir.path().join("extra.yaml")).unwrap();
    proxy.reload().expect("the good config reloads");
    drop(proxy);

    // With allow_empty_config the operator's empty config applies: the listener goes away.
    std::fs::write(&file, &full).unwrap();
    let mut opts = ProxyOptions::loopback(source);
    opts.allow_empty_config = true;
    let proxy = Proxy::start(opts).unwrap();
    std::fs::write(&file, "").unwrap();
    proxy.reload().expect("allowed");
    assert!(proxy.listeners().is_empty());
    assert_eq!(proxy.metrics().config_reloads_refused, 0);
}
