//! Sidecar mode end to end, as a user runs it: two "pods" (network namespaces joined by a veth),
//! each with an app, `warden capture` rules and `warden proxy --mode sidecar` running as uid
//! 1337; a third namespace is a client outside the mesh. The client app calls the server's
//! service VIP; the request crosses both sidecars. Runs as root (CI is root); skips with the
//! reason only where namespaces cannot be made. Every namespace is removed after, also on
//! failure (the guards' drop).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use warden_testkit::netns::{self, NetNs};
use warden_testkit::TempDir;

const WARDEN: &str = env!("CARGO_BIN_EXE_warden");
const VIP: &str = "10.96.0.10";
const CLIENT_IP: &str = "10.231.1.1";
const SERVER_IP: &str = "10.231.1.2";
const OUTSIDER_IP: &str = "10.231.2.3";

/// The registry as `kubectl get svc,endpointslices,pods -o yaml` prints it, plus the server
/// pod's AuthorizationPolicy (only clients of the pods' subnet) and `extra`.
fn registry(extra: &str) -> String {
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
    - {{name: tcp-echo, port: 8078, targetPort: 8078}}
    # No protocol in the name: both sidecars detect it from the first bytes.
    - {{name: headers, port: 81, targetPort: 8081}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: echo-1
    namespace: default
    labels: {{kubernetes.io/service-name: echo}}
  addressType: IPv4
  endpoints:
  - addresses: [{SERVER_IP}]
    conditions: {{ready: true}}
    targetRef: {{kind: Pod, name: api-1, namespace: default}}
  ports:
  - {{name: http, port: 8080}}
  - {{name: tcp-echo, port: 8078}}
  - {{name: headers, port: 8081}}
- apiVersion: v1
  kind: Pod
  metadata: {{name: api-1, namespace: default, labels: {{app: api}}}}
  spec: {{containers: [{{name: echo}}]}}
  status: {{podIP: {SERVER_IP}}}
- apiVersion: v1
  kind: Pod
  metadata: {{name: client-1, namespace: default, labels: {{app: client}}}}
  spec: {{containers: [{{name: client}}]}}
  status: {{podIP: {CLIENT_IP}}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: pods-only, namespace: default}}
spec:
  selector: {{matchLabels: {{app: api}}}}
  action: ALLOW
  rules:
  - from: [{{source: {{ipBlocks: ["10.231.1.0/24"]}}}}]
{extra}"#
    )
}

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(mut c: Command) -> Proc {
    Proc(
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn"),
    )
}

/// One pod: its namespace, app processes, capture rules and sidecar.
struct Pod {
    ns: NetNs,
    procs: Vec<Proc>,
}

