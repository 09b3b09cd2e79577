//! Two "pods" for the sidecar tests: network namespaces joined by a veth, each with an app,
//! `warden capture` rules and `warden proxy --mode sidecar` as uid 1337, plus an outsider
//! namespace; HTTP/1.1 on a new connection per request, read to the end. Everything is
//! removed on drop (the guards), also on failure.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use warden_testkit::{netns, spawn_listening, KillOnDrop, NetNs, RunAs, TempDir};

use super::WARDEN;

pub const VIP: &str = "10.96.0.10";
pub const CLIENT_IP: &str = "10.231.1.1";
pub const SERVER_IP: &str = "10.231.1.2";

/// Service `echo` (HTTP 80 -> 8080, TCP 78 -> 8078) on the server pod `api-1` (service account
/// `api`, labelled as a meshed pod) and the client pod `client-1` (service account `client`),
/// as a `List`; `more_items` (List items, `- ` each) follow.
pub fn echo_api_and_client(more_items: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {{name: echo, namespace: default}}
  spec:
    clusterIP: {VIP}
    selector: {{app: api}}
    ports:
    - {{name: http, port: 80, targetPort: 8080}}
    - {{name: tcp-echo, port: 78, targetPort: 8078}}
- apiVersion: v1
  kind: Pod
  metadata:
    name: api-1
    namespace: default
    labels: {{app: api, version: v2, security.istio.io/tlsMode: istio}}
  spec: {{serviceAccountName: api, containers: [{{name: echo}}]}}
  status: {{podIP: {SERVER_IP}}}
- apiVersion: v1
  kind: Pod
  metadata: {{name: client-1, namespace: default, labels: {{app: client}}}}
  spec: {{serviceAccountName: client, containers: [{{name: client}}]}}
  status: {{podIP: {CLIENT_IP}}}
{more_items}"#
    )
}

/// `promtool check metrics` on `text`: clean, or only the lint Istio's own duration name gets
/// (exit 3; Envoy's exposition gets the same line).
pub fn promtool_accepts(text: &str) -> Result<(), String> {
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    {
        let mut stdin = p.stdin.take().ok_or("promtool's stdin")?;
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| e.to_string())?;
    }
    let out = p.wait_with_output().map_err(|e| e.to_string())?;
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let istio_name =
        "istio_request_duration_milliseconds use base unit \"seconds\" instead of \"milliseconds\"";
    if out.status.success()
        || (out.status.code() == Some(3)
            && said
                .lines()
                .filter(|l| !l.is_empty())
                .all(|l| l == istio_name))
    {
        Ok(())
    } else {
        Err(format!("({:?}) {said}", out.status))
    }
}

