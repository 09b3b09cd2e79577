//! Config the Kubernetes way, with `warden proxy` as a process and its files laid out as the
//! kubelet writes volumes (common/atomic_writer.rs): pod identity from downward-API files, a
//! ConfigMap update (`..data` swap) reloading the config, and a Secret's certificate rotated
//! the same way under a steady HTTPS client with no failed request.

mod common;

use common::atomic_writer::AtomicWriterDir;
use common::{get, WARDEN};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warden_testkit::pki::{Leaf, Pki};
use warden_testkit::{free_port, wait_until, KillOnDrop, TempDir};

/// `warden proxy ARGS` on loopback with its admin on a free port, waited for until ready.
fn start(args: &[&str]) -> (KillOnDrop, SocketAddr) {
    let admin = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port().expect("a free port")));
    let mut c = Command::new(WARDEN);
    c.arg("proxy")
        .args(args)
        .args(["--listen-host", "127.0.0.1", "--concurrency", "1"])
        .arg(format!("--admin={admin}"))
        .env("RUST_LOG", "warn")
        .env_remove("POD_NAMESPACE")
        .env_remove("SERVICE_ACCOUNT")
        .stderr(Stdio::null());
    let child = KillOnDrop::spawn(c).expect("warden proxy starts");
    let ready = wait_until(Duration::from_secs(20), || {
        get(admin, "/ready").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    });
    assert!(ready, "warden proxy did not get ready");
    (child, admin)
}

fn gateway(port: u16, body: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: bookinfo}}\nspec:\n  servers:\n  - port: {{number: {port}, protocol: HTTP, name: http}}\n    hosts: [\"*\"]\n---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: vs, namespace: bookinfo}}\nspec:\n  hosts: [\"*\"]\n  gateways: [gw]\n  http:\n  - directResponse: {{status: 200, body: {{string: \"{body}\"}}}}\n"
    )
}

/// The body of a GET answered 200, else `None`.
fn body_of(port: u16, path: &str) -> Option<String> {
    let r = get(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), path)?;
    let (head, body) = r.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

fn status_of(port: u16, path: &str) -> Option<u16> {
    let r = get(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), path)?;
    r.get(9..12)?.parse().ok()
}

#[test]
fn the_pod_identity_comes_from_downward_api_files() {
    let dir = TempDir::new("podinfo").expect("temp dir");
    let port = free_port().expect("a free port");
    // Denies /admin to the reviews workload of namespace bookinfo only.
    let policy = "---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: deny-admin, namespace: bookinfo}\nspec:\n  selector: {matchLabels: {app: reviews}}\n  action: DENY\n  rules:\n  - to: [{operation: {paths: [/admin]}}]\n";
    let config = dir
        .write("gw.yaml", &format!("{}{policy}", gateway(port, "hello")))
        .expect("config");
    let podinfo = AtomicWriterDir::new(
        &dir.path().join("podinfo"),
        &[
            (
                "labels",
                "app=\"reviews\"\npod-template-hash=\"7f8c\"\nversion=\"v2\"\n",
            ),
            (
                "annotations",
                "kubernetes.io/config.seen=\"2026-12-07T06:00:00Z\"\n",
            ),
            ("namespace", "bookinfo"),
            ("name", "reviews-v2-7f8c-abcde"),
        ],
    );
    let config = config.display().to_string();
    let info = format!("--pod-info={}", podinfo.path().display());

    // Labels and namespace from the files: the policy selects this proxy.
    let (proxy, _) = start(&["-c", &config, "--no-watch", &info]);
    assert_eq!(status_of(port, "/admin"), Some(403));
    assert_eq!(status_of(port, "/"), Some(200));
    drop(proxy);

    // Flags win over the files: another namespace, the policy no longer applies.
    let (proxy, _) = start(&["-c", &config, "--no-watch", &info, "--namespace", "other"]);
    assert_eq!(status_of(port, "/admin"), Some(200));
    drop(proxy);

    // Without the files the proxy is nobody in particular.
    let (_proxy, _) = start(&["-c", &config, "--no-watch"]);
    assert_eq!(status_of(port, "/admin"), Some(200));
}

#[test]
fn a_configmap_update_is_served_without_a_restart() {
    let dir = TempDir::new("configmap").expect("temp dir");
    for as_file in [false, true] {
        let port = free_port().expect("a free port");
        let mut volume = AtomicWriterDir::new(
            &dir.path().join(format!("config-{as_file}")),
            &[("gateway.yaml", &gateway(port, "v1"))],
        );
        // The folder (every key), or one key's file: a symlink into `..data`.
        let path = if as_file {
            volume.path().join("gateway.yaml")
        } else {
            volume.path().to_path_buf()
        };
        let (_proxy, _) = start(&["-c", &path.display().to_string()]);
        assert_eq!(body_of(port, "/").as_deref(), Some("v1"));
        volume.update(&[("gateway.yaml", &gateway(port, "v2"))]);
        let mut last = None;
        let swapped = wait_until(Duration::from_secs(15), || {
            last = body_of(port, "/");
            last.as_deref() == Some("v2")
        });
        assert!(
            swapped,
            "-c {} still serves {last:?} after the ..data swap",
            path.display()
        );
    }
}

/// A gateway HTTPS server whose certificate is the Secret `gw-cert` of `--credentials-dir`.
fn tls_gateway(port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: gw}}\nspec:\n  servers:\n  - port: {{number: {port}, protocol: HTTPS, name: https}}\n    hosts: [gw.example.com]\n    tls: {{mode: SIMPLE, credentialName: gw-cert}}\n---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: vs}}\nspec:\n  hosts: [gw.example.com]\n  gateways: [gw]\n  http:\n  - directResponse: {{status: 200, body: {{string: ok}}}}\n"
    )
}