impl Pod {
    /// Capture rules, then the sidecar as uid 1337 with `args`, waiting for its admin `/ready`.
    fn start_sidecar(&mut self, config: &std::path::Path, ip: &str, labels: &str, args: &[&str]) {
        let out = self
            .ns
            .exec(WARDEN, &["capture", "--proxy-uid", "1337"])
            .expect("warden capture");
        assert!(out.status.success());
        let mut c = self.ns.command_as(1337, 1337, WARDEN);
        c.env("RUST_LOG", "warn")
            .args(["proxy", "--mode", "sidecar", "-c"])
            .arg(config)
            .args(["--admin", "127.0.0.1:15000", "--concurrency", "1"])
            .args(["--pod-ip", ip, "--label", labels, "--no-watch"])
            .args(args);
        self.procs.push(spawn(c));
        let ready = self.ns.run_in(|| {
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if get("127.0.0.1:15000", "/ready", "127.0.0.1").is_ok_and(|r| r.status == 200) {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            false
        });
        assert!(
            ready.unwrap(),
            "sidecar in {} did not become ready",
            self.ns.name()
        );
    }

    fn admin_stats(&self) -> String {
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
fn topology() -> Option<(Pod, Pod, NetNs, TempDir)> {
    if let Some(why) = netns::unavailable() {
        eprintln!("skipped: {why}");
        return None;
    }
    if !netns::on_path("iptables") {
        eprintln!("skipped: iptables is not installed (apt-get install iptables; test.sh does)");
        return None;
    }
    let client = NetNs::new("cli").unwrap();
    let server = NetNs::new("srv").unwrap();
    let outsider = NetNs::new("out").unwrap();
    netns::veth_pair(
        &client,
        &format!("{CLIENT_IP}/24"),
        &server,
        &format!("{SERVER_IP}/24"),
    )
    .unwrap();
    netns::veth_pair(
        &outsider,
        &format!("{OUTSIDER_IP}/24"),
        &server,
        "10.231.2.2/24",
    )
    .unwrap();
    // The VIP is nowhere: a route makes `connect` leave, and capture redirects it first.
    client
        .ip(&["route", "add", "default", "via", SERVER_IP])
        .unwrap();
    outsider
        .ip(&["route", "add", "default", "via", "10.231.2.2"])
        .unwrap();
    let mut server = Pod {
        ns: server,
        procs: Vec::new(),
    };
    let mut echo = server.ns.command(WARDEN);
    echo.args(["echo", "--http", "0.0.0.0:8080", "--tcp", "0.0.0.0:8078"]);
    server.procs.push(spawn(echo));
    let headers = server
        .ns
        .run_in(|| TcpListener::bind("0.0.0.0:8081").unwrap())
        .unwrap();
    std::thread::spawn(move || serve_headers(headers));
    let up = server.ns.run_in(|| {
        wait_until(|| TcpStream::connect("127.0.0.1:8080").is_ok())
            && wait_until(|| TcpStream::connect("127.0.0.1:8078").is_ok())
    });
    assert!(up.unwrap(), "echo did not start");
    let dir = TempDir::new("sidecar").unwrap();
    Some((
        Pod {
            ns: client,
            procs: Vec::new(),
        },
        server,
        outsider,
        dir,
    ))
}

fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// An app that answers each request with its peer address and its `x-forwarded-for`.
fn serve_headers(listener: TcpListener) {
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

struct Response {
    status: u16,
    body: Vec<u8>,
}

impl Response {
    fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn get(addr: &str, path: &str, host: &str) -> std::io::Result<Response> {
    request(addr, "GET", path, host, &[])
}

/// One HTTP/1.1 request on a new connection (`connection: close`), read to the end.
fn request(
    addr: &str,
    method: &str,
    path: &str,
    host: &str,
    body: &[u8],
) -> std::io::Result<Response> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
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

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
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

#[test]
fn requests_cross_both_sidecars_with_inbound_policy_tcp_and_uploads() {
    let Some((mut client, mut server, outsider, dir)) = topology() else {
        return;
    };
    let config = dir.write("mesh.yaml", &registry("")).unwrap();
    server.start_sidecar(&config, SERVER_IP, "app=api", &[]);
    client.start_sidecar(&config, CLIENT_IP, "app=client", &[]);

    // The client app calls the service VIP; the echo answers through both sidecars.
    let vip = format!("{VIP}:80");
    let r = client
        .ns
        .run_in(|| get(&vip, "/echo?size=5", "echo"))
        .unwrap()
        .unwrap();
    assert_eq!((r.status, r.body.len()), (200, 5), "{}", r.body_text());
    // By the service's other names too.
    for host in ["echo.default.svc.cluster.local", VIP] {
        let r = client.ns.run_in(|| get(&vip, "/", host)).unwrap().unwrap();
        assert_eq!(r.status, 200, "Host {host}");
    }

    // The app sees the inbound passthrough's source and the client pod in x-forwarded-for.
    let r = client
        .ns
        .run_in(|| get(&format!("{VIP}:81"), "/", "echo"))
        .unwrap()
        .unwrap();
    assert_eq!(r.body_text(), format!("peer=127.0.0.6 xff={CLIENT_IP}"));
    let counts = server
        .ns
        .run_in(|| get("127.0.0.1:8080", "/count", "x"))
        .unwrap()
        .unwrap()
        .body_text();
    assert!(counts.contains("\"127.0.0.6\":3"), "{counts}");

    // Both sidecars counted the requests: outbound on the client's route to the service,
    // inbound on the server's.
    let out = client.admin_stats();
    assert!(
        out.contains(r#"route="echo.default.svc.cluster.local:80",code="200"} 3"#),
        "{out}"
    );
    let inbound = server.admin_stats();
    assert!(
        inbound.contains(r#"route="inbound",code="200"} 4"#),
        "{inbound}"
    );

    // A client outside the pods' subnet is denied by the server pod's policy.
    let r = outsider
        .run_in(|| get(&format!("{SERVER_IP}:8080"), "/", "echo"))
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.status, r.body_text().as_str()),
        (403, "RBAC: access denied")
    );

    // TCP through both sidecars, with half-close: all bytes back.
    let sent: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let echoed = client
        .ns
        .run_in(|| {
            let mut s = TcpStream::connect(format!("{VIP}:8078")).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut w = s.try_clone().unwrap();
            let data = sent.clone();
            let writer = std::thread::spawn(move || {
                w.write_all(&data).unwrap();
                w.shutdown(std::net::Shutdown::Write).unwrap();
            });
            let mut back = Vec::new();
            s.read_to_end(&mut back).unwrap();
            writer.join().unwrap();
            back
        })
        .unwrap();
    assert!(
        echoed == sent,
        "TCP echo: {} of {} bytes",
        echoed.len(),
        sent.len()
    );

    // A 10 MB upload passes intact (the echo returns the body it got).
    let upload: Vec<u8> = (0..10_000_000u32).map(|i| (i % 253) as u8).collect();
    let r = client
        .ns
        .run_in(|| request(&vip, "POST", "/echo", "echo", &upload))
        .unwrap()
        .unwrap();
    assert_eq!(r.status, 200);
    assert!(
        r.body == upload,
        "upload: {} of {} bytes back",
        r.body.len(),
        upload.len()
    );

    // ALLOW_ANY: a destination the registry does not know passes through (to the pod's own
    // port, which the server pod's inbound capture and sidecar then serve).
    let r = client
        .ns
        .run_in(|| get(&format!("{SERVER_IP}:8080"), "/echo?size=2", "other"))
        .unwrap()
        .unwrap();
    assert_eq!((r.status, r.body.len()), (200, 2));
    drop(outsider);
}

#[test]
fn seed_000_inbound_local_limit_and_registry_only() {
    let Some((mut client, mut server, _outsider, dir)) = topology() else {
        return;
    };
    // Seed 000's local rate limit EnvoyFilter, as written (10 requests per minute, inbound, for
    // the `app: api` workload).
    let seed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/ratelimit-local/seed-envoyfilter-local.yaml"
    ))
    .unwrap();
    let config = dir
        .write("mesh.yaml", &registry(&format!("---\n{seed}")))
        .unwrap();
    server.start_sidecar(&config, SERVER_IP, "app=api", &[]);
    client.start_sidecar(
        &config,
        CLIENT_IP,
        "app=client",
        &["--outbound-traffic-policy", "REGISTRY_ONLY"],
    );
    let vip = format!("{VIP}:80");
    let codes: Vec<u16> = client
        .ns
        .run_in(|| {
            (0..12)
                .map(|_| get(&vip, "/", "echo").unwrap().status)
                .collect()
        })
        .unwrap();
    assert_eq!(codes[..10], [200; 10], "{codes:?}");
    assert_eq!(codes[10..], [429, 429], "{codes:?}");

    // REGISTRY_ONLY: an unknown host on an HTTP port gets 502; an unknown TCP destination
    // is closed without a byte.
    let r = client
        .ns
        .run_in(|| get(&format!("{SERVER_IP}:80"), "/", "unknown.example"))
        .unwrap()
        .unwrap();
    assert_eq!(r.status, 502);
    assert_closed_unanswered(&client.ns, &format!("{SERVER_IP}:8080"));
}

/// An HTTP request from `ns` to `addr` is closed with nothing written (a reset is a close too).
fn assert_closed_unanswered(ns: &NetNs, addr: &str) {
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

/// Run `warden` with `args` (as root, outside the namespaces); panics with its output on failure.
fn warden(args: &[&str]) {
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
fn mesh_identity(ca: &std::path::Path, out: &std::path::Path, service_account: &str) {
    let (ca, out) = (ca.to_str().unwrap(), out.to_str().unwrap());
    warden(&[
        "ca",
        "issue",
        "--dir",
        ca,
        "--namespace",
        "default",
        "--service-account",
        service_account,
        "--out",
        out,
        "--ttl",
        "1h",
    ]);
    for f in ["", "tls.crt", "tls.key", "ca.crt"] {
        std::os::unix::fs::chown(std::path::Path::new(out).join(f), Some(1337), Some(1337))
            .unwrap();
    }
}

#[test]
fn mesh_mtls_strict_server_with_a_principal_policy() {
    let Some((mut client, mut server, outsider, dir)) = topology() else {
        return;
    };
    let ca = dir.path().join("ca");
    warden(&["ca", "init", "--dir", ca.to_str().unwrap()]);
    let (server_id, client_id, intruder_id) = (
        dir.path().join("api-id"),
        dir.path().join("client-id"),
        dir.path().join("intruder-id"),
    );
    mesh_identity(&ca, &server_id, "api");
    mesh_identity(&ca, &client_id, "client");
    mesh_identity(&ca, &intruder_id, "intruder");
    // The server pod takes mTLS only, and only from the client's identity; the client's
    // sidecar originates ISTIO_MUTUAL to the service (auto mTLS on port 80, a DestinationRule
    // on 8078).
    let extra = r#"---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: api-strict, namespace: default}
spec:
  selector: {matchLabels: {app: api}}
  mtls: {mode: STRICT}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo-mtls, namespace: default}
spec:
  host: echo.default.svc.cluster.local
  trafficPolicy:
    portLevelSettings: [{port: {number: 8078}, tls: {mode: ISTIO_MUTUAL}}]
"#;
    // Port 80 by auto mTLS (the pod carries the injector's tlsMode label), 8078 by the rule.
    let yaml = registry(extra)
        .replace(
            r#"ipBlocks: ["10.231.1.0/24"]"#,
            "principals: [cluster.local/ns/default/sa/client]",
        )
        .replace(
            "labels: {app: api}}",
            "labels: {app: api, security.istio.io/tlsMode: istio}}",
        );
    let config = dir.write("mesh.yaml", &yaml).unwrap();
    let id = |p: &std::path::Path| p.to_str().unwrap().to_string();
    server.start_sidecar(
        &config,
        SERVER_IP,
        "app=api",
        &[
            "--mesh-credentials",
            &id(&server_id),
            "--service-account",
            "api",
        ],
    );
    client.start_sidecar(
        &config,
        CLIENT_IP,
        "app=client",
        &[
            "--mesh-credentials",
            &id(&client_id),
            "--service-account",
            "client",
        ],
    );

    // HTTP and TCP cross both sidecars over mTLS; the policy sees the client's identity.
    let vip = format!("{VIP}:80");
    let r = client
        .ns
        .run_in(|| get(&vip, "/echo?size=5", "echo"))
        .unwrap()
        .unwrap();
    assert_eq!((r.status, r.body.len()), (200, 5), "{}", r.body_text());
    let echoed = client
        .ns
        .run_in(|| {
            let mut s = TcpStream::connect(format!("{VIP}:8078")).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            s.write_all(b"over mtls").unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut back = Vec::new();
            s.read_to_end(&mut back).unwrap();
            back
        })
        .unwrap();
    assert_eq!(echoed, b"over mtls");
    let stats = server.admin_stats();
    assert!(
        stats.contains("warden_downstream_tls_handshakes_total 2"),
        "{stats}"
    );

    // A plaintext client (no sidecar) is refused by the STRICT server: closed, no answer.
    assert_closed_unanswered(&outsider, &format!("{SERVER_IP}:8080"));
    let stats = server.admin_stats();
    assert!(
        stats.contains(
            r#"warden_downstream_tls_handshake_failures_total{reason="plaintext_refused"} 1"#
        ),
        "{stats}"
    );

    // Another mesh identity gets through mTLS but not through the policy.
    drop(client.procs.pop());
    client.start_sidecar(
        &config,
        CLIENT_IP,
        "app=client",
        &[
            "--mesh-credentials",
            &id(&intruder_id),
            "--service-account",
            "intruder",
        ],
    );
    let r = client
        .ns
        .run_in(|| get(&vip, "/", "echo"))
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.status, r.body_text().as_str()),
        (403, "RBAC: access denied")
    );
}