/// istio.io's task cluster as `kubectl get -o yaml` lists it: httpbin (Service on `VIP`,
/// EndpointSlice, Pod on the server pod, labelled as Istio's injector labels a meshed pod, so
/// a client sidecar with mesh credentials speaks mTLS to it) and the sleep Pod (the client
/// pod), in `foo`; the opening of a `List` whose items a test continues.
pub fn httpbin_and_sleep() -> String {
    format!(
        r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {{name: httpbin, namespace: foo, labels: {{app: httpbin}}}}
  spec:
    clusterIP: {VIP}
    selector: {{app: httpbin}}
    ports: [{{name: http, port: 8000, targetPort: 8080}}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: httpbin-1
    namespace: foo
    labels: {{kubernetes.io/service-name: httpbin}}
  addressType: IPv4
  endpoints:
  - addresses: [{SERVER_IP}]
    conditions: {{ready: true}}
    targetRef: {{kind: Pod, name: httpbin-1, namespace: foo}}
  ports: [{{name: http, port: 8080}}]
- apiVersion: v1
  kind: Pod
  metadata:
    name: httpbin-1
    namespace: foo
    labels: {{app: httpbin, security.istio.io/tlsMode: istio}}
  spec: {{containers: [{{name: httpbin}}]}}
  status: {{podIP: {SERVER_IP}}}
- apiVersion: v1
  kind: Pod
  metadata: {{name: sleep-1, namespace: foo, labels: {{app: sleep}}}}
  spec: {{containers: [{{name: sleep}}]}}
  status: {{podIP: {CLIENT_IP}}}
"#
    )
}
pub const OUTSIDER_IP: &str = "10.231.2.3";

/// The sidecar's uid (and gid), as Istio's proxy runs.
pub const PROXY_UID: u32 = 1337;

/// One pod: its namespace, app processes, capture rules and sidecar.
pub struct Pod {
    pub ns: NetNs,
    pub procs: Vec<KillOnDrop>,
    /// The running sidecar's pid (the latest `start_sidecar`), for [`Pod::reload_sidecar`].
    pub sidecar: Option<u32>,
    /// `warden` as uid 1337 can execute it (the checkout may sit in a 0700 directory).
    proxy: Option<RunAs>,
}

impl Pod {
    pub fn new(ns: NetNs) -> Pod {
        Pod {
            ns,
            procs: Vec::new(),
            sidecar: None,
            proxy: None,
        }
    }

    /// `warden echo` in this pod serving HTTP on 0.0.0.0:`http` (and TCP on `tcp`), waited for.
    pub fn start_echo(&mut self, http: u16, tcp: Option<u16>) {
        let mut echo = self.ns.command(WARDEN);
        echo.args(["echo", "--http", &format!("0.0.0.0:{http}")]);
        let mut ports = vec![http];
        if let Some(tcp) = tcp {
            echo.args(["--tcp", &format!("0.0.0.0:{tcp}")]);
            ports.push(tcp);
        }
        self.procs.push(spawn_listening(&self.ns, echo, &ports));
    }

    /// Capture rules, then the sidecar as uid 1337 with `args`, waiting for its admin `/ready`.
    pub fn start_sidecar(
        &mut self,
        config: &std::path::Path,
        ip: &str,
        labels: &str,
        args: &[&str],
    ) {
        self.start_sidecar_capturing(config, ip, labels, &[], args);
    }

    /// [`Pod::start_sidecar`] with more `warden capture` flags (what Istio's
    /// `traffic.sidecar.istio.io/*` pod annotations set), e.g. `--exclude-outbound-ports`.
    pub fn start_sidecar_capturing(
        &mut self,
        config: &std::path::Path,
        ip: &str,
        labels: &str,
        capture: &[&str],
        args: &[&str],
    ) {
        let uid = PROXY_UID.to_string();
        let mut capture_args = vec!["capture", "--proxy-uid", &uid];
        capture_args.extend_from_slice(capture);
        let out = self.ns.exec(WARDEN, &capture_args).expect("warden capture");
        assert!(out.status.success());
        let proxy = self.proxy.get_or_insert_with(|| {
            RunAs::new(PROXY_UID, PROXY_UID, WARDEN).expect("warden executable by uid 1337")
        });
        let mut c = self.ns.command_as(proxy);
        c.env("RUST_LOG", "warn")
            .args(["proxy", "--mode", "sidecar", "-c"])
            .arg(config)
            .args(["--admin", "127.0.0.1:15000", "--concurrency", "1"])
            .args(["--pod-ip", ip, "--label", labels, "--no-watch"])
            .args(args);
        let sidecar = KillOnDrop::spawn(c).expect("spawn the sidecar");
        // nsenter execs the program (no --fork), so its pid is the sidecar's.
        self.sidecar = Some(sidecar.id());
        self.procs.push(sidecar);
        let ready = self.ns.run_in(|| {
            warden_testkit::wait_until(Duration::from_secs(20), || {
                get("127.0.0.1:15000", "/ready", "127.0.0.1").is_ok_and(|r| r.status == 200)
            })
        });
        assert!(
            ready.unwrap(),
            "sidecar in {} did not become ready",
            self.ns.name()
        );
    }

    /// SIGHUP the sidecar (it runs with `--no-watch`) and wait until it has swapped in the
    /// config the file now holds; panics when the reload failed or never came.
    pub fn reload_sidecar(&self) {
        let pid = self.sidecar.expect("a sidecar was started") as libc::pid_t;
        let before = self.metric("warden_config_reloads_total");
        let errors = self.metric("warden_config_reload_errors_total");
        // SAFETY: a signal to the child process this pod started and still holds.
        assert_eq!(
            unsafe { libc::kill(pid, libc::SIGHUP) },
            0,
            "SIGHUP the sidecar"
        );
        let reloaded = wait_until(|| {
            self.metric("warden_config_reloads_total") > before
                || self.metric("warden_config_reload_errors_total") > errors
        });
        assert!(
            reloaded && self.metric("warden_config_reload_errors_total") == errors,
            "sidecar in {} did not reload: {}",
            self.ns.name(),
            self.admin_stats()
        );
    }

    /// A series (its name and labels as printed) from the sidecar's `/stats/prometheus`; 0 when
    /// absent.
    pub fn metric(&self, series: &str) -> f64 {
        super::metric_in(&self.admin_stats(), series)
    }

    pub fn admin_stats(&self) -> String {
        self.ns
            .run_in(|| get("127.0.0.1:15000", "/stats/prometheus", "127.0.0.1"))
            .unwrap()
            .expect("stats")
            .body_text()
    }
}

/// Three namespaces: client pod and server pod on one veth, an outsider on another veth to
/// the server pod. The server pod runs `warden echo` (HTTP 8080, TCP 8078) and a header
/// reporter on 8081.
pub fn topology() -> Option<(Pod, Pod, NetNs, TempDir)> {
    if !pods_can_run() {
        return None;
    }
    // The VIP is nowhere: the client's default route makes `connect` leave, and capture
    // redirects it first.
    let (client, server) = netns::pod_pair("cli", CLIENT_IP, "srv", SERVER_IP).unwrap();
    let outsider = NetNs::new("out").unwrap();
    netns::veth_pair(
        &outsider,
        &format!("{OUTSIDER_IP}/24"),
        &server,
        "10.231.2.2/24",
    )
    .unwrap();
    outsider
        .ip(&["route", "add", "default", "via", "10.231.2.2"])
        .unwrap();
    let mut server = Pod::new(server);
    server.start_echo(8080, Some(8078));
    let headers = server
        .ns
        .run_in(|| TcpListener::bind("0.0.0.0:8081").unwrap())
        .unwrap();
    std::thread::spawn(move || serve_headers(headers));
    let dir = TempDir::new("sidecar").unwrap();
    Some((Pod::new(client), server, outsider, dir))
}

/// Whether pods can be made here (root, namespaces, iptables); says why not when they cannot.
fn pods_can_run() -> bool {
    if let Some(why) = netns::unavailable() {
        eprintln!("skipped: {why}");
        return false;
    }
    if !netns::on_path("iptables") {
        eprintln!("skipped: iptables is not installed (apt-get install iptables; test.sh does)");
        return false;
    }
    true
}

static NEXT_PORT: AtomicU64 = AtomicU64::new(0);

/// Pods on one switch (a bridge in a namespace of its own), one per address in `ips` (a /24
/// of one subnet each), with a default route out of their one interface: a service VIP is
/// nowhere, and capture redirects calls to it before they leave. No apps run yet. `None`
/// (having said why) where pods cannot be made.
pub fn bridged_pods(ips: &[&str]) -> Option<(Vec<Pod>, NetNs, TempDir)> {
    if !pods_can_run() {
        return None;
    }
    let switch = NetNs::new("sw").unwrap();
    switch
        .ip(&["link", "add", "br0", "type", "bridge"])
        .unwrap();
    switch.ip(&["link", "set", "br0", "up"]).unwrap();
    let pods = ips
        .iter()
        .map(|ip| {
            let ns = NetNs::new("pod").unwrap();
            // Interface names are limited to 15 bytes.
            let n = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
            let id = std::process::id() % 100_000;
            let (port, eth) = (format!("bp{id}x{n}"), format!("be{id}x{n}"));
            netns::run(
                "ip",
                &[
                    "link",
                    "add",
                    &port,
                    "netns",
                    switch.name(),
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &eth,
                    "netns",
                    ns.name(),
                ],
            )
            .unwrap();
            switch
                .ip(&["link", "set", &port, "master", "br0", "up"])
                .unwrap();
            ns.ip(&["addr", "add", &format!("{ip}/24"), "dev", &eth])
                .unwrap();
            ns.ip(&["link", "set", &eth, "up"]).unwrap();
            ns.ip(&["route", "add", "default", "dev", &eth]).unwrap();
            Pod::new(ns)
        })
        .collect();
    Some((pods, switch, TempDir::new("pods").unwrap()))
}

/// [`warden_testkit::wait_until`] with the pods' 10 s limit.
pub fn wait_until(f: impl FnMut() -> bool) -> bool {
    warden_testkit::wait_until(Duration::from_secs(10), f)
}

/// An app that answers each request with its peer address and its `x-forwarded-for`.
pub fn serve_headers(listener: TcpListener) {
    for stream in listener.incoming().flatten() {
        std::thread::spawn(move || {
            let peer = stream
                .peer_addr()
                .map(|p| p.ip().to_string())
                .unwrap_or_default();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut xff = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some(v) = line.strip_prefix("x-forwarded-for: ") {
                    xff = v.to_string();
                }
            }
            let body = format!("peer={peer} xff={xff}");
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        });
    }
}

pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Response {
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub fn get(addr: &str, path: &str, host: &str) -> std::io::Result<Response> {
    request(addr, "GET", path, host, &[])
}

/// One HTTP/1.1 request on a new connection (`connection: close`), read to the end.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    host: &str,
    body: &[u8],
) -> std::io::Result<Response> {
    request_with(addr, method, path, host, &[], body)
}

/// [`request`] with more request headers (`name`, `value`).
pub fn request_with(
    addr: &str,
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Response> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    let extra: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no response head: {raw:?}")))?;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line: {head}")))?;
    let mut body = raw[end + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Ok(Response { status, body })
}

pub fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&raw[..eol]).trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[eol + 4 + size..];
    }
    out
}

/// An HTTP request from `ns` to `addr` is closed with nothing written (a reset is a close too).
pub fn assert_closed_unanswered(ns: &NetNs, addr: &str) {
    let read = ns
        .run_in(|| {
            let mut s = TcpStream::connect(addr)?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            let _ = s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n");
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).map(|_| buf)
        })
        .unwrap();
    match read {
        Ok(bytes) => assert!(bytes.is_empty(), "{:?}", String::from_utf8_lossy(&bytes)),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
}

/// Send `data` on a new TCP connection to `addr`, half-close, and read all that comes back.
/// A connection closed unanswered reads as nothing, also when it ends with a reset.
pub fn tcp_exchange(addr: &str, data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    // A peer that already closed fails the write or the shutdown (EPIPE, ECONNRESET,
    // ENOTCONN); what the read then finds says how the connection ended.
    let _ = s
        .write_all(data)
        .and_then(|()| s.shutdown(std::net::Shutdown::Write));
    let mut back = Vec::new();
    match s.read_to_end(&mut back) {
        Ok(_) => Ok(back),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(back),
        Err(e) => Err(e),
    }
}

