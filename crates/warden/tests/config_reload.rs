//! File-change reloads of `warden proxy` as a process, the way configs are delivered: through
//! a relative `-c` path (the README's form) to a file and to a folder, and through a ConfigMap
//! volume's `..data` swap — each change exactly one reload; and a reload that carries one good
//! change and one route to an undefined host, under a steady client: the good change is live,
//! only the dangling route answers 503 (Envoy's NC), and no other request fails.
//! Alias bombs (1 KB, 1 MB) written over the config under a steady client: each reload refused,
//! the proxy's peak RSS up by less than 32 MB, no request failed.

mod common;

use common::atomic_writer::AtomicWriterDir;
use common::{get, metric_in, WARDEN};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use warden_testkit::{free_port, wait_until, KillOnDrop, TempDir};

/// `warden proxy -c CONFIG` run from `cwd`, admin on a free port, waited for until ready.
fn start_in(cwd: &Path, config: &str) -> (KillOnDrop, SocketAddr) {
    let admin = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port().expect("a free port")));
    let mut c = Command::new(WARDEN);
    c.current_dir(cwd)
        .args(["proxy", "-c", config])
        .args(["--listen-host", "127.0.0.1", "--concurrency", "2"])
        .arg(format!("--admin={admin}"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    let child = KillOnDrop::spawn(c).expect("warden proxy starts");
    let ready = wait_until(Duration::from_secs(20), || {
        get(admin, "/ready").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    });
    assert!(ready, "warden proxy -c {config} did not get ready");
    (child, admin)
}

/// A Gateway on `port` and a VirtualService answering `body` on every path.
fn gateway(port: u16, body: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: gw}}\nspec:\n  servers:\n  - port: {{number: {port}, protocol: HTTP, name: http}}\n    hosts: [\"*\"]\n---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: vs}}\nspec:\n  hosts: [\"*\"]\n  gateways: [gw]\n  http:\n  - directResponse: {{status: 200, body: {{string: \"{body}\"}}}}\n"
    )
}

fn reloads(admin: SocketAddr) -> f64 {
    metric_in(
        &get(admin, "/stats/prometheus").unwrap_or_default(),
        "warden_config_reloads_total",
    )
}

fn errors(admin: SocketAddr) -> f64 {
    metric_in(
        &get(admin, "/stats/prometheus").unwrap_or_default(),
        "warden_config_reload_errors_total",
    )
}

/// `(status, body)` of a GET to the gateway.
fn answer(port: u16, path: &str) -> Option<(u16, String)> {
    let r = get(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), path)?;
    let (head, body) = r.split_once("\r\n\r\n")?;
    Some((head.get(9..12)?.parse().ok()?, body.to_string()))
}

/// After `change`, the gateway serves `want` and, once things have had time to settle (more
/// than the reloader's quiet period and its longest wait), exactly one more reload happened.
fn exactly_one_reload(admin: SocketAddr, port: u16, want: &str, change: impl FnOnce()) {
    let before = reloads(admin);
    change();
    let mut last = None;
    let served = wait_until(Duration::from_secs(15), || {
        last = answer(port, "/");
        last.as_ref().is_some_and(|(_, b)| b == want)
    });
    assert!(served, "still {last:?} after the change, want {want}");
    thread::sleep(Duration::from_secs(6));
    assert_eq!(reloads(admin) - before, 1.0, "reloads for one change");
    assert_eq!(errors(admin), 0.0, "no reload failed");
}