/// One HTTPS request on a new connection with curl: the served certificate's subject CN,
/// or `None` when the request failed.
fn https_get(port: u16, ca: &Path) -> Option<String> {
    let out = Command::new("curl")
        .args(["-sv", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg("--cacert")
        .arg(ca)
        .arg("--resolve")
        .arg(format!("gw.example.com:{port}:127.0.0.1"))
        .arg(format!("https://gw.example.com:{port}/"))
        .output()
        .ok()?;
    if String::from_utf8_lossy(&out.stdout) != "200" {
        return None;
    }
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    log.lines()
        .find_map(|l| l.split("subject: CN=").nth(1))
        .map(|cn| cn.trim().to_string())
}

#[test]
fn a_secret_volume_rotation_is_served_with_no_failed_request() {
    if !warden_testkit::netns::on_path("curl") {
        eprintln!("skipped: curl is not installed");
        return;
    }
    let pki = Pki::new("secret");
    let leaf = |cn: &str| Leaf {
        common_name: cn.into(),
        dns: vec!["gw.example.com".into()],
        ..Leaf::default()
    };
    let ca = std::fs::read_to_string(&pki.ca_path).expect("ca");
    let (cert, key) = pki.issue_pem(&leaf("first"));
    let dir = TempDir::new("secret-volume").expect("temp dir");
    let mut secret = AtomicWriterDir::new(
        &dir.path().join("credentials/gw-cert"),
        &[("ca.crt", &ca), ("tls.crt", &cert), ("tls.key", &key)],
    );
    let port = free_port().expect("a free port");
    let config = dir.write("gw.yaml", &tls_gateway(port)).expect("config");
    let creds = format!(
        "--credentials-dir={}",
        dir.path().join("credentials").display()
    );
    let (_proxy, _) = start(&["-c", &config.display().to_string(), &creds]);

    // A steady client: one request after another, each on a new TLS connection, bounded in
    // count and time.
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let client = {
        let (stop, seen, ca) = (stop.clone(), seen.clone(), pki.ca_path.clone());
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            for _ in 0..3000 {
                if stop.load(Ordering::Relaxed) || std::time::Instant::now() > deadline {
                    break;
                }
                let r = https_get(port, &ca);
                seen.lock().expect("lock").push(r);
            }
        })
    };
    let count = |cn: &str| {
        seen.lock()
            .expect("lock")
            .iter()
            .filter(|r| r.as_deref() == Some(cn))
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(20), || count("first") >= 20),
        "the first certificate was served"
    );
    // The kubelet's update of the Secret: new files beside the old, one `..data` swap.
    let (cert, key) = pki.issue_pem(&leaf("second"));
    secret.update(&[("ca.crt", &ca), ("tls.crt", &cert), ("tls.key", &key)]);
    let rotated = wait_until(Duration::from_secs(20), || count("second") >= 20);
    stop.store(true, Ordering::Relaxed);
    client.join().expect("client");
    let seen = seen.lock().expect("lock");
    let failed = seen.iter().filter(|r| r.is_none()).count();
    assert!(rotated, "the new certificate was served: {seen:?}");
    assert_eq!(failed, 0, "{} requests, {failed} failed", seen.len());
    // Once the new certificate is served, the old one is not any more.
    let first_new = seen
        .iter()
        .position(|r| r.as_deref() == Some("second"))
        .expect("served");
    assert!(
        seen[first_new..]
            .iter()
            .all(|r| r.as_deref() == Some("second")),
        "{seen:?}"
    );
}

#[test]
fn the_pods_proxy_config_annotation_sets_the_workers_and_the_drain() {
    let dir = TempDir::new("podinfo-config").expect("temp dir");
    let port = free_port().expect("a free port");
    let config = dir
        .write("gw.yaml", &gateway(port, "hello"))
        .expect("config");
    // As the kubelet writes annotations: Go-quoted values, a YAML ProxyConfig with newlines.
    let _podinfo = AtomicWriterDir::new(
        &dir.path().join("podinfo"),
        &[
            (
                "annotations",
                "proxy.istio.io/config=\"concurrency: 3\\nterminationDrainDuration: 2s\\ntracing: {sampling: 1}\\n\"\nsidecar.istio.io/userVolume=\"[]\"\n",
            ),
            ("namespace", "default"),
            ("name", "web-abc"),
        ],
    );
    let admin = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port().expect("a free port")));
    let log = dir.path().join("stderr.log");
    let mut c = Command::new(WARDEN);
    c.arg("proxy")
        .arg("-c")
        .arg(&config)
        .arg("--pod-info")
        .arg(dir.path().join("podinfo"))
        .args(["--listen-host", "127.0.0.1", "--no-watch"])
        .arg(format!("--admin={admin}"))
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(std::fs::File::create(&log).expect("log file"));
    let mut child = KillOnDrop::spawn(c).expect("warden proxy starts");
    let ready = wait_until(Duration::from_secs(20), || {
        get(admin, "/ready").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    });
    assert!(ready, "warden proxy did not get ready");
    let pid = child.0.id();
    let workers = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .filter_map(|t| t.ok())
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.starts_with("warden-worker"))
        })
        .count();
    assert_eq!(
        workers, 3,
        "concurrency: 3 of the pod's proxy.istio.io/config"
    );
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    let exited = wait_until(Duration::from_secs(20), || {
        matches!(child.0.try_wait(), Ok(Some(_)))
    });
    assert!(exited, "warden proxy did not stop");
    let text = std::fs::read_to_string(&log).expect("log");
    for line in [
        "proxy.istio.io/config: tracing is not supported by warden: ignored",
        "pod annotation sidecar.istio.io/userVolume is not supported by warden: ignored",
        "draining deadline=2s",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}