/// Run `warden` with `args` (as root, outside the namespaces); panics with its output on failure.
pub fn warden(args: &[&str]) {
    let out = Command::new(WARDEN)
        .args(args)
        .output()
        .expect("warden runs");
    assert!(
        out.status.success(),
        "warden {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A workload certificate from the test's mesh CA, readable by the sidecar's uid.
pub fn mesh_identity(ca: &std::path::Path, out: &std::path::Path, service_account: &str) {
    mesh_identity_in(ca, out, "default", service_account);
}

/// [`mesh_identity`] of a service account in `namespace`.
pub fn mesh_identity_in(
    ca: &std::path::Path,
    out: &std::path::Path,
    namespace: &str,
    service_account: &str,
) {
    let (ca, out) = (ca.to_str().unwrap(), out.to_str().unwrap());
    warden(&[
        "ca",
        "issue",
        "--dir",
        ca,
        "--namespace",
        namespace,
        "--service-account",
        service_account,
        "--out",
        out,
        "--ttl",
        "1h",
    ]);
    for f in ["", "tls.crt", "tls.key", "ca.crt"] {
        std::os::unix::fs::chown(
            std::path::Path::new(out).join(f),
            Some(PROXY_UID),
            Some(PROXY_UID),
        )
        .unwrap();
    }
}