#[test]
fn a_relative_config_path_reloads_once_per_change() {
    let dir = TempDir::new("relative").expect("temp dir");
    // A file: `-c gateway.yaml`, rewritten in place and then replaced by a rename (as editors
    // save).
    let port = free_port().expect("a free port");
    std::fs::write(dir.path().join("gateway.yaml"), gateway(port, "v1")).expect("written");
    let (_proxy, admin) = start_in(dir.path(), "gateway.yaml");
    assert_eq!(answer(port, "/").map(|a| a.1).as_deref(), Some("v1"));
    exactly_one_reload(admin, port, "v2", || {
        std::fs::write(dir.path().join("gateway.yaml"), gateway(port, "v2")).expect("rewritten");
    });
    exactly_one_reload(admin, port, "v3", || {
        let tmp = dir.path().join(".gateway.yaml.swp");
        std::fs::write(&tmp, gateway(port, "v3")).expect("written");
        std::fs::rename(&tmp, dir.path().join("gateway.yaml")).expect("renamed");
    });
    drop(_proxy);

    // A folder: `-c cfg`, a file in it edited.
    let port = free_port().expect("a free port");
    std::fs::create_dir(dir.path().join("cfg")).expect("cfg");
    std::fs::write(dir.path().join("cfg/gateway.yaml"), gateway(port, "v1")).expect("written");
    let (_proxy, admin) = start_in(dir.path(), "cfg");
    assert_eq!(answer(port, "/").map(|a| a.1).as_deref(), Some("v1"));
    exactly_one_reload(admin, port, "v2", || {
        std::fs::write(dir.path().join("cfg/gateway.yaml"), gateway(port, "v2"))
            .expect("rewritten");
    });
    drop(_proxy);

    // A ConfigMap volume mounted at a relative path: the kubelet's `..data` swap, both as the
    // folder and as one key's file.
    for (name, path) in [("cm", "cm"), ("cm-key", "cm-key/gateway.yaml")] {
        let port = free_port().expect("a free port");
        let mut volume = AtomicWriterDir::new(
            &dir.path().join(name),
            &[("gateway.yaml", &gateway(port, "v1"))],
        );
        let (_proxy, admin) = start_in(dir.path(), path);
        assert_eq!(answer(port, "/").map(|a| a.1).as_deref(), Some("v1"));
        exactly_one_reload(admin, port, "v2", || {
            volume.update(&[("gateway.yaml", &gateway(port, "v2"))]);
        });
    }
}

/// The gateway with three routes: `/a` a direct answer of `a_body`, `/b` forwarded to the
/// upstream at `up`, and, with `dangling`, `/c` to a host nothing defines.
fn site(port: u16, up: SocketAddr, a_body: &str, dangling: bool) -> String {
    let c_route = if dangling {
        "  - name: c\n    match: [{uri: {prefix: /c}}]\n    route: [{destination: {host: reviews.default.svc.cluster.local}}]\n"
    } else {
        ""
    };
    format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: gw}}\nspec:\n  servers:\n  - port: {{number: {port}, protocol: HTTP, name: http}}\n    hosts: [\"*\"]\n---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: echo}}\nspec:\n  hosts: [echo.internal]\n  ports: [{{number: 80, name: http, protocol: HTTP}}]\n  resolution: STATIC\n  endpoints: [{{address: {ip}, ports: {{http: {up_port}}}}}]\n---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: vs}}\nspec:\n  hosts: [\"*\"]\n  gateways: [gw]\n  http:\n{c_route}  - name: a\n    match: [{{uri: {{prefix: /a}}}}]\n    directResponse: {{status: 200, body: {{string: \"{a_body}\"}}}}\n  - name: b\n    match: [{{uri: {{prefix: /b}}}}]\n    route: [{{destination: {{host: echo.internal}}}}]\n",
        ip = up.ip(),
        up_port = up.port(),
    )
}

