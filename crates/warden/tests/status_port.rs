//! Istio's status ports on an injected sidecar, probed as the kubelet probes them: `warden
//! inject` rewrites an app's probes (tests/fixtures/probes/web.yaml) to
//! `/app-health/web/{livez,readyz,startupz}` on 15020 and hands the originals to the sidecar in
//! `ISTIO_KUBE_APP_PROBERS`; `warden proxy` with the injected `--status-port`s and that
//! variable runs them against the app at the pod's address, over real HTTP in a network
//! namespace that stands in for the pod. `/healthz/ready` on 15021 answers 200 once the proxy
//! is up and 503 from SIGTERM on, while a request is still draining. Needs root (the
//! namespace); otherwise prints `skipped: <why>` and passes.

mod common;

use common::WARDEN;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use warden_config::yaml_source::parse_documents;
use warden_testkit::{wait_until, KillOnDrop, NetNs, TempDir};

const POD_IP: &str = "10.250.0.2";
const APP: &str = include_str!("fixtures/probes/web.yaml");

/// The app: `/live` is 200 when the probe's header came along (400 otherwise), `/ready` 503.
fn serve_app(listener: TcpListener) {
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(&stream);
                let mut head = Vec::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push(line);
                }
                let path = head
                    .first()
                    .and_then(|l| l.split(' ').nth(1))
                    .unwrap_or_default()
                    .to_string();
                let has_header = head
                    .iter()
                    .any(|l| l.eq_ignore_ascii_case("x-probe: yes\r\n"));
                let code = match path.as_str() {
                    "/live" if has_header => "200 OK",
                    "/live" => "400 Bad Request",
                    "/ready" => "503 Service Unavailable",
                    _ => "404 Not Found",
                };
                let _ = (&stream).write_all(
                    format!("HTTP/1.1 {code}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .as_bytes(),
                );
            });
        }
    });
}

fn injected(text: &str) -> Value {
    let out = Command::new(WARDEN)
        .args(["inject", "-f", "-", "--no-mesh-credentials"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().expect("stdin").write_all(text.as_bytes())?;
            c.wait_with_output()
        })
        .expect("warden inject");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    parse_documents(&text).expect("YAML")[0].value["spec"]["template"]["spec"].clone()
}

#[test]
fn the_kubelet_probes_the_app_through_the_sidecar_and_the_sidecar_on_15021() {
    if let Some(why) = warden_testkit::netns::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let spec = injected(APP);
    let proxy = &spec["containers"][0];
    let app = &spec["containers"][1];
    assert_eq!(proxy["name"], "warden-proxy");
    assert_eq!(
        proxy["readinessProbe"]["httpGet"],
        serde_json::json!({"path": "/healthz/ready", "port": 15021})
    );
    let status_args: Vec<String> = proxy["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .filter(|a| a.starts_with("--status-port="))
        .map(String::from)
        .collect();
    assert_eq!(status_args, ["--status-port=15021", "--status-port=15020"]);
    let probers = proxy["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "ISTIO_KUBE_APP_PROBERS")
        .and_then(|e| e["value"].as_str())
        .expect("ISTIO_KUBE_APP_PROBERS")
        .to_string();

    let pod = NetNs::new("status").expect("namespace");
    pod.ip(&["addr", "add", &format!("{POD_IP}/32"), "dev", "lo"])
        .expect("pod address");
    let app_listener = pod
        .run_in(|| TcpListener::bind("0.0.0.0:8080"))
        .expect("in the namespace")
        .expect("app port");
    serve_app(app_listener);
    // An upstream that accepts and never answers: a request to it is in flight at SIGTERM.
    let held = Arc::new(AtomicUsize::new(0));
    let hold_listener = pod
        .run_in(|| TcpListener::bind("127.0.0.1:9090"))
        .expect("in the namespace")
        .expect("upstream port");
    let counter = held.clone();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        for s in hold_listener.incoming().flatten() {
            counter.fetch_add(1, Ordering::SeqCst);
            kept.push(s);
        }
    });

    let dir = TempDir::new("status-port").expect("temp dir");
    let upstream = "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: slow}\nspec:\n  hosts: [slow.internal]\n  resolution: STATIC\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  endpoints: [{address: 127.0.0.1, ports: {http: 9090}}]\n";
    let (config, gateway_port) = common::write_config(
        &dir,
        upstream,
        "  - route: [{destination: {host: slow.internal}}]\n    timeout: 60s\n",
    );
    let mut cmd = pod.command(WARDEN);
    cmd.arg("proxy")
        .arg("-c")
        .arg(&config)
        .args(["--admin", "127.0.0.1:15000", "--no-watch"])
        .args(["--concurrency", "1", "--drain-timeout", "30s"])
        .args(["--pod-ip", POD_IP])
        .args(&status_args)
        .env("ISTIO_KUBE_APP_PROBERS", &probers)
        .env("RUST_LOG", "info");
    let warden = KillOnDrop::spawn(cmd).expect("warden proxy starts");

    let curl = |url: &str| -> String {
        pod.exec(
            "curl",
            &[
                "-s",
                "-m",
                "5",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                url,
            ],
        )
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
    };
    let ready_url = format!("http://{POD_IP}:15021/healthz/ready");
    assert!(
        wait_until(Duration::from_secs(20), || curl(&ready_url) == "200"),
        "the sidecar never got ready"
    );
    assert_eq!(curl(&format!("http://{POD_IP}:15020/healthz/ready")), "200");
    // The postStart hook of holdApplicationUntilProxyStarts returns at once now.
    let wait = |timeout: &str| {
        pod.command(WARDEN)
            .args([
                "wait",
                "--url",
                &ready_url,
                "--timeout",
                timeout,
                "--period",
                "100ms",
            ])
            .status()
            .expect("warden wait")
    };
    assert!(wait("10s").success(), "warden wait on a ready sidecar");

    // The app container's probes, as the kubelet sends them after injection.
    let mut probed = Vec::new();
    for (field, want) in [
        ("livenessProbe", "200"),
        ("readinessProbe", "503"),
        ("startupProbe", "200"),
    ] {
        let get = &app[field]["httpGet"];
        let url = format!(
            "http://{POD_IP}:{}{}",
            get["port"],
            get["path"].as_str().expect("a path")
        );
        probed.push(url.clone());
        assert_eq!(curl(&url), want, "{field}: {url}");
    }
    assert_eq!(
        probed,
        [
            format!("http://{POD_IP}:15020/app-health/web/livez"),
            format!("http://{POD_IP}:15020/app-health/web/readyz"),
            format!("http://{POD_IP}:15020/app-health/web/startupz"),
        ]
    );
    assert_eq!(
        curl(&format!("http://{POD_IP}:15020/app-health/other/livez")),
        "404"
    );

    // A request in flight, then SIGTERM: not ready while it drains.
    let mut slow = pod.command("curl");
    slow.args(["-s", "-m", "40", "-o", "/dev/null"])
        .arg(format!("http://127.0.0.1:{gateway_port}/slow"));
    let _in_flight = KillOnDrop::spawn(slow).expect("curl");
    assert!(
        wait_until(Duration::from_secs(10), || held.load(Ordering::SeqCst) > 0),
        "the request never reached the upstream"
    );
    let term = Command::new("kill")
        .args(["-TERM", &warden.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(term.success());
    assert!(
        wait_until(Duration::from_secs(10), || curl(&ready_url) == "503"),
        "the draining sidecar still says it is ready"
    );
    assert!(
        !wait("1s").success(),
        "warden wait gives up on a draining sidecar"
    );
}