#[test]
fn a_dangling_route_does_not_hold_back_a_good_change_under_a_steady_client() {
    let dir = TempDir::new("dangling-reload").expect("temp dir");
    let up = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port().expect("a free port")));
    let mut echo = Command::new(WARDEN);
    echo.args(["echo", "--http", &up.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _echo = KillOnDrop::spawn(echo).expect("warden echo starts");
    assert!(wait_until(Duration::from_secs(10), || {
        std::net::TcpStream::connect(up).is_ok()
    }));

    let port = free_port().expect("a free port");
    let file = dir.path().join("site.yaml");
    std::fs::write(&file, site(port, up, "a1", false)).expect("written");
    let (_proxy, admin) = start_in(dir.path(), "site.yaml");
    assert_eq!(answer(port, "/a").map(|a| a.1).as_deref(), Some("a1"));
    assert_eq!(answer(port, "/b").map(|a| a.0), Some(200));
    assert_eq!(
        answer(port, "/c").map(|a| a.0),
        Some(404),
        "no /c route yet"
    );

    // The steady client: /a (any body, 200) and /b (200 from the upstream), until told to stop
    // or for at most 60 s.
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let client = {
        let (stop, served, failed) = (stop.clone(), served.clone(), failed.clone());
        thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                for path in ["/a", "/b"] {
                    match answer(port, path) {
                        Some((200, _)) => served.fetch_add(1, Ordering::Relaxed),
                        other => {
                            failures.push((path, other));
                            failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            }
            failures
        })
    };
    assert!(wait_until(Duration::from_secs(10), || served
        .load(Ordering::Relaxed)
        > 200));

    let reloads_before = reloads(admin);
    std::fs::write(&file, site(port, up, "a2", true)).expect("rewritten");
    let mut last = None;
    let live = wait_until(Duration::from_secs(15), || {
        last = answer(port, "/a");
        last.as_ref().is_some_and(|(_, b)| b == "a2")
    });
    assert!(live, "the good change is not live: /a answers {last:?}");
    assert_eq!(
        reloads(admin) - reloads_before,
        1.0,
        "one reload applied it"
    );
    assert_eq!(
        errors(admin),
        0.0,
        "the dangling route did not fail the reload"
    );
    let (status, body) = answer(port, "/c").expect("/c answers");
    assert_eq!(
        (status, body.as_str()),
        (503, ""),
        "the dangling route: Envoy's NC"
    );
    let stats = get(admin, "/stats/prometheus").unwrap_or_default();
    assert!(
        metric_in(&stats, "warden_upstream_errors_total{kind=\"no_cluster\"}") >= 1.0,
        "counted as no cluster"
    );

    // A little more steady traffic on the new config, then the tally.
    let more = served.load(Ordering::Relaxed) + 200;
    assert!(wait_until(Duration::from_secs(10), || served
        .load(Ordering::Relaxed)
        > more));
    stop.store(true, Ordering::Relaxed);
    let failures = client.join().expect("client thread");
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "requests failed elsewhere: {:?}",
        &failures[..failures.len().min(5)]
    );
    eprintln!(
        "steady client: {} served, 0 failed",
        served.load(Ordering::Relaxed)
    );
}

/// A billion-laughs document of `levels` anchors, each aliasing the previous one ten times,
/// after `pad` bytes of an anchored string (as warden-config's alias_bomb test builds them).
fn alias_bomb(levels: usize, pad: usize) -> String {
    let mut text = format!("pad: &a0 \"{}\"\n", "x".repeat(pad));
    for i in 1..levels {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    text
}

/// A process's peak resident set (VmHWM), KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn alias_bombs_are_refused_under_a_steady_client_with_little_memory() {
    let dir = TempDir::new("alias-bomb-reload").expect("temp dir");
    let port = free_port().expect("a free port");
    let file = dir.path().join("gateway.yaml");
    std::fs::write(&file, gateway(port, "kept")).expect("written");
    let (proxy, admin) = start_in(dir.path(), "gateway.yaml");

    let stop = Arc::new(AtomicBool::new(false));
    let (served, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let client = {
        let (stop, served, failed) = (stop.clone(), served.clone(), failed.clone());
        thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                match answer(port, "/") {
                    Some((200, body)) if body == "kept" => served.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
    };
    assert!(wait_until(Duration::from_secs(10), || served
        .load(Ordering::Relaxed)
        > 100));

    let small = alias_bomb(16, 16);
    let large = alias_bomb(12, 1024 * 1024 - 1024);
    assert!((900..=1100).contains(&small.len()), "{}", small.len());
    assert!((1_000_000..=1_100_000).contains(&large.len()));
    let before = peak_rss_kib(proxy.id());
    for (i, bomb) in [small, large].into_iter().enumerate() {
        std::fs::write(&file, bomb).expect("bomb written");
        let refused = wait_until(Duration::from_secs(15), || errors(admin) >= (i + 1) as f64);
        assert!(refused, "reload {} of an alias bomb not refused", i + 1);
    }
    let growth_kib = peak_rss_kib(proxy.id()).saturating_sub(before);
    let more = served.load(Ordering::Relaxed) + 100;
    assert!(wait_until(Duration::from_secs(10), || served
        .load(Ordering::Relaxed)
        > more));
    stop.store(true, Ordering::Relaxed);
    client.join().expect("client thread");
    eprintln!(
        "two alias bombs refused; proxy peak RSS growth {growth_kib} KiB; {} served",
        served.load(Ordering::Relaxed)
    );
    assert_eq!(errors(admin), 2.0, "each bomb one refused reload");
    assert!(growth_kib < 32 * 1024, "peak RSS grew by {growth_kib} KiB");
    assert_eq!(failed.load(Ordering::Relaxed), 0, "failed requests");
}
